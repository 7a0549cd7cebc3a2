package arrowschema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// ErrIPCTooLarge marks an Arrow IPC message whose decoded size passes a limit of IPCStreamGuard.
var ErrIPCTooLarge = errors.New("arrow IPC data too large")

// DefaultMaxIPCMessageBytes is IPCStreamGuard's bound on the decoded size of one message when
// its MaxMessageBytes is 0.
const DefaultMaxIPCMessageBytes = 1 << 30

// IPCStreamGuard checks the messages of one Arrow IPC stream, in order, before arrow-go decodes
// them. arrow-go trusts a record batch's metadata: it allocates a compressed buffer by the
// uncompressed length its first 8 bytes declare (2^40 is a fatal out of memory), sizes a view
// array's buffer list by its variadic count, and takes field nodes and buffers by position
// without checking that the batch lists as many as the schema needs (a batch listing too few or
// too many buffers may decode into arrays of the wrong buffers). The guard requires of every
// record and dictionary batch:
//   - exactly the field nodes, buffers and variadic buffer counts its schema's layout needs (for a
//     dictionary batch, the layout of the dictionary's value type; its id one the schema declares);
//   - every buffer inside the body, every node's length and null count non-negative and sane;
//   - a known compression codec, every declared decompressed size within the limits, and every
//     compressed buffer decoding to exactly the size it declares (no more, no fewer bytes).
//
// The first message must be the schema (checked as CheckIPCSchemaMessage does). An
// IPCStreamGuard is not safe for concurrent use.
type IPCStreamGuard struct {
	// MaxMessageBytes bounds the decoded size of one message: the sum of its buffers as they are
	// in memory once decompressed (a compressed buffer counts the size its prefix declares).
	// 0 means DefaultMaxIPCMessageBytes.
	MaxMessageBytes int64
	// MaxStreamBytes bounds the decoded size of all the record and dictionary batches of the
	// stream together. 0 means no bound.
	MaxStreamBytes int64

	schema  *ipcSchema
	decoded int64
}

// Decoded returns the decoded size of the messages checked so far.
func (g *IPCStreamGuard) Decoded() int64 { return g.decoded }

// Check verifies the next message of the stream: header is its flatbuffer Message (a Flight
// DataHeader: no continuation marker or length prefix), body its body. It returns the message's
// decoded size (0 for the schema). An error wraps ErrIPCTooLarge when a limit was passed; any
// other error means the message is malformed.
func (g *IPCStreamGuard) Check(header, body []byte) (int64, error) {
	if g.schema == nil {
		sc, err := parseSchemaMessage(header)
		if err != nil {
			return 0, err
		}
		g.schema = sc
		return 0, nil
	}
	m, err := parseMessage(header)
	if err != nil {
		return 0, err
	}
	limit := g.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxIPCMessageBytes
	}
	streamLeft := int64(-1)
	if g.MaxStreamBytes > 0 {
		streamLeft = max(0, g.MaxStreamBytes-g.decoded)
	}
	bc := batchCheck{fb: m.fb, version: m.version, body: body, msgLimit: limit, streamLeft: streamLeft}
	var n int64
	switch m.kind {
	case ipcHeaderRecordBatch:
		n, err = bc.check(m.header, g.schema.fields)
		if err != nil {
			err = fmt.Errorf("ipc record batch: %w", err)
		}
	case ipcHeaderDictionaryBatch:
		n, err = g.checkDictionary(bc, m.header)
	case ipcHeaderSchema:
		err = errors.New("ipc: a second schema message in the stream")
	default:
		err = fmt.Errorf("ipc: message header type %d is not a record or dictionary batch", m.kind)
	}
	if err != nil {
		return 0, err
	}
	g.decoded += n
	return n, nil
}

func (g *IPCStreamGuard) checkDictionary(bc batchCheck, header int) (int64, error) {
	id, err := bc.fb.longField(header, 0) // DictionaryBatch.id
	if err != nil {
		return 0, fmt.Errorf("ipc dictionary batch: %w", err)
	}
	value, ok := g.schema.dicts[id]
	if !ok {
		return 0, fmt.Errorf("ipc dictionary batch: id %d is not a dictionary the schema declares", id)
	}
	data, ok, err := bc.fb.tableField(header, 1) // DictionaryBatch.data
	if err != nil || !ok {
		return 0, errors.Join(fmt.Errorf("ipc dictionary batch %d (column %q): no data", id, value.name), err)
	}
	n, err := bc.check(data, []ipcField{value})
	if err != nil {
		return 0, fmt.Errorf("ipc dictionary batch %d (column %q): %w", id, value.name, err)
	}
	return n, nil
}

