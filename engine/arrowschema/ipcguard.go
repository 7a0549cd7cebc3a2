package arrowschema

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// CheckIPCSchema verifies the schema message at the start of an Arrow IPC stream before arrow-go
// reads it. arrow-go trusts the flatbuffer: it sizes slices by the vector lengths it finds (a
// corrupt length of 2^31 fields is a "fatal error: out of memory" no recover catches) and follows
// offsets wherever they point (a cycle recurses until the stack overflows, also fatal). This
// check walks every vector the schema reader allocates by (fields, children, custom metadata,
// features, union type ids), requiring each to fit in the message, every offset to point
// forward inside it, and nesting to stay within MaxSchemaDepth.
func CheckIPCSchema(b []byte) error {
	if len(b) < 8 {
		return errors.New("ipc schema: stream too short")
	}
	p := 0
	if binary.LittleEndian.Uint32(b) == 0xFFFFFFFF { // continuation marker
		p = 4
	}
	n := int(int32(binary.LittleEndian.Uint32(b[p:])))
	p += 4
	if n < 4 || n > len(b)-p {
		return fmt.Errorf("ipc schema: metadata length %d does not fit the %d-byte stream", n, len(b))
	}
	return CheckIPCSchemaMessage(b[p : p+n])
}

// CheckIPCSchemaMessage is CheckIPCSchema for a bare flatbuffer Message, with no continuation
// marker or length prefix: the DataHeader of a Flight FlightData.
func CheckIPCSchemaMessage(msg []byte) error {
	_, err := parseSchemaMessage(msg)
	return err
}

// MaxSchemaDepth bounds the nesting of a schema (a struct of lists of structs...): a top-level
// column is level 1, its children level 2, and no field may be deeper than level
// MaxSchemaDepth. It is arrow-go's own limit: its IPC writer refuses a deeper batch, so a table
// of a deeper schema could take no write through the MemWAL and serve no DoGet. The same limit
// holds for schemas read from storage and from the network, and for tables created from a
// schema (CheckSchemaDepth), so that every table that can be created can be read.
const MaxSchemaDepth = 64

// CheckSchemaDepth returns an error naming the column when a field of sc is nested deeper than
// MaxSchemaDepth levels. Create a table only from a schema that passes it: a deeper schema would
// be refused when the table's stored schema is read back.
func CheckSchemaDepth(sc *arrow.Schema) error {
	var within func(dt arrow.DataType, level int) bool
	within = func(dt arrow.DataType, level int) bool {
		for _, f := range childFields(dt) {
			if level+1 > MaxSchemaDepth || !within(f.Type, level+1) {
				return false
			}
		}
		return true
	}
	for _, f := range sc.Fields() {
		if !within(f.Type, 1) {
			return fmt.Errorf("%w: column %q is nested deeper than %d levels", ErrSchemaMismatch, f.Name, MaxSchemaDepth)
		}
	}
	return nil
}

// childFields returns the child fields of dt as the IPC format lays them out (a map's one
// "entries" struct, a dictionary's value type's children, an extension's storage's children).
func childFields(dt arrow.DataType) []arrow.Field {
	switch dt := dt.(type) {
	case *arrow.DictionaryType:
		return childFields(dt.ValueType)
	case arrow.ExtensionType:
		return childFields(dt.StorageType())
	case arrow.NestedType:
		return dt.Fields()
	}
	return nil
}

type flatbuf struct{ b []byte }

func (f flatbuf) u32(p int) (int, error) {
	if p < 0 || p+4 > len(f.b) {
		return 0, fmt.Errorf("ipc: offset %d outside the %d-byte message", p, len(f.b))
	}
	return int(binary.LittleEndian.Uint32(f.b[p:])), nil
}

func (f flatbuf) u16(p int) (int, error) {
	if p < 0 || p+2 > len(f.b) {
		return 0, fmt.Errorf("ipc: offset %d outside the %d-byte message", p, len(f.b))
	}
	return int(binary.LittleEndian.Uint16(f.b[p:])), nil
}

