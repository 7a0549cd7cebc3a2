package memwal

// The read-only view of a shard (StoredShard): it sees what every writer acknowledged, never
// writes to the store, and a merged read that races a fold neither misses nor repeats rows.

import (
	"context"
	"errors"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// storeObjects lists every object of the store with its size, to prove a reader wrote nothing.
func storeObjects(t testing.TB, store objstore.Store) map[string]int64 {
	t.Helper()
	objs, err := store.List(context.Background(), "", "")
	if err != nil {
		t.Fatalf("list store: %v", err)
	}
	out := make(map[string]int64, len(objs))
	for _, o := range objs {
		out[o.Key] = o.Size
	}
	return out
}

// TestStoredShardReadsWithoutWriting: a shard written by two writers in turn (the first flushed a
// generation, the second claimed the shard, leaving a fence entry, and put epochs it has not
// flushed) reads from storage as the second writer holds it: every epoch is committed, with the
// location the writer gives, the stats count the WAL's rows, a merged read has every row once,
// and none of it writes an object. The second writer still owns the shard afterwards.
func TestStoredShardReadsWithoutWriting(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		first := openShard(t, tbl, testShardID, nil)
		for e := int64(0); e < 5; e++ {
			put(t, first, "q", e, e*10, 10, "a")
		}
		flush(t, first)
		// Flush returns once the generation is in the manifest; the flushed WAL entries are
		// deleted after that by the flusher. Close waits for it, so the store is quiet when the
		// reads below take their "before" picture.
		first.Close()
		second := openShard(t, tbl, testShardID, nil) // replays nothing (all flushed)
		for e := int64(5); e < 10; e++ {
			put(t, second, "q", e, e*10, 10, "a")
		}
		put(t, second, "other", 3, 100, 5, "o")

		before := storeObjects(t, store)
		owner := latestShardManifest(t, tbl, testShardID)
		ss := NewStoredShard(tbl, testShardID, testOptions())
		for _, c := range []struct {
			q  string
			e  int64
			ok bool
		}{{"q", 0, true}, {"q", 4, true}, {"q", 5, true}, {"q", 9, true}, {"q", 10, false}, {"other", 3, true}, {"other", 2, false}, {"nobody", 0, false}} {
			got, loc, err := ss.EpochCommitted(ctx, c.q, c.e)
			if err != nil {
				t.Fatal(err)
			}
			wantOK, wantLoc := second.EpochCommitted(c.q, c.e)
			// The writer also knows the rows of an epoch it holds in memory; the stored view
			// does not (EpochLocation.HasRows): the location is compared without them.
			wantLoc.Rows, wantLoc.HasRows = 0, false
			if got != c.ok || got != wantOK || loc != wantLoc {
				t.Fatalf("stored view: epoch %s/%d committed %v at %v; want %v, the writer says %v at %v", c.q, c.e, got, loc, c.ok, wantOK, wantLoc)
			}
			if viaReader, _, err := EpochCommitted(ctx, second, c.q, c.e); err != nil || viaReader != c.ok {
				t.Fatalf("EpochCommitted through the writer: %v, %v; want %v", viaReader, err, c.ok)
			}
		}
		st, err := ss.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		own := second.Stats()
		if st.WriterEpoch != own.WriterEpoch || st.MemtableRows != own.MemtableRows || st.MemtableRows != 55 ||
			st.Generations != 1 || st.GenerationRows != 50 || st.NextWALPosition != own.NextWALPosition ||
			st.ReplayAfterWALEntryPosition != own.ReplayAfterWALEntryPosition || st.NextGeneration != own.NextGeneration {
			t.Fatalf("stored stats %+v, the writer's %+v", st, own)
		}
		want := expectRows(0, 100, "a", 100, 5, "o")
		checkRows(t, "stored read", readMerged(t, tbl, ss), want)
		checkRows(t, "writer read", readMerged(t, tbl, second), want)

		after := storeObjects(t, store)
		if len(after) != len(before) {
			t.Fatalf("reads changed the store: %d objects before, %d after", len(before), len(after))
		}
		for k, n := range before {
			if after[k] != n {
				t.Fatalf("reads changed object %s", k)
			}
		}
		if m := latestShardManifest(t, tbl, testShardID); m.Version != owner.Version || m.WriterEpoch != owner.WriterEpoch {
			t.Fatalf("shard manifest moved from %d (epoch %d) to %d (epoch %d) during reads", owner.Version, owner.WriterEpoch, m.Version, m.WriterEpoch)
		}
		put(t, second, "q", 10, 200, 10, "a") // still the owner
		if ok, _, err := ss.EpochCommitted(ctx, "q", 10); err != nil || !ok {
			t.Fatalf("stored view after the owner's next put: %v, %v", ok, err)
		}
	})
}

// TestFencedWriterAnswersFromStorage: a writer another writer fenced answers EpochCommitted and
// ReadStats from storage, with the epochs the new owner acknowledged, instead of its stale memory.
func TestFencedWriterAnswersFromStorage(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createTable(t, store, nil)
	first := openShard(t, tbl, testShardID, nil)
	put(t, first, "q", 0, 0, 10, "a")
	second := openShard(t, tbl, testShardID, nil)
	put(t, second, "q", 1, 10, 10, "a")
	if ok, _, err := EpochCommitted(ctx, first, "q", 1); err != nil || !ok {
		t.Fatalf("fenced writer: epoch 1 of the new owner committed %v, %v; want true", ok, err)
	}
	st, err := ReadStats(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if st.WriterEpoch != second.WriterEpoch() || st.MemtableRows != 20 || st.Failed == "" {
		t.Fatalf("stats through the fenced writer: %+v", st)
	}
}

// TestMergedReadRacingDrainStartsOver: a merged read that took its base version before a
// a fold merged and drained a generation must not lose that generation's rows. readShards
// against the stale base version fails with errMergedSince (the resident writer's and the stored
// view's snapshots alike) so ScanMerged reads again from the newer base version.
func TestMergedReadRacingDrainStartsOver(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		w := openShard(t, tbl, testShardID, nil)
		put(t, w, "q", 0, 0, 10, "a")
		flush(t, w)
		stale, err := tbl.Latest(ctx) // no generation merged yet
		if err != nil {
			t.Fatal(err)
		}
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("fold: %d, %v", n, err)
		}
		put(t, w, "q", 1, 10, 10, "a")
		flush(t, w) // the writer's manifest no longer lists generation 1
		put(t, w, "q", 2, 20, 10, "a")
		for _, r := range []ShardReader{w, NewStoredShard(tbl, testShardID, nil)} {
			sns, err := snapshotShards(ctx, stale, []ShardReader{r}, readCut{})
			if !errors.Is(err, errMergedSince) {
				releaseSnapshots(sns)
				t.Fatalf("%T: read against the base version before the fold: %v, want errMergedSince", r, err)
			}
			checkRows(t, "merged read", readMerged(t, tbl, r), expectRows(0, 30, "a"))
		}
	})
}
