package memwal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// Schema metadata keys of a WAL entry. An entry is one Arrow IPC stream: the table schema with
// these keys added to its metadata, then the batches of every put in the group, in order.
const (
	metaKind        = "flight_sink.memwal.kind" // "data" or "fence"
	metaWriterEpoch = "flight_sink.memwal.writer_epoch"
	metaPosition    = "flight_sink.memwal.position"
	metaPuts        = "flight_sink.memwal.puts"       // JSON []walPutMeta
	metaStreamID    = "flight_sink.memwal.stream"     // a stream record's stream id (stream.go)
	metaStreamSeq   = "flight_sink.memwal.stream_seq" // a stream record's index in its stream, from 0

	kindData  = "data"
	kindFence = "fence"
	// kindStream is a data record of a streamed put (stream.go): batches without a position,
	// counted only through the commit entry that names their stream.
	kindStream = "stream"
)

// walPutMeta describes one put inside an entry: its epoch identity (none for a plain append)
// and how many of the entry's batches, taken in order, it owns.
type walPutMeta struct {
	QueryID string `json:"query_id,omitempty"`
	EpochID *int64 `json:"epoch_id,omitempty"`
	Batches int    `json:"batches"`
	Rows    int64  `json:"rows"`
	// Stream, for a streamed put, names the stream records that hold its batches; the entry
	// itself then holds none of them.
	Stream *walStreamRef `json:"stream,omitempty"`
}

// walStreamRef is a streamed put's reference to its data records (stream.go): the stream id, how
// many records it wrote and the CRC-32C (Castagnoli) of their payloads, in order.
type walStreamRef struct {
	ID      string `json:"id"`
	Records int    `json:"records"`
	CRC     uint32 `json:"crc"`

	first uint64 // writer side: log number of the segment holding the first record
}

// walPut is one put of an entry.
type walPut struct {
	Epoch   *engine.EpochIdentity // nil for a put without epoch identity
	Batches []arrow.RecordBatch   // in the table schema
	Rows    int64
	Stream  *walStreamRef // set for a streamed put: its batches are in stream records
}

// walEntry is a decoded WAL entry or, with StreamID set, a stream record (no position; one put
// holding the record's batches, without identity).
type walEntry struct {
	Position    uint64
	WriterEpoch uint64
	Fence       bool
	Puts        []walPut
	StreamID    string
	StreamSeq   int
}

// streamRecords returns the payloads of the stream records ref names, written by writer epoch
// epoch, checked against the ref (count and CRC); an error wraps ErrCorrupt. Nil when the entry
// was not read from a segment listing.
type streamRecords func(ref *walStreamRef, epoch uint64) ([][]byte, error)

func (e *walEntry) release() {
	for _, p := range e.Puts {
		for _, b := range p.Batches {
			b.Release()
		}
	}
}

// encodeWALEntry writes one entry; schema is the table schema (nil for a fence).
func encodeWALEntry(pos, epoch uint64, schema *arrow.Schema, puts []walPut, alloc memory.Allocator) ([]byte, error) {
	return encodeWALRecord(0, pos, epoch, schema, puts, alloc)
}

