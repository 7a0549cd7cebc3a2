package memwal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// The acceptance criteria of Lance's MemWAL shard compaction (a fold here), one test each.

// A generation flushed between the folder's read and its drain is retained, not dropped.
func TestFoldGenerationFlushedBetweenReadAndDrainSurvives(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 100, "a")
		flush(t, s) // generation 1

		injected := false
		c := NewFolder(tbl, &FoldOptions{BeforeDrain: func(ctx context.Context, shard string) error {
			// The fold of generation 1 has committed; a new generation lands before the drain.
			put(t, s, "q", 2, 100, 50, "b")
			flush(t, s) // generation 2
			injected = true
			return nil
		}})
		n, err := c.FoldShard(ctx, testShardID)
		if err != nil || n != 1 || !injected {
			t.Fatalf("fold: %d, %v (injected %v), want 1 generation", n, err, injected)
		}
		m := latestShardManifest(t, tbl, testShardID)
		if got := generationNumbers(m); len(got) != 1 || got[0] != 2 {
			t.Fatalf("after the drain the shard lists generations %v, want [2]", got)
		}
		checkRows(t, "base after the first fold", baseRows(t, tbl), expectRows(0, 100, "a"))
		checkRows(t, "merged read", readMerged(t, tbl, s), expectRows(0, 100, "a", 100, 50, "b"))

		// The survivor is folded by the next fold, not lost.
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("second fold: %d, %v, want 1", n, err)
		}
		checkRows(t, "base after the second fold", baseRows(t, tbl), expectRows(0, 100, "a", 100, 50, "b"))
		checkRows(t, "merged read", readMerged(t, tbl, s), expectRows(0, 100, "a", 100, 50, "b"))
	})
}

// Directories of merged generations are deleted after the drain; a delete failure is best effort
// and the fold still reports success.
func TestFoldDeleteFailureIsBestEffort(t *testing.T) {
	forEachStore(t, func(t *testing.T, real objstore.Store) {
		ctx := context.Background()
		store := &faultStore{Store: real}
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 10, "a")
		flush(t, s)
		put(t, s, "q", 2, 10, 10, "b")
		flush(t, s)
		genPrefix := newShardPaths(tbl.Name(), testShardID).genPrefix()
		if n := countKeys(t, real, genPrefix); n != 2 {
			t.Fatalf("%d generation files before the fold, want 2", n)
		}

		store.set(func(f *faultStore) {
			f.failDelete = func(key string) bool { return strings.HasPrefix(key, genPrefix) }
		})
		n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID)
		if err != nil || n != 2 {
			t.Fatalf("fold with failing deletes: %d, %v, want success with 2 generations", n, err)
		}
		if got := generationNumbers(latestShardManifest(t, tbl, testShardID)); len(got) != 0 {
			t.Fatalf("shard still lists generations %v after the drain", got)
		}
		if n := countKeys(t, real, genPrefix); n != 2 {
			t.Fatalf("%d generation files left, want both (their deletes failed)", n)
		}
		checkRows(t, "merged read", readMerged(t, tbl, s), expectRows(0, 10, "a", 10, 10, "b"))

		// Once deletes work again, a later fold sweeps the leftovers (reclaiming nothing new).
		store.set(func(f *faultStore) { f.failDelete = nil })
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("fold after the fault: %d, %v, want 0", n, err)
		}
		if n := countKeys(t, real, genPrefix); n != 0 {
			t.Fatalf("%d generation files left after the sweep, want 0", n)
		}
		checkRows(t, "base", baseRows(t, tbl), expectRows(0, 10, "a", 10, 10, "b"))
	})
}

// replay_after_wal_entry_position is left untouched, and a reopened writer does not replay the
// merged entries again.
func TestFoldLeavesReplayAfterAndReopenDoesNotReplayMerged(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		for e := int64(1); e <= 3; e++ {
			put(t, s, "q", e, e*10, 10, "a")
		}
		flush(t, s)
		put(t, s, "q", 4, 40, 10, "m") // stays in the memtable (and the WAL)
		before := latestShardManifest(t, tbl, testShardID)
		if before.ReplayAfterWALEntryPosition == 0 {
			t.Fatal("flush did not advance replay_after")
		}

		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("fold: %d, %v, want 1", n, err)
		}
		after := latestShardManifest(t, tbl, testShardID)
		if after.ReplayAfterWALEntryPosition != before.ReplayAfterWALEntryPosition {
			t.Fatalf("the fold moved replay_after from %d to %d", before.ReplayAfterWALEntryPosition, after.ReplayAfterWALEntryPosition)
		}
		if after.WriterEpoch != before.WriterEpoch {
			t.Fatalf("the fold changed the writer epoch from %d to %d (it must not fence the writer)", before.WriterEpoch, after.WriterEpoch)
		}

		// The resident writer was not fenced: it keeps writing.
		put(t, s, "q", 5, 50, 10, "m")
		s.Close()

		s2 := openShard(t, tbl, testShardID, nil)
		if st := s2.Stats(); st.MemtableRows != 20 {
			t.Fatalf("reopened writer replayed %d rows, want the 20 not yet flushed (merged entries must not come back)", st.MemtableRows)
		}
		want := expectRows(10, 30, "a", 40, 20, "m")
		checkRows(t, "merged read after reopen", readMerged(t, tbl, s2), want)
		checkRows(t, "merged read from storage", readMerged(t, tbl, NewStoredShard(tbl, testShardID, nil)), want)
		for e := int64(1); e <= 5; e++ {
			if ok, loc := s2.EpochCommitted("q", e); !ok {
				t.Fatalf("epoch %d not committed after reopen (%v)", e, loc)
			}
		}
	})
}

