package wal

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
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// Schema metadata keys of a WAL entry. An entry is one Arrow IPC stream: the table schema with
// these keys added to its metadata, then the batches of every put in the group, in order.
const (
	metaKind        = "flight_sink.memwal.kind" // "data" or "fence"
	metaWriterEpoch = "flight_sink.memwal.writer_epoch"
	metaPosition    = "flight_sink.memwal.position"
	metaPuts        = "flight_sink.memwal.puts"       // JSON []putMeta
	metaStreamID    = "flight_sink.memwal.stream"     // a stream record's stream id (stream.go)
	metaStreamSeq   = "flight_sink.memwal.stream_seq" // a stream record's index in its stream, from 0

	kindData  = "data"
	kindFence = "fence"
	// kindStream is a data record of a streamed put (stream.go): batches without a position,
	// counted only through the commit entry that names their stream.
	kindStream = "stream"
)

// putMeta describes one put inside an entry: its epoch identity (none for a plain append)
// and how many of the entry's batches, taken in order, it owns.
type putMeta struct {
	QueryID string `json:"query_id,omitempty"`
	EpochID *int64 `json:"epoch_id,omitempty"`
	Batches int    `json:"batches"`
	Rows    int64  `json:"rows"`
	// Stream, for a streamed put, names the stream records that hold its batches; the entry
	// itself then holds none of them.
	Stream *StreamRef `json:"stream,omitempty"`
}

// StreamRef is a streamed put's reference to its data records (stream.go), stored in its commit
// entry's put metadata. A writer gets one from Log.StartStream and fills Records and CRC as it
// appends the records.
type StreamRef struct {
	// ID is the stream's id, a random UUID never reused.
	ID string `json:"id"`
	// Records is how many stream records the stream wrote.
	Records int `json:"records"`
	// CRC is the CRC-32C (Castagnoli) of the records' payloads, in order (UpdateStreamCRC).
	CRC uint32 `json:"crc"`

	first uint64 // writer side: log number of the segment holding the first record
}

// Put is one put of an entry: the batches of one caller's put, with its epoch identity.
type Put struct {
	// Epoch is the put's streaming epoch identity; nil for a put without one.
	Epoch *epochid.ID
	// Batches are the put's batches, in the table schema. DecodeHeader leaves them nil.
	Batches []arrow.RecordBatch
	// Rows is the number of rows in Batches.
	Rows int64
	// Stream is set for a streamed put: its batches are in the stream records it names, not in
	// the entry.
	Stream *StreamRef
}

// Entry is a decoded WAL entry or, with StreamID set, a stream record (no position; one put
// holding the record's batches, without identity).
type Entry struct {
	// Position is the entry's WAL position (0 for a stream record).
	Position uint64
	// WriterEpoch is the writer epoch of the writer that wrote it.
	WriterEpoch uint64
	// Fence marks a data-less fence entry (PlaceFence).
	Fence bool
	// Puts are the entry's puts, in the order they were grouped.
	Puts []Put
	// StreamID, for a stream record, is its stream's id; empty for an entry.
	StreamID string
	// StreamSeq, for a stream record, is its index in its stream, from 0.
	StreamSeq int
}

// streamRecords returns the payloads of the stream records ref names, written by writer epoch
// epoch, checked against the ref (count and CRC); an error wraps ErrCorrupt. Nil when the entry
// was not read from a segment listing.
type streamRecords func(ref *StreamRef, epoch uint64) ([][]byte, error)

// Release releases the batches of every put of the entry.
func (e *Entry) Release() {
	for _, p := range e.Puts {
		for _, b := range p.Batches {
			b.Release()
		}
	}
}

// EncodeEntry encodes the entry at position pos of writer epoch epoch holding puts, in schema,
// the table schema; a nil schema (and no puts) encodes a fence entry. The bytes are what Create
// stores and DecodeEntry reads. It retains nothing of puts.
func EncodeEntry(pos, epoch uint64, schema *arrow.Schema, puts []Put, alloc memory.Allocator) ([]byte, error) {
	return encodeRecord(0, pos, epoch, schema, puts, alloc)
}