// encodeWALRecord is encodeWALEntry with room bytes left free before the entry (a segment
// record's header), so the record needs no second copy.
func encodeWALRecord(room int, pos, epoch uint64, schema *arrow.Schema, puts []walPut, alloc memory.Allocator) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(room + int(min(batchBytes(puts), 256<<20)) + 16<<10) // the batches, their padding and the messages: one allocation
	buf.Write(make([]byte, room))
	if err := writeWALEntry(&buf, pos, epoch, schema, puts, alloc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeWALEntry encodes one entry into out; schema is the table schema (nil for a fence).
func writeWALEntry(out io.Writer, pos, epoch uint64, schema *arrow.Schema, puts []walPut, alloc memory.Allocator) error {
	kind := kindData
	if schema == nil {
		kind, schema = kindFence, arrow.NewSchema(nil, nil)
	}
	metas := make([]walPutMeta, len(puts))
	for i, p := range puts {
		metas[i] = walPutMeta{Batches: len(p.Batches), Rows: p.Rows, Stream: p.Stream}
		if p.Epoch != nil {
			e := p.Epoch.EpochID
			metas[i].QueryID, metas[i].EpochID = p.Epoch.QueryID, &e
		}
	}
	mj, err := json.Marshal(metas)
	if err != nil {
		return err
	}
	md := schema.Metadata()
	// Concat, not append: the schema's metadata slices are shared with every other encode.
	keys := slices.Concat(md.Keys(), []string{metaKind, metaWriterEpoch, metaPosition, metaPuts})
	vals := slices.Concat(md.Values(), []string{kind, strconv.FormatUint(epoch, 10), strconv.FormatUint(pos, 10), string(mj)})
	meta := arrow.NewMetadata(keys, vals)
	entrySchema := arrow.NewSchema(schema.Fields(), &meta)

	w := ipc.NewWriter(out, ipc.WithSchema(entrySchema), ipc.WithAllocator(alloc))
	for _, p := range puts {
		if p.Stream != nil {
			continue // in the stream's records already
		}
		for _, b := range p.Batches {
			rb := array.NewRecordBatch(entrySchema, b.Columns(), b.NumRows())
			err := w.Write(rb)
			rb.Release()
			if err != nil {
				w.Close()
				return fmt.Errorf("encode wal entry %d: %w", pos, err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("encode wal entry %d: %w", pos, err)
	}
	return nil
}

// decodeWALEntry parses an entry. Its batches are returned in tableSchema (the WAL metadata
// stripped); the caller releases them with entry.release. A streamed put is corrupt here: its
// batches are in stream records, which only a segment listing finds (decodeWALEntryFrom).
func decodeWALEntry(key string, b []byte, tableSchema *arrow.Schema, alloc memory.Allocator) (*walEntry, error) {
	return decodeWALEntryFrom(key, b, tableSchema, alloc, nil)
}

// decodeWALEntryFrom is decodeWALEntry reading streamed puts' batches from the stream records
// streams returns.
func decodeWALEntryFrom(key string, b []byte, tableSchema *arrow.Schema, alloc memory.Allocator, streams streamRecords) (*walEntry, error) {
	r, e, metas, err := openWALEntry(key, b, alloc)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	if e.Fence {
		return e, nil
	}
	batches, err := readEntryBatches(key, r, tableSchema)
	if err != nil {
		return nil, err
	}
	var extra []arrow.RecordBatch // the streamed puts' batches
	release := func() {
		for _, b := range batches {
			b.Release()
		}
		for _, b := range extra {
			b.Release()
		}
	}
	if e.StreamID != "" {
		var rows int64
		for _, b := range batches {
			rows += b.NumRows()
		}
		e.Puts = []walPut{{Batches: batches, Rows: rows}}
		return e, nil
	}
	next := 0
	for i, m := range metas {
		var p walPut
		switch {
		case m.Stream != nil:
			if streams == nil {
				release()
				return nil, fmt.Errorf("%w: wal entry %s: put %d is streamed (stream %s) and its records are not at hand", ErrCorrupt, key, i, m.Stream.ID)
			}
			got, err := readStreamBatches(key, m.Stream, e.WriterEpoch, tableSchema, alloc, streams)
			if err != nil {
				release()
				return nil, err
			}
			extra = append(extra, got...)
			if len(got) != m.Batches {
				release()
				return nil, fmt.Errorf("%w: wal entry %s: streamed put %d claims %d batches, its records hold %d", ErrCorrupt, key, i, m.Batches, len(got))
			}
			p = walPut{Batches: got, Rows: m.Rows, Stream: m.Stream}
		case m.Batches < 0 || next+m.Batches > len(batches):
			release()
			return nil, fmt.Errorf("%w: wal entry %s: puts name %d+ batches, entry holds %d", ErrCorrupt, key, next+m.Batches, len(batches))
		default:
			p = walPut{Batches: batches[next : next+m.Batches], Rows: m.Rows}
			next += m.Batches
		}
		var rows int64
		for _, b := range p.Batches {
			rows += b.NumRows()
		}
		if rows != m.Rows {
			release()
			return nil, fmt.Errorf("%w: wal entry %s: put %d claims %d rows and holds %d", ErrCorrupt, key, i, m.Rows, rows)
		}
		if m.EpochID != nil {
			p.Epoch = &engine.EpochIdentity{QueryID: m.QueryID, EpochID: *m.EpochID}
		}
		e.Puts = append(e.Puts, p)
	}
	if next != len(batches) {
		release()
		return nil, fmt.Errorf("%w: wal entry %s: %d of its %d batches belong to no put", ErrCorrupt, key, len(batches)-next, len(batches))
	}
	return e, nil
}

// readEntryBatches reads the batches of an opened entry or stream record in tableSchema (nil: the
// record's own, its WAL metadata stripped).
func readEntryBatches(key string, r *ipc.Reader, tableSchema *arrow.Schema) ([]arrow.RecordBatch, error) {
	if tableSchema != nil && !arrowschema.EqualIgnoringFieldIDs(tableSchema, r.Schema()) {
		// An entry written in an older schema of the table (before a schema merge) is read
		// through the current one; an entry that does not fit it is corrupt.
		if err := arrowschema.CheckWriteSchema(tableSchema, stripWALMetadata(r.Schema()), nil); err != nil {
			return nil, fmt.Errorf("%w: wal entry %s: schema %s does not fit the table's %s: %v", ErrCorrupt, key, r.Schema(), tableSchema, err)
		}
	}
	if tableSchema == nil {
		tableSchema = stripWALMetadata(r.Schema())
	}
	var batches []arrow.RecordBatch
	release := func() {
		for _, b := range batches {
			b.Release()
		}
	}
	for r.Next() {
		rec := r.RecordBatch()
		b, err := arrowschema.ConformColumnsOrByName(tableSchema, rec)
		if err != nil {
			release()
			return nil, fmt.Errorf("%w: wal entry %s: %v", ErrCorrupt, key, err)
		}
		batches = append(batches, b)
	}
	if err := r.Err(); err != nil {
		release()
		return nil, fmt.Errorf("%w: wal entry %s: %v", ErrCorrupt, key, err)
	}
	return batches, nil
}

// readStreamBatches decodes the batches of the stream records ref names (streams finds and checks
// them), in order. Each record must be a stream record of ref's stream, of writer epoch epoch, at
// its index.
func readStreamBatches(key string, ref *walStreamRef, epoch uint64, tableSchema *arrow.Schema, alloc memory.Allocator, streams streamRecords) ([]arrow.RecordBatch, error) {
	payloads, err := streams(ref, epoch)
	if err != nil {
		return nil, fmt.Errorf("wal entry %s: %w", key, err)
	}
	var out []arrow.RecordBatch
	fail := func(err error) ([]arrow.RecordBatch, error) {
		for _, b := range out {
			b.Release()
		}
		return nil, err
	}
	for i, p := range payloads {
		rkey := fmt.Sprintf("%s stream %s record %d", key, ref.ID, i)
		r, e, _, err := openWALEntry(rkey, p, alloc)
		if err != nil {
			return fail(err)
		}
		if e.StreamID != ref.ID || e.StreamSeq != i || e.WriterEpoch != epoch {
			r.Release()
			return fail(fmt.Errorf("%w: wal entry %s: record %d of stream %s is record %d of stream %q, writer epoch %d", ErrCorrupt, key, i, ref.ID, e.StreamSeq, e.StreamID, e.WriterEpoch))
		}
		bs, err := readEntryBatches(rkey, r, tableSchema)
		r.Release()
		if err != nil {
			return fail(err)
		}
		out = append(out, bs...)
	}
	return out, nil
}

// decodeWALHeader parses an entry's header only: its position, writer epoch, kind and, for a
// data entry, each put's epoch identity and row count (Batches stays nil). It reads the schema
// message, behind the same guard as decodeWALEntry, and no batch; readers that need identities or
// counts, not rows, use it (the read-only view of a shard, StoredShard).
func decodeWALHeader(key string, b []byte) (*walEntry, error) {
	r, e, metas, err := openWALEntry(key, b, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	r.Release()
	for i, m := range metas {
		if m.Batches < 0 || m.Rows < 0 {
			return nil, fmt.Errorf("%w: wal entry %s: put %d claims %d batches, %d rows", ErrCorrupt, key, i, m.Batches, m.Rows)
		}
		if m.Stream != nil && (m.Stream.ID == "" || m.Stream.Records < 0) {
			return nil, fmt.Errorf("%w: wal entry %s: put %d names stream %q of %d records", ErrCorrupt, key, i, m.Stream.ID, m.Stream.Records)
		}
		p := walPut{Rows: m.Rows, Stream: m.Stream}
		if m.EpochID != nil {
			p.Epoch = &engine.EpochIdentity{QueryID: m.QueryID, EpochID: *m.EpochID}
		}
		e.Puts = append(e.Puts, p)
	}
	return e, nil
}

// openWALEntry checks an entry's bytes, reads its schema message and parses the header: position,
// writer epoch, kind, and (for a data entry) the put metadata. The caller reads the batches from
// the returned reader, if it wants them, and releases it.
func openWALEntry(key string, b []byte, alloc memory.Allocator) (*ipc.Reader, *walEntry, []walPutMeta, error) {
	r, err := openIPC("wal entry "+key, b, alloc)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*ipc.Reader, *walEntry, []walPutMeta, error) {
		r.Release()
		return nil, nil, nil, err
	}
	md := r.Schema().Metadata()
	get := func(k string) string {
		if i := md.FindKey(k); i >= 0 {
			return md.Values()[i]
		}
		return ""
	}
	e := &walEntry{}
	if e.Position, err = strconv.ParseUint(get(metaPosition), 10, 64); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: bad position: %v", ErrCorrupt, key, err))
	}
	if e.WriterEpoch, err = strconv.ParseUint(get(metaWriterEpoch), 10, 64); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: bad writer epoch: %v", ErrCorrupt, key, err))
	}
	if p, ok := parseWALKey(key); ok && p != e.Position {
		return fail(fmt.Errorf("%w: wal entry %s holds position %d", ErrCorrupt, key, e.Position))
	}
	switch get(metaKind) {
	case kindFence:
		e.Fence = true
		return r, e, nil, nil
	case kindStream:
		if e.StreamID = get(metaStreamID); e.StreamID == "" {
			return fail(fmt.Errorf("%w: wal entry %s: stream record without a stream id", ErrCorrupt, key))
		}
		if e.StreamSeq, err = strconv.Atoi(get(metaStreamSeq)); err != nil || e.StreamSeq < 0 {
			return fail(fmt.Errorf("%w: wal entry %s: bad stream record index %q", ErrCorrupt, key, get(metaStreamSeq)))
		}
		return r, e, nil, nil
	case kindData:
	default:
		return fail(fmt.Errorf("%w: wal entry %s: unknown kind %q", ErrCorrupt, key, get(metaKind)))
	}
	var metas []walPutMeta
	if err := json.Unmarshal([]byte(get(metaPuts)), &metas); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: put metadata: %v", ErrCorrupt, key, err))
	}
	return r, e, metas, nil
}

// openIPC opens an Arrow IPC stream the shard stored (what (kind, key) names: a WAL entry, a
// generation file) for reading. arrow-go sizes allocations by what the bytes claim, so every
// message's flatbuffer is checked against the schema first (the guard DoPut applies to the wire)
// and every message is bounded by the stream's own size. Bytes that fail are ErrCorrupt.
func openIPC(what string, b []byte, alloc memory.Allocator) (*ipc.Reader, error) {
	if err := arrowschema.CheckIPCStream(b, arrowschema.IPCStreamGuard{}); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	limit := int64(len(b))
	mr := ipc.NewMessageReader(bytes.NewReader(b), ipc.WithAllocator(alloc),
		ipc.WithMetadataSizeLimit(limit), ipc.WithBodySizeLimit(limit)) // ipc.NewReader ignores the limits
	r, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(alloc))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	return r, nil
}