func (f flatbuf) i64(p int) (int64, error) {
	if p < 0 || p+8 > len(f.b) {
		return 0, fmt.Errorf("ipc: offset %d outside the %d-byte message", p, len(f.b))
	}
	return int64(binary.LittleEndian.Uint64(f.b[p:])), nil
}

// deref follows the forward offset stored at p.
func (f flatbuf) deref(p int) (int, error) {
	off, err := f.u32(p)
	if err != nil {
		return 0, err
	}
	if off == 0 || p+off >= len(f.b) {
		return 0, fmt.Errorf("ipc: offset at %d points outside the message", p)
	}
	return p + off, nil
}

func (f flatbuf) root() (int, error) { return f.deref(0) }

// field returns the position of field i of the table at t, or ok=false when it is absent.
func (f flatbuf) field(t, i int) (int, bool, error) {
	soff, err := f.u32(t)
	if err != nil {
		return 0, false, err
	}
	v := t - int(int32(uint32(soff)))
	vsize, err := f.u16(v)
	if err != nil {
		return 0, false, err
	}
	// Present when its slot starts inside the vtable, as the flatbuffers runtime arrow-go reads
	// with decides (Table.Offset: slot < vtable size), even when an odd size leaves half the slot
	// outside: a stricter rule here passed as absent a field arrow-go then read (a schema whose
	// fields vector claimed 335 million entries made it allocate 29 GB).
	if 4+2*i >= vsize {
		return 0, false, nil
	}
	off, err := f.u16(v + 4 + 2*i)
	if err != nil || off == 0 {
		return 0, false, err
	}
	if t+off >= len(f.b) {
		return 0, false, fmt.Errorf("ipc: field %d of table %d outside the message", i, t)
	}
	return t + off, true, nil
}

func (f flatbuf) tableField(t, i int) (int, bool, error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, ok, err
	}
	tt, err := f.deref(p)
	return tt, err == nil, err
}

// byteField, shortField and longField read scalar field i of table t, or def when it is absent.
func (f flatbuf) byteField(t, i int, def byte) (byte, error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return def, err
	}
	return f.b[p], nil // field checked p < len(f.b)
}

func (f flatbuf) shortField(t, i int, def int) (int, error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return def, err
	}
	v, err := f.u16(p)
	return int(int16(uint16(v))), err
}

func (f flatbuf) longField(t, i int) (int64, error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, err
	}
	return f.i64(p)
}

// vectorField returns the start and length of vector field i of table t whose elements are elem
// bytes, checking that it fits in the message.
func (f flatbuf) vectorField(t, i, elem int) (start, n int, err error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, 0, err
	}
	v, err := f.deref(p)
	if err != nil {
		return 0, 0, err
	}
	if n, err = f.u32(v); err != nil {
		return 0, 0, err
	}
	if n > (len(f.b)-v-4)/elem {
		return 0, 0, fmt.Errorf("ipc: a vector claims %d elements in a %d-byte message", n, len(f.b))
	}
	return v + 4, n, nil
}

func (f flatbuf) checkString(p int) error {
	s, err := f.deref(p)
	if err != nil {
		return err
	}
	n, err := f.u32(s)
	if err != nil {
		return err
	}
	if n > len(f.b)-s-4 {
		return fmt.Errorf("ipc: a string claims %d bytes in a %d-byte message", n, len(f.b))
	}
	return nil
}