// batchCheck checks one RecordBatch table against the layout of its fields.
type batchCheck struct {
	fb         flatbuf
	version    int
	body       []byte
	msgLimit   int64 // decoded bytes one message may have
	streamLeft int64 // decoded bytes the stream may still have; -1: no bound

	nodes, nNodes     int // the FieldNode vector (16 bytes each)
	nBuffers          int
	variadic, nVarBuf int  // the variadicBufferCounts vector (8 bytes each)
	node, buf, view   int  // the next node, buffer and variadic count the layout takes
	codec             byte // ipcCodec*, or noCodec for a batch without compression
}

// noCodec is batchCheck.codec for a batch whose buffers are not compressed.
const noCodec = 0xFF

func (c *batchCheck) check(rb int, fields []ipcField) (int64, error) {
	f := c.fb
	rows, err := f.longField(rb, 0) // RecordBatch.length
	if err != nil {
		return 0, err
	}
	if rows < 0 {
		return 0, fmt.Errorf("negative length %d", rows)
	}
	if c.nodes, c.nNodes, err = f.vectorField(rb, 1, 16); err != nil {
		return 0, err
	}
	buffers, nBuffers, err := f.vectorField(rb, 2, 16)
	if err != nil {
		return 0, err
	}
	c.nBuffers = nBuffers
	if c.variadic, c.nVarBuf, err = f.vectorField(rb, 4, 8); err != nil {
		return 0, err
	}
	c.codec = noCodec
	if comp, ok, err := f.tableField(rb, 3); err != nil { // RecordBatch.compression
		return 0, err
	} else if ok {
		codec, err := f.byteField(comp, 0, 0) // LZ4_FRAME 0, ZSTD 1
		if err != nil {
			return 0, err
		}
		method, err := f.byteField(comp, 1, 0) // BUFFER 0
		if err != nil {
			return 0, err
		}
		if codec > 1 || method != 0 {
			return 0, fmt.Errorf("unknown compression (codec %d, method %d)", codec, method)
		}
		c.codec = codec
	}
	for _, fld := range fields {
		length, err := c.take(&fld, fld.name)
		if err != nil {
			return 0, err
		}
		if length != rows {
			return 0, fmt.Errorf("column %q has %d rows in a batch of %d", fld.name, length, rows)
		}
	}
	if c.node != c.nNodes || c.buf != c.nBuffers || c.view != c.nVarBuf {
		return 0, fmt.Errorf("the batch lists %d field nodes, %d buffers and %d variadic buffer counts; its schema (columns %s) needs %d, %d and %d",
			c.nNodes, c.nBuffers, c.nVarBuf, columnNames(fields), c.node, c.buf, c.view)
	}
	return c.checkBuffers(buffers)
}

// take consumes the field node, buffers and variadic counts of one array of field fld (and its
// children) and returns the array's length.
func (c *batchCheck) take(fld *ipcField, column string) (int64, error) {
	if c.node >= c.nNodes {
		return 0, fmt.Errorf("column %q: the batch lists %d field nodes, fewer than its schema needs", column, c.nNodes)
	}
	p := c.nodes + 16*c.node
	c.node++
	length, _ := c.fb.i64(p) // inside the vector vectorField checked
	nulls, _ := c.fb.i64(p + 8)
	// A length needs at least a bit of some buffer per row, except for arrays without buffers
	// (null, run-end-encoded, a struct without children): bounding it by 8 rows a byte of the
	// message limit keeps every size computed from it far from overflowing.
	if length < 0 || nulls < 0 || nulls > length || length > 8*c.msgLimit {
		return 0, fmt.Errorf("column %q: field node %d has length %d and null count %d", column, c.node-1, length, nulls)
	}
	n := ipcBuffers(fld, c.version)
	if !fld.dict && (fld.typ == ipcTypeBinaryView || fld.typ == ipcTypeUtf8View) {
		if c.view >= c.nVarBuf {
			return 0, fmt.Errorf("column %q: the batch lists %d variadic buffer counts, fewer than its schema needs", column, c.nVarBuf)
		}
		v, _ := c.fb.i64(c.variadic + 8*c.view)
		c.view++
		if v < 0 || v > int64(c.nBuffers) {
			return 0, fmt.Errorf("column %q: variadic buffer count %d, but the batch lists %d buffers", column, v, c.nBuffers)
		}
		n += int(v)
	}
	c.buf += n    // compared with the batch's count once the whole layout is known
	if fld.dict { // the batch holds the indices; the values come in dictionary batches
		return length, nil
	}
	for i := range fld.children {
		if _, err := c.take(&fld.children[i], column); err != nil {
			return 0, err
		}
	}
	return length, nil
}

