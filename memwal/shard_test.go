package memwal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// After a new claim the old writer's next put fails with ErrFenced, and nothing it tried to write
// after the claim is visible; what it acknowledged before is.
func TestFencedWriterAcknowledgesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		old := openShard(t, tbl, testShardID, nil)
		put(t, old, "q", 1, 0, 10, "old")

		claimant := openShard(t, tbl, testShardID, nil)
		if claimant.WriterEpoch() <= old.WriterEpoch() {
			t.Fatalf("claim took epoch %d, old writer has %d", claimant.WriterEpoch(), old.WriterEpoch())
		}

		rec := makeRows(100, 10, "late", 2)
		defer rec.Release()
		_, err := old.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 2}, rec)
		var fe *FencedError
		if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.CurrentEpoch != claimant.WriterEpoch() {
			t.Fatalf("old writer's put after the claim: %v, want ErrFenced by epoch %d", err, claimant.WriterEpoch())
		}
		if _, err := old.Put(ctx, nil, rec); !errors.Is(err, ErrFenced) {
			t.Fatalf("old writer's second put: %v, want ErrFenced (sticky)", err)
		}
		if err := old.Flush(ctx); !errors.Is(err, ErrFenced) {
			t.Fatalf("old writer's flush: %v, want ErrFenced", err)
		}

		want := expectRows(0, 10, "old")
		checkRows(t, "claimant's read", readMerged(t, tbl, claimant), want)
		checkRows(t, "stored read", readMerged(t, tbl, NewStoredShard(tbl, testShardID, nil)), want)
		if ok, _ := claimant.EpochCommitted("q", 2); ok {
			t.Fatal("the fenced put's epoch reads as committed")
		}
		put(t, claimant, "q", 2, 100, 10, "new")
		flush(t, claimant)
		checkRows(t, "after the claimant wrote", readMerged(t, tbl, claimant), expectRows(0, 10, "old", 100, 10, "new"))
	})
}

// A manifest commit of a fenced epoch fails, and CommitUpdate applies its closure to the current
// manifest, not to the caller's stale copy.
func TestManifestCommitUpdate(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		a := NewManifestStore(store, "events", testShardID, nil)
		b := NewManifestStore(store, "events", testShardID, nil)
		if _, err := a.CommitUpdate(ctx, 1, func(*ShardManifest) error { return nil }); !errors.Is(err, ErrNoManifest) {
			t.Fatalf("commit before any claim: %v, want ErrNoManifest", err)
		}
		m1, fence1, err := a.ClaimEpoch(ctx)
		if err != nil || m1.WriterEpoch != 1 || m1.Version != 1 || fence1 != 1 {
			t.Fatalf("first claim: %+v fence %d, %v", m1, fence1, err)
		}
		// b learns of version 1, then a commits version 2 behind b's back.
		if _, err := b.ReadLatest(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.CommitUpdate(ctx, 1, func(m *ShardManifest) error {
			m.FlushedGenerations = append(m.FlushedGenerations, FlushedGeneration{Generation: 1})
			m.NextGeneration = 2
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var seen []uint64
		m3, err := b.CommitUpdate(ctx, 1, func(m *ShardManifest) error {
			seen = generationNumbers(m)
			m.FlushedGenerations = append(m.FlushedGenerations, FlushedGeneration{Generation: 2})
			return nil
		})
		if err != nil || len(seen) != 1 || m3.Version != 3 || len(m3.FlushedGenerations) != 2 {
			t.Fatalf("commit on a stale view: saw %v, got %+v, %v", seen, m3, err)
		}
		m4, fence2, err := b.ClaimEpoch(ctx)
		if err != nil || m4.WriterEpoch != 2 || fence2 != 2 {
			t.Fatalf("second claim: %+v fence %d, %v", m4, fence2, err)
		}
		_, err = a.CommitUpdate(ctx, 1, func(*ShardManifest) error { t.Fatal("closure of a fenced writer ran"); return nil })
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("commit of epoch 1 after claim 2: %v, want ErrFenced", err)
		}
	})
}

