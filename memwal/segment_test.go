package memwal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// walPositions returns the positions of the WAL entries after after that count (a replay would
// read them), in either WAL format.
func walPositions(t testing.TB, store objstore.Store, paths shardPaths, after uint64) []uint64 {
	t.Helper()
	w := wal.NewLog(wal.Config{Store: store, Shard: "test", Prefix: paths.walPrefix()})
	ps, err := w.List(context.Background(), after)
	if err != nil {
		t.Errorf("list wal: %v", err)
	}
	return ps
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
	for n := countSuffix(t, local, s.paths.walPrefix(), wal.SegmentExt); n > 1+wal.MaxFreeSegments; n = countSuffix(t, local, s.paths.walPrefix(), wal.SegmentExt) {
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