// stripWALMetadata returns s without the WAL's own metadata keys.
func stripWALMetadata(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	var keys, vals []string
	for i, k := range md.Keys() {
		switch k {
		case metaKind, metaWriterEpoch, metaPosition, metaPuts, metaStreamID, metaStreamSeq:
		default:
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	meta := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(s.Fields(), &meta)
}

// walLog reads and writes one shard's WAL entries: objects created put-if-absent on an object
// store, records in segment files on a local disk (segment.go). Readers of either see both, so a
// shard holding entry objects replays on a local disk.
type walLog struct {
	store objstore.Store
	shard string
	paths shardPaths

	segmentBytes int64          // preallocated size of a segment (Options.WALSegmentBytes)
	seg          *segmentWriter // this writer's segments, from its fence on (local disk only)

	// From the last list on a local disk: where each counting entry's bytes are, the positions
	// stored as objects, and the segments with the highest position each holds.
	listed   map[uint64]walRef
	objects  []uint64
	segments []segmentFile
	// The stream records of the streams a counting entry commits, by stream id, in order
	// (stream.go); records of streams nothing commits are dropped by the list.
	streams map[string][]streamRecord
}

// walRef is a listed entry: its key (for messages) and its bytes.
type walRef struct {
	key  string
	data []byte
}

// localDir returns the shard's wal directory when the store is a local disk.
func (w *walLog) localDir() (string, bool) {
	l, ok := w.store.(*objstore.Local)
	if !ok {
		return "", false
	}
	return filepath.Join(l.Root(), filepath.FromSlash(w.paths.walPrefix())), true
}

// forget drops the entry bytes the last list read.
func (w *walLog) forget() { w.listed, w.streams = nil, nil }

// close closes the writer's segment, if it has one.
func (w *walLog) close() {
	if w.seg != nil {
		w.seg.close()
	}
}

// create writes the entry at pos put-if-absent. An error wrapping objstore.ErrExists means the
// position is taken: someone else wrote it.
func (w *walLog) create(ctx context.Context, pos uint64, data []byte) error {
	key := w.paths.makeWALKey(pos)
	err := w.store.PutIfAbsent(ctx, key, data)
	if err != nil && !errors.Is(err, objstore.ErrExists) {
		// The outcome is unknown: the create may have landed before the error. Look.
		if got, rerr := w.store.Get(ctx, key); rerr == nil && bytes.Equal(got, data) {
			return nil
		}
		return fmt.Errorf("memwal shard %s: write wal entry %d: %w", w.shard, pos, err)
	}
	return err
}

// read decodes the entry at pos.
func (w *walLog) read(ctx context.Context, pos uint64, schema *arrow.Schema, alloc memory.Allocator) (*walEntry, error) {
	if r, ok := w.listed[pos]; ok {
		return decodeWALEntryFrom(r.key, r.data, schema, alloc, w.streamRecords)
	}
	key := w.paths.makeWALKey(pos)
	b, err := w.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: read wal entry %d: %w", w.shard, pos, err)
	}
	return decodeWALEntry(key, b, schema, alloc)
}

// readHeader decodes the header of the entry at pos (decodeWALHeader): no batch is read.
func (w *walLog) readHeader(ctx context.Context, pos uint64) (*walEntry, error) {
	if r, ok := w.listed[pos]; ok {
		return decodeWALHeader(r.key, r.data)
	}
	key := w.paths.makeWALKey(pos)
	b, err := w.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: read wal entry %d: %w", w.shard, pos, err)
	}
	return decodeWALHeader(key, b)
}

