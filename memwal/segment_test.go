package memwal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// walPositions returns the positions of the WAL entries after after that count (a replay would
// read them), in either WAL format.
func walPositions(t testing.TB, store objstore.Store, paths shardPaths, after uint64) []uint64 {
	t.Helper()
	w := &walLog{store: store, shard: "test", paths: paths}
	ps, err := w.list(context.Background(), after)
	if err != nil {
		t.Errorf("list wal: %v", err)
	}
	return ps
}

// A segment's records end at the first one that does not check out, whatever follows it.
func TestSegmentRecordsEnd(t *testing.T) {
	const logNum = 7<<segmentSeqBits | 3
	record := func(n uint64, payload string) []byte {
		b := append(make([]byte, segmentHeaderSize), payload...)
		frameRecord(b, n)
		return b
	}
	good := slices.Concat(record(logNum, "first"), record(logNum, "second"))
	torn := record(logNum, "torn-record")
	flipped := slices.Clone(torn)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name string
		tail []byte
	}{
		{"zeros of a preallocated segment", make([]byte, 4096)},
		{"torn tail: header and part of the payload", torn[:len(torn)-4]},
		{"torn tail: part of the header", torn[:segmentHeaderSize-3]},
		{"a flipped payload byte", flipped},
		{"a stale record of the segment's previous life", record(logNum-1, "stale but well-formed")},
		{"a length past the end", func() []byte {
			b := record(logNum, "x")
			binary.LittleEndian.PutUint32(b[4:], 1<<30)
			return b
		}()},
		{"nothing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Concat(good, tc.tail)
			if tc.tail != nil {
				b = append(b, record(logNum, "after the end")...)
			}
			payloads, end := segmentRecords(b, logNum)
			if len(payloads) != 2 || string(payloads[0]) != "first" || string(payloads[1]) != "second" || end != int64(len(good)) {
				t.Fatalf("records %q ending at %d, want [first second] ending at %d", payloads, end, len(good))
			}
		})
	}
}

// hideLocal hides that a store is a local disk, so a writer uses the object format there: the
// WAL every shard had before segments.
type hideLocal struct{ objstore.Store }