// A writer dropped without Close (a crash) loses nothing it acknowledged: reopening replays the
// WAL after replay_after, every acknowledged put is there exactly once, and EpochCommitted knows
// every acknowledged epoch, whether it sits in the WAL or in a flushed generation.
func TestReplayAfterCrash(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		o := testOptions()
		o.MemtableMaxRows = 25 // a flush every few epochs, so both paths are exercised
		crashed, err := OpenShard(ctx, tbl, testShardID, o)
		if err != nil {
			t.Fatal(err)
		}
		defer crashed.Close() // only to stop its goroutines at the end; by then it is fenced
		var want []row
		for e := int64(1); e <= 11; e++ { // seals after epochs 3, 6 and 9; 10 and 11 stay in memory
			put(t, crashed, "q", e, e*100, 10, "r")
			want = append(want, expectRows(int(e*100), 10, "r")...)
		}
		sortRows(want)
		for crashed.Stats().SealedMemtables > 0 { // let the background flushes land first
			time.Sleep(time.Millisecond)
		}
		// Drop it: no Close, no Flush. Whatever it has in memory is gone.

		st, err := NewStoredShard(tbl, testShardID, nil).Stats(ctx)
		if err != nil || st.Generations != 3 || st.GenerationRows != 90 || st.MemtableRows != 20 {
			t.Fatalf("stored stats before reopening: %+v, %v; want 3 generations of 90 rows and 20 rows in the wal", st, err)
		}

		s := openShard(t, tbl, testShardID, o)
		m := latestShardManifest(t, tbl, testShardID)
		if len(m.FlushedGenerations) == 0 || s.Stats().MemtableRows == 0 {
			t.Fatalf("want rows both in generations (%d) and replayed (%d rows)", len(m.FlushedGenerations), s.Stats().MemtableRows)
		}
		checkRows(t, "after replay", readMerged(t, tbl, s), want)
		for e := int64(1); e <= 11; e++ {
			ok, loc := s.EpochCommitted("q", e)
			switch {
			case !ok:
				t.Fatalf("epoch %d not committed after replay", e)
			case e <= 9 && !loc.FromWatermark, e > 9 && loc.Position == 0:
				t.Fatalf("epoch %d answered from the wrong place: %v", e, loc)
			}
		}
		if ok, _ := s.EpochCommitted("q", 12); ok {
			t.Fatal("epoch 12 was never written but reads as committed")
		}
		if ok, _ := s.EpochCommitted("other", 1); ok {
			t.Fatal("another query's epoch reads as committed")
		}
		// A replayed epoch is refused, wherever the shard holds it.
		for _, e := range []int64{1, 11} {
			rec := makeRows(e*100, 10, "dup", e)
			_, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: e}, rec)
			rec.Release()
			var ec *epochid.CommittedError
			if !errors.As(err, &ec) || !errors.Is(err, epochid.ErrCommitted) {
				t.Fatalf("replay of epoch %d: %v, want epochid.ErrCommitted", e, err)
			}
		}
		checkRows(t, "after refused replays", readMerged(t, tbl, s), want)
	})
}

// Many concurrent puts are grouped into fewer WAL entries than puts, and every put is durable
// (its entry exists in the store) when it returns.
func TestGroupCommit(t *testing.T) {
	for _, interval := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) {
				ctx := context.Background()
				tbl := createTable(t, store, nil)
				o := testOptions()
				o.WALFlushInterval = interval
				s := openShard(t, tbl, testShardID, o)
				startPos := s.Stats().NextWALPosition
				const puts = 64
				var wg sync.WaitGroup
				errs := make(chan error, puts)
				for i := 0; i < puts; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rec := makeRows(int64(i)*10, 10, "g", int64(i))
						defer rec.Release()
						res, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: int64(i)}, rec)
						if err != nil {
							errs <- err
							return
						}
						// Durable on return: the entry is in the store now.
						if !slices.Contains(walPositions(t, store, s.paths, 0), res.Position) {
							errs <- fmt.Errorf("put returned at wal position %d, which the wal does not hold", res.Position)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				entries := int(s.Stats().NextWALPosition - startPos)
				t.Logf("%d puts in %d wal entries", puts, entries)
				if entries >= puts && interval > 0 {
					t.Fatalf("%d puts took %d wal entries; group commit should batch them", puts, entries)
				}
				if got := len(walPositions(t, store, s.paths, 0)); got != entries+1 { // + the fence
					t.Fatalf("%d wal entries, want %d entries and the fence", got, entries)
				}
				checkRows(t, "rows", readMerged(t, tbl, s), expectRows(0, puts*10, "g"))
			})
		})
	}
}

// Two puts of one epoch racing in one group: one lands, the other is refused as a duplicate.
func TestConcurrentDuplicateEpoch(t *testing.T) {
	ctx := context.Background()
	store, _ := objstore.NewLocal(t.TempDir())
	tbl := createTable(t, store, nil)
	o := testOptions()
	o.WALFlushInterval = 20 * time.Millisecond
	s := openShard(t, tbl, testShardID, o)
	var wg sync.WaitGroup
	results := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := makeRows(0, 10, "d", 7)
			defer rec.Release()
			_, results[i] = s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 7}, rec)
		}()
	}
	wg.Wait()
	landed := 0
	for _, err := range results {
		switch {
		case err == nil:
			landed++
		case errors.Is(err, epochid.ErrCommitted):
		default:
			t.Fatalf("put: %v", err)
		}
	}
	if landed != 1 {
		t.Fatalf("%d of 8 puts of one epoch landed, want 1", landed)
	}
	checkRows(t, "rows", readMerged(t, tbl, s), expectRows(0, 10, "d"))
}

