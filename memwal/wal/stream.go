package wal

// Stream records: the WAL format of a streamed put (memwal's Shard.StreamPut). Each batch of the
// put is a stream record — an Arrow IPC stream like an entry, of kind "stream", carrying the
// writer epoch, a stream id and the record's index in its stream, and no position — appended to
// the writer's segment (AppendStreamRecord); the put's commit entry names the stream (StreamRef:
// id, record count, CRC-32C of the records' payloads in order) instead of carrying batches.
// Stream records count only through a commit entry that counts (the fence rule): one of the same
// writer epoch naming their stream, whose records are all there and match its count and CRC.

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// streamRecord is a stream record found by a list: its writer epoch, index, payload and segment.
type streamRecord struct {
	epoch   uint64
	seq     int
	data    []byte
	segment int // index into the segments the list found
}

// streamRecords returns the payloads of the records of ref's stream from the last list, checked:
// writer epoch, one record per index in order, count and CRC. It implements streamRecords.
func (w *Log) streamRecords(ref *StreamRef, epoch uint64) ([][]byte, error) {
	recs := slices.Clone(w.streams[ref.ID])
	slices.SortStableFunc(recs, func(a, b streamRecord) int { return a.seq - b.seq })
	if len(recs) != ref.Records {
		// Corrupt for a writer's replay: nothing frees a segment holding the records of a commit
		// above replay_after. A read-only view may have read the WAL after a flush freed them (its
		// manifest is older): ErrNotFound makes it start over, as for a vanished entry.
		return nil, fmt.Errorf("%w: stream %s: %d of its %d records found: %w", ErrCorrupt, ref.ID, len(recs), ref.Records, objstore.ErrNotFound)
	}
	out := make([][]byte, len(recs))
	var crc uint32
	for i, r := range recs {
		if r.seq != i || r.epoch != epoch {
			return nil, fmt.Errorf("%w: stream %s: record %d is index %d of writer epoch %d, want writer epoch %d", ErrCorrupt, ref.ID, i, r.seq, r.epoch, epoch)
		}
		crc = crc32.Update(crc, castagnoli, r.data)
		out[i] = r.data
	}
	if crc != ref.CRC {
		return nil, fmt.Errorf("%w: stream %s: records checksum %08x, commit says %08x", ErrCorrupt, ref.ID, crc, ref.CRC)
	}
	return out, nil
}

// WriteStreamRecord encodes record seq of stream id, of writer epoch epoch, holding batch b (in
// schema, the table schema), into buf (reset first) after room bytes left for a header
// (SegmentHeaderSize for AppendStreamRecord).
func WriteStreamRecord(buf *bytes.Buffer, room int, epoch uint64, id string, seq int, schema *arrow.Schema, b arrow.RecordBatch) error {
	buf.Reset()
	buf.Grow(room + int(arrowschema.RecordBytes(b)) + 16<<10)
	buf.Write(make([]byte, room))
	md := schema.Metadata()
	keys := slices.Concat(md.Keys(), []string{metaKind, metaWriterEpoch, metaPosition, metaStreamID, metaStreamSeq})
	vals := slices.Concat(md.Values(), []string{kindStream, strconv.FormatUint(epoch, 10), "0", id, strconv.Itoa(seq)})
	meta := arrow.NewMetadata(keys, vals)
	recSchema := arrow.NewSchema(schema.Fields(), &meta)
	w := ipc.NewWriter(buf, ipc.WithSchema(recSchema))
	rb := array.NewRecordBatch(recSchema, b.Columns(), b.NumRows())
	err := w.Write(rb)
	rb.Release()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("encode stream %s record %d: %w", id, seq, err)
	}
	return nil
}

// UpdateStreamCRC returns crc continued over payload (CRC-32C, Castagnoli): how StreamRef.CRC is
// made from a stream's record payloads, in order, starting at 0.
func UpdateStreamCRC(crc uint32, payload []byte) uint32 {
	return crc32.Update(crc, castagnoli, payload)
}

// Segmented reports whether this writer appends to segments on a local disk (PlaceFence placed
// its fence in one); only then does it take stream records.
func (w *Log) Segmented() bool { return w.seg != nil }

// StartStream starts a streamed put in this writer's segments: it returns the stream's reference
// with a new random id, no records yet and a CRC of 0, and pins the current segment and every
// later one until UnpinStream. REQUIRES: Segmented.
func (w *Log) StartStream() *StreamRef {
	return &StreamRef{ID: uuid.NewString(), first: w.seg.pin()}
}

// AppendStreamRecord writes rec, SegmentHeaderSize bytes of room followed by a payload
// WriteStreamRecord encoded, as the next record of the writer's segments, framed here, without
// making it durable: the fdatasync of the entry that commits its stream (or of the segment when
// it is left) does. After an error the segment's state is unknown. It fails with an error
// wrapping ErrClosed after Close. REQUIRES: Segmented.
func (w *Log) AppendStreamRecord(rec []byte) error { return w.seg.appendData(rec) }

// UnpinStream ends ref's pin of its segments (StartStream). REQUIRES: Segmented.
func (w *Log) UnpinStream(ref *StreamRef) { w.seg.unpin(ref.first) }

// ReleaseSegments frees the writer's segments whose entries are all at or below replayAfter (the
// shard manifest's replay_after) and that no open stream pins: older writers' are deleted, the
// writer's own recycled. REQUIRES: Segmented.
func (w *Log) ReleaseSegments(replayAfter uint64) { w.seg.release(replayAfter) }

// FreeSegmentPathsForTesting returns the paths of the segments on the writer's free list, oldest
// first. It is for tests only.
func (w *Log) FreeSegmentPathsForTesting() []string {
	w.seg.mu.Lock()
	defer w.seg.mu.Unlock()
	var out []string
	for _, f := range w.seg.free {
		out = append(out, f.path)
	}
	return out
}

// Listed reports whether the last List read the entry at pos into memory (it does for a WAL with
// segments, or on a local disk); Read and ReadHeader then decode those bytes, with no store read.
func (w *Log) Listed(pos uint64) bool {
	_, ok := w.listed[pos]
	return ok
}