// A crash between the fold (append) and the drain neither loses nor double-counts rows, with and
// without a primary key. The crash is the drain's manifest write failing; a new folder then
// finishes the job without appending again.
func TestFoldInterruptedBetweenAppendAndDrain(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "no_key"
		var pk []string
		if keyed {
			name, pk = "primary_key", []string{"id"}
		}
		t.Run(name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, real objstore.Store) {
				ctx := context.Background()
				store := &faultStore{Store: real}
				tbl := createTable(t, store, pk)
				s := openShard(t, tbl, testShardID, nil)
				put(t, s, "q", 1, 0, 30, "a")
				flush(t, s)
				put(t, s, "q", 2, 30, 30, "b")
				flush(t, s)
				put(t, s, "q", 3, 60, 5, "m") // memtable
				want := expectRows(0, 30, "a", 30, 30, "b", 60, 5, "m")

				manifests := newShardPaths(tbl.Name(), testShardID).manifestPrefix()
				crash := NewFolder(tbl, &FoldOptions{BeforeDrain: func(ctx context.Context, shard string) error {
					store.set(func(f *faultStore) {
						f.failCreate = func(key string) bool { return strings.HasPrefix(key, manifests) }
					})
					return nil
				}})
				if n, err := crash.FoldShard(ctx, testShardID); !errors.Is(err, errInjected) || n != 0 {
					t.Fatalf("interrupted fold: %d, %v, want the injected drain failure", n, err)
				}
				store.set(func(f *faultStore) { f.failCreate = nil })

				// Folded but not drained: the base holds the rows, the shard still lists them.
				checkRows(t, "base after the fold", baseRows(t, tbl), expectRows(0, 30, "a", 30, 30, "b"))
				if got := generationNumbers(latestShardManifest(t, tbl, testShardID)); len(got) != 2 {
					t.Fatalf("shard lists generations %v after the interrupted drain, want both", got)
				}
				checkRows(t, "merged read between fold and drain", readMerged(t, tbl, s), want)
				checkRows(t, "stored read between fold and drain", readMerged(t, tbl, NewStoredShard(tbl, testShardID, nil)), want)

				base, _ := tbl.Latest(ctx)
				n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID)
				if err != nil || n != 2 {
					t.Fatalf("fold after the crash: %d, %v, want 2 drained", n, err)
				}
				if now, _ := tbl.Latest(ctx); now.Version != base.Version {
					t.Fatalf("the rerun committed version %d: it must not append the merged generations again", now.Version)
				}
				checkRows(t, "base after the rerun", baseRows(t, tbl), expectRows(0, 30, "a", 30, 30, "b"))
				checkRows(t, "merged read after the rerun", readMerged(t, tbl, s), want)
			})
		})
	}
}

// FoldShard returns the number of generations reclaimed: 0 when nothing is pending or the
// shard has no manifest.
func TestFoldReturnsCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		c := NewFolder(tbl, nil)

		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("fold of a shard with no manifest: %d, %v, want 0, nil", n, err)
		}
		if _, err := NewManifestStore(store, tbl.Name(), testShardID, nil).ReadLatest(ctx); !errors.Is(err, ErrNoManifest) {
			t.Fatalf("the fold created a manifest: %v", err)
		}

		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 5, "a")
		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("fold with only a memtable: %d, %v, want 0", n, err)
		}
		for e := int64(2); e <= 4; e++ {
			put(t, s, "q", e, e*10, 5, "a")
			flush(t, s)
		}
		if n, err := c.FoldShardIfReady(ctx, testShardID, 4); err != nil || n != 0 {
			t.Fatalf("fold if ready (4) with 3 pending: %d, %v, want 0", n, err)
		}
		if got := generationNumbers(latestShardManifest(t, tbl, testShardID)); len(got) != 3 {
			t.Fatalf("the threshold variant touched the shard: generations %v", got)
		}
		if n, err := c.FoldShardIfReady(ctx, testShardID, 3); err != nil || n != 3 {
			t.Fatalf("fold if ready (3) with 3 pending: %d, %v, want 3", n, err)
		}
		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("fold with nothing pending: %d, %v, want 0", n, err)
		}
		checkRows(t, "merged read", readMerged(t, tbl, s), expectRows(0, 5, "a", 20, 5, "a", 30, 5, "a", 40, 5, "a"))
	})
}

// The retirement hook holds a merged generation's files back; a later fold deletes them
// once it allows.
func TestFoldRetirementHook(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 5, "a")
		flush(t, s)
		put(t, s, "q", 2, 5, 5, "a")
		flush(t, s)
		var asked []string
		allow := uint64(1)
		c := NewFolder(tbl, &FoldOptions{CanRetire: func(shard string, g uint64) bool {
			asked = append(asked, fmt.Sprintf("%s/%d", shard[:8], g))
			return g <= allow
		}})
		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 2 {
			t.Fatalf("fold: %d, %v, want 2", n, err)
		}
		paths := newShardPaths(tbl.Name(), testShardID)
		if n := countKeys(t, store, paths.root+makeGenDir(1)); n != 0 {
			t.Fatalf("generation 1 (retirable) still has %d files", n)
		}
		if n := countKeys(t, store, paths.root+makeGenDir(2)); n != 1 {
			t.Fatalf("generation 2 (held back) has %d files, want 1", n)
		}
		allow = 2
		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("second fold: %d, %v, want 0", n, err)
		}
		if n := countKeys(t, store, paths.genPrefix()); n != 0 {
			t.Fatalf("%d generation files left once the hook allows, want 0 (asked %v)", n, asked)
		}
		checkRows(t, "merged read", readMerged(t, tbl, s), expectRows(0, 10, "a"))
	})
}