// ipcBuffers is the number of buffers an array of fld has in a record batch, variadic buffers of
// view types aside (the IPC format's "Buffer Layout" table).
func ipcBuffers(fld *ipcField, version int) int {
	if fld.dict {
		return 2 // validity, indices
	}
	// Before V5, unions and run-end-encoded arrays had a validity buffer too.
	old := 0
	if version < ipcMetadataV5 {
		old = 1
	}
	switch fld.typ {
	case ipcTypeNull:
		return 0
	case ipcTypeBinary, ipcTypeUtf8, ipcTypeLargeBinary, ipcTypeLargeUtf8, ipcTypeListView, ipcTypeLargeListView:
		return 3 // validity, offsets (or offsets and sizes), data (or children)
	case ipcTypeStruct, ipcTypeFixedSizeList:
		return 1 // validity
	case ipcTypeUnion:
		if fld.dense {
			return 2 + old // type ids, offsets
		}
		return 1 + old // type ids
	case ipcTypeRunEndEncoded:
		return old
	}
	// Fixed-width types, lists and maps (validity, offsets), views (validity, views).
	return 2
}

// checkBuffers checks that every buffer lies inside the body and returns the decoded size of
// the message, checked against the limits. A compressed buffer must decode to exactly the length
// its prefix declares (checkDecompressed); the sizes are checked against the limits first, so
// no frame is decoded for a message that would be refused anyway.
func (c *batchCheck) checkBuffers(buffers int) (int64, error) {
	compressed := c.codec != noCodec
	type frame struct {
		j        int
		b        []byte
		declared int64
	}
	var frames []frame
	var decoded int64
	body := int64(len(c.body))
	for j := 0; j < c.nBuffers; j++ {
		off, _ := c.fb.i64(buffers + 16*j) // inside the vector vectorField checked
		length, _ := c.fb.i64(buffers + 16*j + 8)
		if off < 0 || length < 0 || off > body || length > body-off {
			return 0, fmt.Errorf("buffer %d (offset %d, length %d) is outside the %d-byte body", j, off, length, body)
		}
		size := length
		if compressed && length > 0 {
			if length < 8 {
				return 0, fmt.Errorf("compressed buffer %d is %d bytes, too short for its length prefix", j, length)
			}
			switch declared := int64(binary.LittleEndian.Uint64(c.body[off:])); {
			case declared == -1: // stored uncompressed after the prefix
				size = length - 8
			case declared < 0:
				return 0, fmt.Errorf("compressed buffer %d declares the negative length %d", j, declared)
			default:
				size = declared
				frames = append(frames, frame{j, c.body[off+8 : off+length], declared})
			}
		}
		if size > c.msgLimit-decoded {
			return 0, fmt.Errorf("%w: the message decodes to more than %d bytes (buffer %d alone declares %d)", ErrIPCTooLarge, c.msgLimit, j, size)
		}
		decoded += size
		if c.streamLeft >= 0 && decoded > c.streamLeft {
			return 0, fmt.Errorf("%w: the stream passed its limit of decoded bytes", ErrIPCTooLarge)
		}
	}
	for _, f := range frames {
		if err := checkDecompressed(c.codec, f.b, f.declared); err != nil {
			return 0, fmt.Errorf("compressed buffer %d: %w", f.j, err)
		}
	}
	return decoded, nil
}

// columnNames lists the names of fields, the first few of a long list.
func columnNames(fields []ipcField) string {
	const show = 8
	var names []string
	for i, f := range fields {
		if i == show {
			names = append(names, fmt.Sprintf("and %d more", len(fields)-show))
			break
		}
		names = append(names, fmt.Sprintf("%q", f.name))
	}
	return strings.Join(names, ", ")
}

// CheckIPCStream checks every message of an Arrow IPC stream held in b (as stored: each
// message's continuation marker, metadata length, flatbuffer metadata and body) with an
// IPCStreamGuard of the given limits, before arrow-go reads any of it.
func CheckIPCStream(b []byte, g IPCStreamGuard) error {
	for p := 0; p < len(b); {
		if len(b)-p < 4 {
			return fmt.Errorf("ipc stream: %d trailing bytes at %d", len(b)-p, p)
		}
		if binary.LittleEndian.Uint32(b[p:]) == 0xFFFFFFFF { // continuation marker
			p += 4
			if len(b)-p < 4 {
				return fmt.Errorf("ipc stream: truncated message length at %d", p)
			}
		}
		n := int(int32(binary.LittleEndian.Uint32(b[p:])))
		p += 4
		if n == 0 { // end of stream
			return nil
		}
		if n < 0 || n > len(b)-p {
			return fmt.Errorf("ipc stream: metadata length %d at %d does not fit the %d-byte stream", n, p-4, len(b))
		}
		meta := b[p : p+n]
		p += n
		m, err := parseMessage(meta)
		if err != nil {
			return fmt.Errorf("ipc stream: message at %d: %w", p-n, err)
		}
		root, _ := m.fb.root()                  // parseMessage read it
		bodyLen, err := m.fb.longField(root, 3) // Message.bodyLength
		if err != nil {
			return err
		}
		if bodyLen < 0 || bodyLen > int64(len(b)-p) {
			return fmt.Errorf("ipc stream: body length %d at %d does not fit the %d-byte stream", bodyLen, p, len(b))
		}
		if _, err := g.Check(meta, b[p:p+int(bodyLen)]); err != nil {
			return err
		}
		p += int(bodyLen)
	}
	return nil
}
