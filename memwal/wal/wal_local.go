package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/objstore"
)

// The WAL on a local disk: segments (segment.go) plus any entry objects the shard holds (read, then
// deleted by the first flush).

// DefaultSegmentBytes is the preallocated size of a WAL segment when Config.SegmentBytes is not
// set.
const DefaultSegmentBytes = 16 << 20

// listedEntry is one entry found by listLocal, before the fence rule.
type listedEntry struct {
	pos, epoch uint64
	fence      bool
	ref        entryRef
	segment    int      // index into the segments found, -1 for an object
	streams    []string // the streams whose records the entry's streamed puts commit
}

// listAll reads every entry of the shard's WAL listed in objs, objects and segment records
// (readAll), keeps those the fence rule lets count (countingEntries) and pins them (pin): it
// returns the positions after after, ascending, and the entries' bytes stay in w.listed for read
// and readHeader until the next list or forget.
func (w *Log) listAll(ctx context.Context, objs []objstore.ObjectInfo, after uint64) ([]uint64, error) {
	w.listed, w.objects, w.segments, w.streams = nil, nil, nil, nil
	l, err := w.readAll(ctx, objs, after)
	w.objects = l.objects // on an error too: the entry objects read so far
	if err != nil {
		return nil, err
	}
	return w.pin(countingEntries(l.entries), l.segments, l.streams, after)
}

// walListing is what readAll found in a WAL: its entries, before the fence rule, the segments
// holding them and every stream record, by stream.
type walListing struct {
	entries  []listedEntry
	segments []segmentFile
	streams  map[string][]streamRecord
	// objects are the positions of the entry objects found, flushed ones (at or below the
	// listing's after) included: they are still to delete.
	objects []uint64
}

// readAll reads every entry object and segment record listed in objs. An entry object at or
// below after is flushed: its position is noted, its bytes are not read. After an error the
// listing holds what was read before it.
func (w *Log) readAll(ctx context.Context, objs []objstore.ObjectInfo, after uint64) (walListing, error) {
	l := walListing{streams: make(map[string][]streamRecord)}
	add := func(key string, data []byte, seg int) error {
		h, err := DecodeHeader(key, data)
		if err != nil {
			return fmt.Errorf("memwal shard %s: list wal: %w", w.shard, err)
		}
		if h.StreamID != "" {
			if seg >= 0 { // stream records live in segments only
				l.streams[h.StreamID] = append(l.streams[h.StreamID], streamRecord{epoch: h.WriterEpoch, seq: h.StreamSeq, data: data, segment: seg})
			}
			return nil
		}
		le := listedEntry{pos: h.Position, epoch: h.WriterEpoch, fence: h.Fence, ref: entryRef{key: key, data: data}, segment: seg}
		for _, p := range h.Puts {
			if p.Stream != nil {
				le.streams = append(le.streams, p.Stream.ID)
			}
		}
		l.entries = append(l.entries, le)
		return nil
	}
	for _, o := range objs {
		if pos, ok := ParseEntryKey(o.Key); ok {
			if pos <= after {
				l.objects = append(l.objects, pos) // flushed; still to delete
				continue
			}
			b, err := w.store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // deleted by a flush since the listing
			}
			if err != nil {
				return l, fmt.Errorf("memwal shard %s: read wal entry %d: %w", w.shard, pos, err)
			}
			if err := add(o.Key, b, -1); err != nil {
				return l, err
			}
			l.objects = append(l.objects, pos)
			continue
		}
		n, ok := ParseSegmentKey(o.Key)
		if !ok {
			continue
		}
		b, err := w.store.Get(ctx, o.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // recycled or deleted since the listing (after a flush that covers it)
		}
		if err != nil {
			return l, fmt.Errorf("memwal shard %s: read wal segment %s: %w", w.shard, o.Key, err)
		}
		dir, _ := w.localDir() // the path matters only to a local-disk writer adopting the segment
		l.segments = append(l.segments, segmentFile{logNum: n, path: filepath.Join(dir, path.Base(o.Key))})
		payloads, _ := SegmentRecords(b, n)
		var off int
		for _, p := range payloads {
			if err := add(fmt.Sprintf("%s@%d", o.Key, off), p, len(l.segments)-1); err != nil {
				return l, err
			}
			off += SegmentHeaderSize + len(p)
		}
	}
	return l, nil
}

// countingEntries is the fence rule: it returns the entries of all that count, in their order.
// A fence of epoch f at position q hides every entry of an older epoch at positions >= q: records
// an old writer appended after a newer claim scanned the WAL. So an entry of epoch e at position
// p counts unless a fence of a later epoch sits at a position <= p; fences themselves count by
// the same rule.
func countingEntries(all []listedEntry) []listedEntry {
	var fences []listedEntry
	for _, e := range all {
		if e.fence {
			fences = append(fences, e)
		}
	}
	counts := func(e listedEntry) bool {
		for _, f := range fences {
			if f.epoch > e.epoch && f.pos <= e.pos {
				return false
			}
		}
		return true
	}
	out := make([]listedEntry, 0, len(all))
	for _, e := range all {
		if counts(e) {
			out = append(out, e)
		}
	}
	return out
}