// list returns the positions of the entries after position after, ascending.
func (w *walLog) list(ctx context.Context, after uint64) ([]uint64, error) {
	// The whole prefix: segment names (log numbers) do not sort with entry positions.
	objs, err := w.store.List(ctx, w.paths.walPrefix(), "")
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: list wal: %w", w.shard, err)
	}
	_, local := w.localDir()
	if local || slices.ContainsFunc(objs, func(o objstore.ObjectInfo) bool { _, ok := parseSegmentKey(o.Key); return ok }) {
		// Segments are read through the store whoever wrote them, so a shard a local-disk writer
		// left is replayed by any reader of the same directory, a wrapped store's too.
		return w.listAll(ctx, objs, after)
	}
	out := make([]uint64, 0, len(objs))
	for _, o := range objs {
		if p, ok := parseWALKey(o.Key); ok && p > after {
			out = append(out, p)
		}
	}
	return out, nil
}

// placeFence writes a data-less entry of epoch at the WAL tip (the position after the newest
// entry past replayAfter). A writer of an older epoch whose next put lands on that position —
// or on any taken position — learns it is fenced. An older writer that races us to the tip
// pushes the fence one position further; an entry of a newer epoch there means a newer claim
// won, and we are fenced ourselves.
func (w *walLog) placeFence(ctx context.Context, epoch, replayAfter uint64, retries int) (uint64, error) {
	positions, err := w.list(ctx, replayAfter)
	if err != nil {
		return 0, err
	}
	if dir, ok := w.localDir(); ok {
		return w.placeSegmentFence(dir, epoch, replayAfter, positions)
	}
	tip := replayAfter
	if n := len(positions); n > 0 {
		tip = positions[n-1]
	}
	for attempt := 0; attempt < retries; attempt++ {
		pos := tip + 1
		data, err := encodeWALEntry(pos, epoch, nil, nil, memory.DefaultAllocator)
		if err != nil {
			return 0, err
		}
		err = w.create(ctx, pos, data)
		if err == nil {
			return pos, nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			return 0, err
		}
		other, rerr := w.read(ctx, pos, nil, memory.DefaultAllocator)
		if rerr != nil {
			return 0, rerr
		}
		other.release()
		if other.WriterEpoch > epoch {
			return 0, &FencedError{Shard: w.shard, WriterEpoch: epoch, CurrentEpoch: other.WriterEpoch, Op: "place fence entry"}
		}
		tip = pos
	}
	return 0, fmt.Errorf("memwal shard %s: fence entry lost the race for the wal tip %d times", w.shard, retries)
}

// deleteEntries removes the entries at positions first..last, best effort: an entry left behind
// is at or below replay_after and never replayed.
func (w *walLog) deleteEntries(ctx context.Context, first, last uint64, warn func(msg string, args ...any)) {
	if w.seg != nil {
		w.deleteLocal(ctx, last, warn)
		return
	}
	for p := first; p <= last && p != 0; p++ {
		if err := w.store.Delete(ctx, w.paths.makeWALKey(p)); err != nil {
			warn("memwal: could not delete flushed wal entry", "shard", w.shard, "position", p, "err", err)
		}
	}
}