// checkKeyValues checks the custom-metadata vector field i of table t.
func (f flatbuf) checkKeyValues(t, i int) error {
	start, n, err := f.vectorField(t, i, 4)
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		kv, err := f.deref(start + 4*k)
		if err != nil {
			return err
		}
		for j := 0; j < 2; j++ { // key, value
			if p, ok, err := f.field(kv, j); err != nil {
				return err
			} else if ok {
				if err := f.checkString(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Message header types (MessageHeader in the IPC format's Message.fbs).
const (
	ipcHeaderSchema          = 1
	ipcHeaderDictionaryBatch = 2
	ipcHeaderRecordBatch     = 3
)

// ipcMetadataV5 is MetadataVersion V5, the newest: the version arrow-go and pyarrow write. Older
// versions lay unions and run-end-encoded arrays out with a validity buffer.
const ipcMetadataV5 = 4

// ipcMessage is the envelope of a flatbuffer Message.
type ipcMessage struct {
	fb      flatbuf
	version int  // MetadataVersion, 0 (V1) to ipcMetadataV5
	kind    byte // the header type, ipcHeader*
	header  int  // the position of the header table
}

// parseMessage checks the envelope of a flatbuffer Message: that it has a header, a known
// metadata version, and custom metadata that fits.
func parseMessage(b []byte) (ipcMessage, error) {
	fb := flatbuf{b: b}
	if len(b) < 8 {
		return ipcMessage{}, fmt.Errorf("ipc: a %d-byte message header is too short", len(b))
	}
	msg, err := fb.root()
	if err != nil {
		return ipcMessage{}, err
	}
	m := ipcMessage{fb: fb}
	if m.version, err = fb.shortField(msg, 0, 0); err != nil {
		return ipcMessage{}, err
	}
	if m.version < 0 || m.version > ipcMetadataV5 {
		return ipcMessage{}, fmt.Errorf("ipc: unsupported metadata version %d", m.version)
	}
	if m.kind, err = fb.byteField(msg, 1, 0); err != nil {
		return ipcMessage{}, err
	}
	header, ok, err := fb.tableField(msg, 2)
	if err != nil || !ok {
		return ipcMessage{}, errors.Join(errors.New("ipc: message has no header"), err)
	}
	m.header = header
	if err := fb.checkKeyValues(msg, 4); err != nil { // Message.custom_metadata
		return ipcMessage{}, err
	}
	return m, nil
}

// Type tags of the IPC format's Type union (Schema.fbs).
const (
	ipcTypeNull            = 1
	ipcTypeInt             = 2
	ipcTypeFloatingPoint   = 3
	ipcTypeBinary          = 4
	ipcTypeUtf8            = 5
	ipcTypeBool            = 6
	ipcTypeDecimal         = 7
	ipcTypeDate            = 8
	ipcTypeTime            = 9
	ipcTypeTimestamp       = 10
	ipcTypeInterval        = 11
	ipcTypeList            = 12
	ipcTypeStruct          = 13
	ipcTypeUnion           = 14
	ipcTypeFixedSizeBinary = 15
	ipcTypeFixedSizeList   = 16
	ipcTypeMap             = 17
	ipcTypeDuration        = 18
	ipcTypeLargeBinary     = 19
	ipcTypeLargeUtf8       = 20
	ipcTypeLargeList       = 21
	ipcTypeRunEndEncoded   = 22
	ipcTypeBinaryView      = 23
	ipcTypeUtf8View        = 24
	ipcTypeListView        = 25
	ipcTypeLargeListView   = 26
)

// ipcField is one field of a schema as record batches lay out its arrays: the flatbuffer type
// tag, whether the field is dictionary-encoded (its batch arrays are then those of the index
// type, and its values come in dictionary batches), and its children.
type ipcField struct {
	name     string
	typ      byte
	dense    bool // a dense union
	dict     bool
	children []ipcField
}

// ipcSchema is the layout of a schema message: its fields, and the value layout of each
// dictionary id it declares.
type ipcSchema struct {
	fields []ipcField
	dicts  map[int64]ipcField
}

// parseSchemaMessage checks a schema Message (CheckIPCSchema) and returns its layout.
func parseSchemaMessage(b []byte) (*ipcSchema, error) {
	m, err := parseMessage(b)
	if err != nil {
		return nil, fmt.Errorf("ipc schema: %w", err)
	}
	if m.kind != ipcHeaderSchema {
		return nil, fmt.Errorf("ipc schema: message header type %d is not a schema", m.kind)
	}
	fb := m.fb
	if err := fb.checkKeyValues(m.header, 2); err != nil { // Schema.custom_metadata
		return nil, fmt.Errorf("ipc schema: %w", err)
	}
	if _, _, err := fb.vectorField(m.header, 3, 8); err != nil { // Schema.features
		return nil, fmt.Errorf("ipc schema: %w", err)
	}
	// Every field table takes at least 8 bytes (its offset in a vector, its vtable offset), so a
	// message visits at most len/8 of them, unless its fields share children: a few hundred
	// bytes could then describe 2^64 fields.
	w := schemaWalker{fb: fb, budget: len(b)/4 + 1, schema: &ipcSchema{dicts: map[int64]ipcField{}}}
	if w.schema.fields, err = w.fields(m.header, 1, 1); err != nil { // Schema.fields
		return nil, fmt.Errorf("ipc schema: %w", err)
	}
	return w.schema, nil
}

type schemaWalker struct {
	fb     flatbuf
	budget int // field tables still to visit
	schema *ipcSchema
}

// fields checks the vector of Field tables at field i of table t, fields at the given level
// (1: the schema's columns), recursively, and returns their layout.
func (w *schemaWalker) fields(t, i, level int) ([]ipcField, error) {
	f := w.fb
	start, n, err := f.vectorField(t, i, 4)
	if err != nil || n == 0 {
		return nil, err
	}
	if level > MaxSchemaDepth {
		return nil, fmt.Errorf("fields nested deeper than %d levels", MaxSchemaDepth)
	}
	out := make([]ipcField, n) // n fits the message: 4 bytes each
	for k := range out {
		if w.budget--; w.budget < 0 {
			return nil, errors.New("the schema's fields share their tables (more fields than the message can hold)")
		}
		fld, err := f.deref(start + 4*k)
		if err != nil {
			return nil, err
		}
		if p, ok, err := f.field(fld, 0); err != nil { // name
			return nil, err
		} else if ok {
			if err := f.checkString(p); err != nil {
				return nil, err
			}
			s, _ := f.deref(p)
			l, _ := f.u32(s)
			out[k].name = string(f.b[s+4 : s+4+l])
		}
		if err := f.checkKeyValues(fld, 6); err != nil { // custom_metadata
			return nil, err
		}
		tt, err := f.byteField(fld, 2, 0) // type_type
		if err != nil {
			return nil, err
		}
		if tt < ipcTypeNull || tt > ipcTypeLargeListView {
			return nil, fmt.Errorf("field %q has unknown type tag %d", out[k].name, tt)
		}
		typ, ok, err := f.tableField(fld, 3) // type
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("field %q has no type", out[k].name)
		}
		out[k].typ = tt
		// Union is the one type whose table holds a vector: typeIds, field 1.
		if tt == ipcTypeUnion {
			if _, _, err := f.vectorField(typ, 1, 4); err != nil {
				return nil, err
			}
			mode, err := f.shortField(typ, 0, 0) // Sparse 0, Dense 1
			if err != nil {
				return nil, err
			}
			out[k].dense = mode == 1
		}
		if out[k].children, err = w.fields(fld, 5, level+1); err != nil { // children
			return nil, err
		}
		if de, ok, err := f.tableField(fld, 4); err != nil { // dictionary
			return nil, err
		} else if ok {
			id, err := f.longField(de, 0)
			if err != nil {
				return nil, err
			}
			if _, dup := w.schema.dicts[id]; dup {
				return nil, fmt.Errorf("field %q: dictionary id %d is declared twice", out[k].name, id)
			}
			w.schema.dicts[id] = out[k]
			out[k].dict = true
		}
	}
	return out, nil
}