// pin keeps the counting entries after after for read and readHeader (w.listed, w.streams) and
// the segments they need (w.segments, each with the newest counting position it holds), and
// returns their positions, ascending. Two counting entries at one position are ErrCorrupt.
func (w *Log) pin(counting []listedEntry, segs []segmentFile, streams map[string][]streamRecord, after uint64) ([]uint64, error) {
	w.listed = make(map[uint64]entryRef)
	var out []uint64
	for _, e := range counting {
		if e.segment >= 0 && e.pos > segs[e.segment].maxPos {
			segs[e.segment].maxPos = e.pos
		}
		for _, id := range e.streams {
			// The segments holding a counting commit's stream records are as needed as the
			// commit itself: they are freed only once it is flushed.
			for _, r := range streams[id] {
				segs[r.segment].maxPos = max(segs[r.segment].maxPos, e.pos)
			}
			if e.pos > after {
				if w.streams == nil {
					w.streams = make(map[string][]streamRecord)
				}
				w.streams[id] = streams[id]
			}
		}
		if e.pos <= after {
			continue
		}
		if prev, dup := w.listed[e.pos]; dup {
			return nil, fmt.Errorf("%w: memwal shard %s: wal position %d is held by both %s and %s", ErrCorrupt, w.shard, e.pos, prev.key, e.ref.key)
		}
		w.listed[e.pos] = e.ref
		out = append(out, e.pos)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	w.segments = segs
	return out, nil
}

// placeSegmentFence starts this writer's segments with a fence entry of epoch at the tip of the
// counting entries (positions, from the claim's list) plus one, and adopts the older segments
// found. No one else writes this writer's segments: there is no race for the position.
func (w *Log) placeSegmentFence(dir string, epoch, replayAfter uint64, positions []uint64) (uint64, error) {
	tip := replayAfter
	if n := len(positions); n > 0 && positions[n-1] > tip {
		tip = positions[n-1]
	}
	pos := tip + 1
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("memwal shard %s: wal directory: %w", w.shard, err)
		}
		// The directory's own entry must survive a crash with the segments in it.
		if err := objstore.SyncDir(filepath.Dir(dir)); err != nil {
			return 0, fmt.Errorf("memwal shard %s: wal directory: %w", w.shard, err)
		}
	}
	size := w.segmentBytes
	if size <= 0 {
		size = DefaultSegmentBytes
	}
	sw := newSegmentWriter(dir, epoch, size, w.onSync)
	sw.adopt(w.segments)
	rec, err := encodeRecord(SegmentHeaderSize, pos, epoch, nil, nil, memory.DefaultAllocator)
	if err != nil {
		return 0, err
	}
	if err := sw.append(rec, pos); err != nil {
		sw.close()
		return 0, fmt.Errorf("memwal shard %s: place fence entry: %w", w.shard, err)
	}
	w.seg = sw
	return pos, nil
}

// AppendEntry makes the entry of puts at pos, of writer epoch epoch in schema, durable in the
// writer's current segment, encoded straight into it, with one fdatasync: the local-disk path of
// a writer (Segmented), instead of EncodeEntry and Create. A streamed put's records, appended
// before, become durable with it. After an error the outcome is unknown. REQUIRES: Segmented.
func (w *Log) AppendEntry(pos, epoch uint64, schema *arrow.Schema, puts []Put, alloc memory.Allocator) error {
	write := func(out io.Writer) error { return writeEntry(out, pos, epoch, schema, puts, alloc) }
	var estimate int64
	var streamsFrom uint64 // the oldest segment holding stream records this entry commits
	for _, p := range puts {
		switch {
		case p.Stream == nil:
			estimate += BatchBytes([]Put{p})
		case streamsFrom == 0 || p.Stream.first < streamsFrom:
			streamsFrom = p.Stream.first
		}
	}
	if err := w.seg.appendWith(pos, estimate+16<<10, streamsFrom, write); err != nil {
		return fmt.Errorf("memwal shard %s: write wal entry %d: %w", w.shard, pos, err)
	}
	return nil
}

// deleteLocal frees what a flush up to replayAfter made unneeded: the entry objects at or below
// it and the segments whose entries all are.
func (w *Log) deleteLocal(ctx context.Context, replayAfter uint64, warn func(msg string, args ...any)) {
	kept := w.objects[:0]
	for _, p := range w.objects {
		if p > replayAfter {
			kept = append(kept, p)
			continue
		}
		if err := w.store.Delete(ctx, EntryKey(w.prefix, p)); err != nil {
			warn("memwal: could not delete flushed wal entry", "shard", w.shard, "position", p, "err", err)
		}
	}
	w.objects = kept
	w.seg.release(replayAfter)
}