// encodeRecord is EncodeEntry with room bytes left free before the entry (a segment
// record's header), so the record needs no second copy.
func encodeRecord(room int, pos, epoch uint64, schema *arrow.Schema, puts []Put, alloc memory.Allocator) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(room + int(min(BatchBytes(puts), 256<<20)) + 16<<10) // the batches, their padding and the messages: one allocation
	buf.Write(make([]byte, room))
	if err := writeEntry(&buf, pos, epoch, schema, puts, alloc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeEntry encodes one entry into out; schema is the table schema (nil for a fence).
func writeEntry(out io.Writer, pos, epoch uint64, schema *arrow.Schema, puts []Put, alloc memory.Allocator) error {
	kind := kindData
	if schema == nil {
		kind, schema = kindFence, arrow.NewSchema(nil, nil)
	}
	metas := make([]putMeta, len(puts))
	for i, p := range puts {
		metas[i] = putMeta{Batches: len(p.Batches), Rows: p.Rows, Stream: p.Stream}
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

// DecodeEntry parses the entry stored under key (the key only names it in messages and, when it
// is an entry key, must agree with the position inside). Its batches are returned in
// tableSchema (nil: the entry's own schema, the WAL metadata stripped); an entry written in an
// older schema of the table is read through tableSchema. The caller releases them with
// Entry.Release. Bytes that are no entry, and a streamed put (its batches are in stream records,
// which only a segment listing finds: Log.Read), give an error wrapping ErrCorrupt.
func DecodeEntry(key string, b []byte, tableSchema *arrow.Schema, alloc memory.Allocator) (*Entry, error) {
	return decodeEntryFrom(key, b, tableSchema, alloc, nil)
}

// decodeEntryFrom is DecodeEntry reading streamed puts' batches from the stream records
// streams returns.
func decodeEntryFrom(key string, b []byte, tableSchema *arrow.Schema, alloc memory.Allocator, streams streamRecords) (*Entry, error) {
	r, e, metas, err := openEntry(key, b, alloc)
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
		e.Puts = []Put{{Batches: batches, Rows: rows}}
		return e, nil
	}
	next := 0
	for i, m := range metas {
		var p Put
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
			p = Put{Batches: got, Rows: m.Rows, Stream: m.Stream}
		case m.Batches < 0 || next+m.Batches > len(batches):
			release()
			return nil, fmt.Errorf("%w: wal entry %s: puts name %d+ batches, entry holds %d", ErrCorrupt, key, next+m.Batches, len(batches))
		default:
			p = Put{Batches: batches[next : next+m.Batches], Rows: m.Rows}
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
			p.Epoch = &epochid.ID{QueryID: m.QueryID, EpochID: *m.EpochID}
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
func readEntryBatches(key string, r *arrowschema.CheckedIPCReader, tableSchema *arrow.Schema) ([]arrow.RecordBatch, error) {
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
func readStreamBatches(key string, ref *StreamRef, epoch uint64, tableSchema *arrow.Schema, alloc memory.Allocator, streams streamRecords) ([]arrow.RecordBatch, error) {
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
		r, e, _, err := openEntry(rkey, p, alloc)
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

// DecodeHeader parses an entry's header only: its position, writer epoch, kind and, for a
// data entry, each put's epoch identity and row count (Batches stays nil); for a stream record,
// its stream id and index. It reads the schema message, behind the same guard as DecodeEntry,
// and no batch; readers that need identities or counts, not rows, use it (memwal's read-only
// view of a shard, StoredShard). Bytes that fail give an error wrapping ErrCorrupt.
func DecodeHeader(key string, b []byte) (*Entry, error) {
	r, e, metas, err := openEntry(key, b, memory.DefaultAllocator)
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
		p := Put{Rows: m.Rows, Stream: m.Stream}
		if m.EpochID != nil {
			p.Epoch = &epochid.ID{QueryID: m.QueryID, EpochID: *m.EpochID}
		}
		e.Puts = append(e.Puts, p)
	}
	return e, nil
}

// openEntry checks an entry's bytes, reads its schema message and parses the header: position,
// writer epoch, kind, and (for a data entry) the put metadata. The caller reads the batches from
// the returned reader, if it wants them, and releases it.
func openEntry(key string, b []byte, alloc memory.Allocator) (*arrowschema.CheckedIPCReader, *Entry, []putMeta, error) {
	r, err := OpenIPC("wal entry "+key, b, alloc)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*arrowschema.CheckedIPCReader, *Entry, []putMeta, error) {
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
	e := &Entry{}
	if e.Position, err = strconv.ParseUint(get(metaPosition), 10, 64); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: bad position: %v", ErrCorrupt, key, err))
	}
	if e.WriterEpoch, err = strconv.ParseUint(get(metaWriterEpoch), 10, 64); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: bad writer epoch: %v", ErrCorrupt, key, err))
	}
	if p, ok := ParseEntryKey(key); ok && p != e.Position {
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
	var metas []putMeta
	if err := json.Unmarshal([]byte(get(metaPuts)), &metas); err != nil {
		return fail(fmt.Errorf("%w: wal entry %s: put metadata: %v", ErrCorrupt, key, err))
	}
	return r, e, metas, nil
}

// OpenIPC opens b, an Arrow IPC stream a shard stored (what names it in messages: a WAL entry,
// a generation file), for reading; the caller releases the reader. The bytes are read as
// arrowschema.OpenIPC reads untrusted Arrow data (every message checked before arrow-go decodes
// it, every batch's data against its schema), and the schema must pass the type policy
// (arrowschema.StoredSchema). Bytes that fail are ErrCorrupt, when opened or when read (Err).
func OpenIPC(what string, b []byte, alloc memory.Allocator) (*arrowschema.CheckedIPCReader, error) {
	r, err := arrowschema.OpenIPC(b, alloc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	// A shard holds stored types only (arrowschema.StoredSchema): a type the policy refuses (a
	// decimal whose precision or scale no table can hold) was never acknowledged by this server.
	if _, err := arrowschema.StoredSchema(r.Schema()); err != nil {
		r.Release()
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

// Config says which WAL a Log reads and writes, and how.
type Config struct {
	// Store holds the WAL.
	Store objstore.Store
	// Shard is the shard's id; it is used in messages only.
	Shard string
	// Prefix is the key prefix of the shard's WAL directory, ending in Dir
	// (<table>/_mem_wal/<shard>/wal/).
	Prefix string
	// SegmentBytes is the preallocated size of a segment on a local disk (memwal's
	// Options.WALSegmentBytes); 0 or less means DefaultSegmentBytes.
	SegmentBytes int64
	// OnSegmentSync, when set, is called with the time each entry appended to a segment took to
	// become durable (its fdatasync), after it returned. It must not block.
	OnSegmentSync func(time.Duration)
}

// Log reads and writes one shard's WAL entries: objects created put-if-absent on an object
// store, records in segment files on a local disk (segment.go). Readers of either see both, so a
// shard holding entry objects replays on a local disk.
//
// A Log is a reader until PlaceFence makes it the shard's writer (on a local disk, Segmented).
// List, Forget and Close must not run concurrently with any other method. Between two Lists,
// Read and ReadHeader may run concurrently with each other, and the writer's segment methods
// (AppendEntry, DeleteEntries, StartStream, AppendStreamRecord, UnpinStream, ReleaseSegments)
// may run concurrently with each other: the segment writer has its own lock.
type Log struct {
	store  objstore.Store
	shard  string
	prefix string

	segmentBytes int64               // preallocated size of a segment (Config.SegmentBytes)
	onSync       func(time.Duration) // Config.OnSegmentSync
	seg          *segmentWriter      // this writer's segments, from its fence on (local disk only)

	// From the last list on a local disk: where each counting entry's bytes are, the positions
	// stored as objects, and the segments with the highest position each holds.
	listed   map[uint64]entryRef
	objects  []uint64
	segments []segmentFile
	// The stream records of the streams a counting entry commits, by stream id, in order
	// (stream.go); records of streams nothing commits are dropped by the list.
	streams map[string][]streamRecord
}

// NewLog returns a Log of the WAL c names. It does no I/O.
func NewLog(c Config) *Log {
	return &Log{store: c.Store, shard: c.Shard, prefix: c.Prefix, segmentBytes: c.SegmentBytes, onSync: c.OnSegmentSync}
}

// entryRef is a listed entry: its key (for messages) and its bytes.
type entryRef struct {
	key  string
	data []byte
}

// localDir returns the shard's wal directory when the store is a local disk.
func (w *Log) localDir() (string, bool) {
	l, ok := w.store.(*objstore.Local)
	if !ok {
		return "", false
	}
	return filepath.Join(l.Root(), filepath.FromSlash(w.prefix)), true
}

// Forget drops the entry bytes the last List read; Read and ReadHeader read the store again.
func (w *Log) Forget() { w.listed, w.streams = nil, nil }

// Close closes the writer's segment, if it has one, and waits for a spare being prepared. The
// Log must not append after it.
func (w *Log) Close() {
	if w.seg != nil {
		w.seg.close()
	}
}

// Create stores data, an encoded entry (EncodeEntry), as the entry object at pos, put-if-absent:
// the object-store path of a writer. An error wrapping objstore.ErrExists means the position is
// taken: someone else wrote it. A store error whose outcome is unknown is resolved by reading
// the key back: the same bytes there are a success.
func (w *Log) Create(ctx context.Context, pos uint64, data []byte) error {
	key := EntryKey(w.prefix, pos)
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

// Read decodes the entry at pos (DecodeEntry), from the bytes the last List read when it read
// them, else from the store; a streamed put's batches are read from the stream records that
// List found. An entry missing from the store gives an error wrapping objstore.ErrNotFound.
func (w *Log) Read(ctx context.Context, pos uint64, schema *arrow.Schema, alloc memory.Allocator) (*Entry, error) {
	if r, ok := w.listed[pos]; ok {
		return decodeEntryFrom(r.key, r.data, schema, alloc, w.streamRecords)
	}
	key := EntryKey(w.prefix, pos)
	b, err := w.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: read wal entry %d: %w", w.shard, pos, err)
	}
	return DecodeEntry(key, b, schema, alloc)
}

// ReadHeader decodes the header of the entry at pos (DecodeHeader): no batch is read. It reads
// as Read does.
func (w *Log) ReadHeader(ctx context.Context, pos uint64) (*Entry, error) {
	if r, ok := w.listed[pos]; ok {
		return DecodeHeader(r.key, r.data)
	}
	key := EntryKey(w.prefix, pos)
	b, err := w.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: read wal entry %d: %w", w.shard, pos, err)
	}
	return DecodeHeader(key, b)
}

// List returns the positions of the entries after position after that count, ascending. A WAL
// with segments (or on a local disk) is read whole: every entry object and segment record, the
// fence rule applied (an entry of epoch e at position p counts unless a fence of a later epoch
// sits at a position <= p); the bytes of the counting entries are kept for Read and ReadHeader
// until the next List or Forget. Two counting entries at one position are ErrCorrupt.
func (w *Log) List(ctx context.Context, after uint64) ([]uint64, error) {
	// The whole prefix: segment names (log numbers) do not sort with entry positions.
	objs, err := w.store.List(ctx, w.prefix, "")
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: list wal: %w", w.shard, err)
	}
	_, local := w.localDir()
	if local || slices.ContainsFunc(objs, func(o objstore.ObjectInfo) bool { _, ok := ParseSegmentKey(o.Key); return ok }) {
		// Segments are read through the store whoever wrote them, so a shard a local-disk writer
		// left is replayed by any reader of the same directory, a wrapped store's too.
		return w.listAll(ctx, objs, after)
	}
	out := make([]uint64, 0, len(objs))
	for _, o := range objs {
		if p, ok := ParseEntryKey(o.Key); ok && p > after {
			out = append(out, p)
		}
	}
	return out, nil
}

// PlaceFence writes a data-less entry of epoch at the WAL tip (the position after the newest
// entry past replayAfter) and returns its position; the caller (a claim, after it committed
// epoch to the shard manifest) then owns the WAL as its writer. On an object store a writer of an
// older epoch whose next put lands on that position — or on any taken position — learns it is
// fenced. An older writer that races us to the tip pushes the fence one position further, up to
// retries times; an entry of a newer epoch there means a newer claim won, and we are fenced
// ourselves (a *FencedError). On a local disk the fence is the first record of this writer's
// first segment, which no one else writes, and the older writers' segments are adopted, to be
// freed once flushed (ReleaseSegments).
func (w *Log) PlaceFence(ctx context.Context, epoch, replayAfter uint64, retries int) (uint64, error) {
	positions, err := w.List(ctx, replayAfter)
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
		data, err := EncodeEntry(pos, epoch, nil, nil, memory.DefaultAllocator)
		if err != nil {
			return 0, err
		}
		err = w.Create(ctx, pos, data)
		if err == nil {
			return pos, nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			return 0, err
		}
		other, rerr := w.Read(ctx, pos, nil, memory.DefaultAllocator)
		if rerr != nil {
			return 0, rerr
		}
		other.Release()
		if other.WriterEpoch > epoch {
			return 0, &FencedError{Shard: w.shard, WriterEpoch: epoch, CurrentEpoch: other.WriterEpoch, Op: "place fence entry"}
		}
		tip = pos
	}
	return 0, fmt.Errorf("memwal shard %s: fence entry lost the race for the wal tip %d times", w.shard, retries)
}

// DeleteEntries removes the entries at positions first..last, flushed (last is the new
// replay_after), best effort: an entry left behind is at or below replay_after and never
// replayed; warn is told of each entry that could not be deleted. A writer with segments frees
// the segments whose entries are all flushed instead.
func (w *Log) DeleteEntries(ctx context.Context, first, last uint64, warn func(msg string, args ...any)) {
	if w.seg != nil {
		w.deleteLocal(ctx, last, warn)
		return
	}
	for p := first; p <= last && p != 0; p++ {
		if err := w.store.Delete(ctx, EntryKey(w.prefix, p)); err != nil {
			warn("memwal: could not delete flushed wal entry", "shard", w.shard, "position", p, "err", err)
		}
	}
}

// BatchBytes returns the in-memory size of the batches of puts (arrowschema.RecordBytes), the size
// an entry of them is encoded from.
func BatchBytes(puts []Put) int64 {
	var n int64
	for _, p := range puts {
		for _, b := range p.Batches {
			n += arrowschema.RecordBytes(b)
		}
	}
	return n
}