// A shard whose WAL is entry objects (the format before segments) replays on a local disk; the
// new writer appends segments, a further reopen replays both, and a flush deletes the objects.
func TestObjectWALReplaysAsSegments(t *testing.T) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	oldTbl := createTable(t, hideLocal{local}, nil)
	old := openShard(t, oldTbl, testShardID, nil)
	for e := int64(1); e <= 3; e++ {
		put(t, old, "q", e, e*10, 10, "old")
	}
	old.Close()
	if n := countSuffix(t, local, old.paths.walPrefix(), walEntryExt); n != 4 { // 3 entries + a fence
		t.Fatalf("%d wal objects, want 4", n)
	}

	tbl, err := engine.Open(ctx, local, "events", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openShard(t, tbl, testShardID, nil)
	put(t, s, "q", 4, 40, 10, "new")
	want := expectRows(10, 30, "old", 40, 10, "new")
	checkRows(t, "after the upgrade", readMerged(t, tbl, s), want)
	s.Close()
	s = openShard(t, tbl, testShardID, nil)
	checkRows(t, "after a second reopen", readMerged(t, tbl, s), want)
	if ok, _ := s.EpochCommitted("q", 2); !ok {
		t.Fatal("epoch 2, written as an object, is not committed after the upgrade")
	}
	flush(t, s)
	// The flusher deletes flushed entries right after its manifest commit, which Flush waits for.
	deadline := time.Now().Add(10 * time.Second)
	for n := countSuffix(t, local, s.paths.walPrefix(), walEntryExt); n != 0; n = countSuffix(t, local, s.paths.walPrefix(), walEntryExt) {
		if time.Now().After(deadline) {
			t.Fatalf("%d wal objects left after a flush", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkRows(t, "after the flush", readMerged(t, tbl, s), want)
}

// Segments are recycled: a long run of flushed puts keeps a bounded number of segment files,
// and a reopen (which reads recycled files with stale tails) replays exactly what is unflushed.
func TestSegmentsRecycled(t *testing.T) {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createTable(t, local, nil)
	o := testOptions()
	o.WALSegmentBytes = 8 << 10
	o.MemtableMaxRows = 100
	s := openShard(t, tbl, testShardID, o)
	const epochs = 200
	for e := int64(0); e < epochs; e++ {
		put(t, s, "q", e, e*50, 50, "r")
	}
	flush(t, s)
	// Flushed segments are freed right after the flush's manifest commit, which Flush waits for:
	// what stays is the current segment and the free list.
	deadline := time.Now().Add(10 * time.Second)
	for n := countSuffix(t, local, s.paths.walPrefix(), segmentExt); n > 1+maxFreeSegments; n = countSuffix(t, local, s.paths.walPrefix(), segmentExt) {
		if time.Now().After(deadline) {
			t.Fatalf("%d segment files after %d flushed epochs over 8 KiB segments: not recycled", n, epochs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := expectRows(0, epochs*50, "r")
	checkRows(t, "rows", readMerged(t, tbl, s), want)
	s.Close()
	s = openShard(t, tbl, testShardID, o)
	checkRows(t, "after a reopen", readMerged(t, tbl, s), want)
	put(t, s, "q", epochs, epochs*50, 50, "r")
	s.Close()
	s = openShard(t, tbl, testShardID, o)
	checkRows(t, "after a second reopen", readMerged(t, tbl, s), expectRows(0, (epochs+1)*50, "r"))
}

func countSuffix(t *testing.T, store objstore.Store, prefix, suffix string) int {
	t.Helper()
	objs, err := store.List(context.Background(), prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if strings.HasSuffix(o.Key, suffix) {
			n++
		}
	}
	return n
}

// Any bytes read as a segment give records that check out, in order, ending inside the bytes;
// nothing panics.
func FuzzSegmentRecords(f *testing.F) {
	const logNum = 3<<segmentSeqBits | 1
	rec := append(make([]byte, segmentHeaderSize), "payload"...)
	frameRecord(rec, logNum)
	f.Add(rec)
	f.Add(slices.Concat(rec, rec, make([]byte, 64)))
	f.Add(rec[:len(rec)-1])
	// A streamed put: two stream records, then the entry committing them; and the same with a
	// record missing, and cut short.
	streamed := streamedSegment(f, logNum)
	f.Add(streamed)
	f.Add(streamed[:len(streamed)-7])
	first := segmentHeaderSize + int(binary.LittleEndian.Uint32(streamed[4:]))
	f.Add(streamed[first:])
	f.Fuzz(func(t *testing.T, b []byte) {
		payloads, end := segmentRecords(b, logNum)
		if end < 0 || end > int64(len(b)) {
			t.Fatalf("end %d outside %d bytes", end, len(b))
		}
		var n int64
		for _, p := range payloads {
			n += segmentHeaderSize + int64(len(p))
		}
		if n != end {
			t.Fatalf("records take %d bytes, end is %d", n, end)
		}
		// Every record reads as a stream record or an entry, or is corrupt; an entry committing
		// a stream reads its records (from this segment) whole, or is corrupt.
		wl := &walLog{streams: map[string][]streamRecord{}}
		var entries [][]byte
		for _, p := range payloads {
			h, err := decodeWALHeader(fuzzWALKey, p)
			switch {
			case err != nil:
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("header error %q does not wrap ErrCorrupt", err)
				}
			case h.StreamID != "":
				wl.streams[h.StreamID] = append(wl.streams[h.StreamID], streamRecord{epoch: h.WriterEpoch, seq: h.StreamSeq, data: p})
			default:
				entries = append(entries, p)
			}
		}
		for _, p := range entries {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			e, err := decodeWALEntryFrom(fuzzWALKey, p, rowsSchema, mem, wl.streamRecords)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
				}
				continue
			}
			for i, put := range e.Puts {
				var rows int64
				for _, b := range put.Batches {
					rows += b.NumRows()
				}
				if rows != put.Rows {
					t.Fatalf("put %d claims %d rows and holds %d", i, put.Rows, rows)
				}
			}
			e.release()
			mem.AssertSize(t, 0)
		}
	})
}

// streamedSegment returns segment logNum's bytes holding a streamed put of two batches: its two
// stream records, then the entry at position 7 (fuzzWALKey) committing them.
func streamedSegment(t testing.TB, logNum uint64) []byte {
	var seg []byte
	ref := &walStreamRef{ID: "s-1"}
	var batches []arrow.RecordBatch
	for i := 0; i < 2; i++ {
		b := makeRows(int64(i)*10, 10, "s", 1)
		defer b.Release()
		batches = append(batches, b)
		var buf bytes.Buffer
		if err := writeStreamRecord(&buf, segmentHeaderSize, 2, ref.ID, i, rowsSchema, b); err != nil {
			t.Fatal(err)
		}
		rec := buf.Bytes()
		ref.CRC = crc32.Update(ref.CRC, castagnoli, rec[segmentHeaderSize:])
		ref.Records++
		frameRecord(rec, logNum)
		seg = append(seg, rec...)
	}
	puts := []walPut{{Epoch: &engine.EpochIdentity{QueryID: "q", EpochID: 1}, Batches: batches, Rows: 20, Stream: ref}}
	rec, err := encodeWALRecord(segmentHeaderSize, 7, 2, rowsSchema, puts, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	frameRecord(rec, logNum)
	return append(seg, rec...)
}

// A streamed put read back from its segment: the entry's put holds the stream records' batches.
func TestSegmentStreamedPutDecodes(t *testing.T) {
	const logNum = 2<<segmentSeqBits | 1
	payloads, _ := segmentRecords(streamedSegment(t, logNum), logNum)
	if len(payloads) != 3 {
		t.Fatalf("%d records, want 3", len(payloads))
	}
	wl := &walLog{streams: map[string][]streamRecord{}}
	for i, p := range payloads[:2] {
		wl.streams["s-1"] = append(wl.streams["s-1"], streamRecord{epoch: 2, seq: i, data: p})
	}
	e, err := decodeWALEntryFrom(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator, wl.streamRecords)
	if err != nil {
		t.Fatal(err)
	}
	defer e.release()
	if len(e.Puts) != 1 || len(e.Puts[0].Batches) != 2 || e.Puts[0].Rows != 20 || e.Puts[0].Epoch.EpochID != 1 {
		t.Fatalf("decoded %+v, want one put of epoch 1 with 2 batches, 20 rows", e.Puts)
	}
	for _, c := range []struct {
		name    string
		streams map[string][]streamRecord
	}{
		{"a record missing", map[string][]streamRecord{"s-1": wl.streams["s-1"][:1]}},
		{"another writer epoch", map[string][]streamRecord{"s-1": {{epoch: 3, seq: 0, data: payloads[0]}, {epoch: 3, seq: 1, data: payloads[1]}}}},
		{"records swapped", map[string][]streamRecord{"s-1": {{epoch: 2, seq: 0, data: payloads[1]}, {epoch: 2, seq: 1, data: payloads[0]}}}},
	} {
		bad := &walLog{streams: c.streams}
		if _, err := decodeWALEntryFrom(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator, bad.streamRecords); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", c.name, err)
		}
	}
	if _, err := decodeWALEntry(fuzzWALKey, payloads[2], rowsSchema, memory.DefaultAllocator); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a streamed put read without its records: %v, want ErrCorrupt", err)
	}
}

// A shard a local-disk writer left in segments replays through a store that is not a plain local
// one (a wrapper: the writer then writes entry objects), and back: every reader reads both.
func TestSegmentsReplayThroughAnyStore(t *testing.T) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createTable(t, local, nil)
	s := openShard(t, tbl, testShardID, nil)
	put(t, s, "q", 1, 0, 10, "seg")
	s.Close()
	wrapped, err := engine.Open(ctx, hideLocal{local}, "events", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := openShard(t, wrapped, testShardID, nil)
	put(t, w, "q", 2, 10, 10, "obj")
	want := expectRows(0, 10, "seg", 10, 10, "obj")
	checkRows(t, "through the wrapped store", readMerged(t, wrapped, w), want)
	w.Close()
	s = openShard(t, tbl, testShardID, nil)
	checkRows(t, "back on the local store", readMerged(t, tbl, s), want)
	if ok, _ := s.EpochCommitted("q", 1); !ok {
		t.Fatal("epoch 1, written to a segment, is not committed after two reopens")
	}
}