// Past MaxUnflushedBytes a put waits for flushes, then fails with ErrBackpressure; once flushes
// catch up, puts work again.
func TestBackpressure(t *testing.T) {
	ctx := context.Background()
	real, _ := objstore.NewLocal(t.TempDir())
	store := &faultStore{Store: real}
	tbl := createTable(t, store, nil)
	o := testOptions()
	o.MaxUnflushedBytes = 1 // anything past one put is over the limit
	o.BackpressureWait = 100 * time.Millisecond
	s := openShard(t, tbl, testShardID, o)
	block := make(chan struct{})
	store.set(func(f *faultStore) { f.blockPut, f.blockPrefix = block, s.paths.genPrefix() })

	put(t, s, "q", 1, 0, 10, "a") // an empty backlog always admits
	rec := makeRows(10, 10, "a", 2)
	defer rec.Release()
	start := time.Now()
	_, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 2}, rec)
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("put over the limit with a stuck flush: %v, want ErrBackpressure", err)
	}
	if waited := time.Since(start); waited < o.BackpressureWait {
		t.Fatalf("failed after %v, before waiting %v", waited, o.BackpressureWait)
	}
	close(block) // the flush proceeds
	flush(t, s)  // and lands (however long that takes on a loaded machine): the backlog is empty
	if _, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 2}, rec); err != nil {
		t.Fatalf("put once the flush went through: %v", err)
	}
	checkRows(t, "rows", readMerged(t, tbl, s), expectRows(0, 20, "a"))
}

// The memtable is flushed at its row threshold and at its age threshold.
func TestMemtableThresholds(t *testing.T) {
	ctx := context.Background()
	store, _ := objstore.NewLocal(t.TempDir())
	tbl := createTable(t, store, nil)
	o := testOptions()
	o.MemtableMaxRows = 20
	o.MemtableMaxAge = 50 * time.Millisecond
	// AfterFlush sees each generation once, in order, after the shard manifest lists it.
	type flushed struct{ gen, listed uint64 }
	var afterFlush []flushed
	var mu sync.Mutex
	o.AfterFlush = func(g uint64) {
		m, err := NewManifestStore(store, tbl.Name(), testShardID, o).ReadLatest(ctx)
		var listed uint64
		if err == nil && len(m.FlushedGenerations) > 0 {
			listed = m.FlushedGenerations[len(m.FlushedGenerations)-1].Generation
		}
		mu.Lock()
		afterFlush = append(afterFlush, flushed{g, listed})
		mu.Unlock()
	}
	s := openShard(t, tbl, testShardID, o)
	put(t, s, "q", 1, 0, 25, "a") // over the row threshold: sealed at once
	deadline := time.Now().Add(10 * time.Second)
	for len(latestShardManifest(t, tbl, testShardID).FlushedGenerations) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("row threshold did not flush")
		}
		time.Sleep(5 * time.Millisecond)
	}
	put(t, s, "q", 2, 25, 5, "a") // under the row threshold: flushed when it gets old
	for len(latestShardManifest(t, tbl, testShardID).FlushedGenerations) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("age threshold did not flush")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := latestShardManifest(t, tbl, testShardID)
	if m.Queries["q"].Epoch != 2 || m.ReplayAfterWALEntryPosition != 3 {
		t.Fatalf("manifest after two flushes: queries %v, replay_after %d; want epoch 2, 3", m.Queries, m.ReplayAfterWALEntryPosition)
	}
	// Flushed WAL entries are garbage, deleted right after the manifest update (on a local disk
	// the writer's current segment stays, to be appended to: no entry in it is past replay_after).
	walLeft := func() int { return len(walPositions(t, store, s.paths, m.ReplayAfterWALEntryPosition)) }
	for n := walLeft(); n != 0; n = walLeft() {
		if time.Now().After(deadline) {
			t.Fatalf("%d wal entries left after every entry was flushed", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkRows(t, "rows", readMerged(t, tbl, s), expectRows(0, 30, "a"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if fmt.Sprint(afterFlush) != fmt.Sprint([]flushed{{1, 1}, {2, 2}}) {
		t.Fatalf("AfterFlush calls (generation, newest listed): %v, want [{1 1} {2 2}]", afterFlush)
	}
	mu.Unlock()
	late := makeRows(0, 1, "x", 0)
	defer late.Release()
	if _, err := s.Put(ctx, nil, late); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v, want ErrClosed", err)
	}
}
