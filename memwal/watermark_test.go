package memwal

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestQueryWatermarkAdvance(t *testing.T) {
	p := func(e int64) *int64 { return &e }
	for _, c := range []struct {
		name   string
		old    *QueryWatermark
		epochs []int64
		epoch  int64
		prev   *int64
		gen    uint64
	}{
		{"first flush, one epoch", nil, []int64{5}, 5, nil, 9},
		{"first flush, several", nil, []int64{3, 5, 4, 5}, 5, p(4), 9},
		{"next epoch", &QueryWatermark{Epoch: 5, Generation: 2}, []int64{6}, 6, p(5), 9},
		{"two newer", &QueryWatermark{Epoch: 6, PrevEpoch: p(5), Generation: 2}, []int64{8, 7}, 8, p(7), 9},
		{"the top again (a replayed epoch flushed twice)", &QueryWatermark{Epoch: 8, PrevEpoch: p(7), Generation: 2}, []int64{8}, 8, p(7), 9},
		{"older than both", &QueryWatermark{Epoch: 8, PrevEpoch: p(7), Generation: 2}, []int64{3}, 8, p(7), 2},
		{"between", &QueryWatermark{Epoch: 8, Generation: 2}, []int64{6}, 8, p(6), 2},
		{"manifest without prev", &QueryWatermark{Epoch: 8, Generation: 2}, []int64{9}, 9, p(8), 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			var old QueryWatermark
			if c.old != nil {
				old = *c.old
			}
			got := old.advance(c.old != nil, c.epochs, 9, 100)
			if got.Epoch != c.epoch || (got.PrevEpoch == nil) != (c.prev == nil) || (c.prev != nil && *got.PrevEpoch != *c.prev) || got.Generation != c.gen {
				t.Fatalf("advance = epoch %d prev %v gen %d, want epoch %d prev %v gen %d", got.Epoch, got.PrevEpoch, got.Generation, c.epoch, c.prev, c.gen)
			}
			for _, e := range []int64{c.epoch, c.epoch - 100} {
				if _, ok := got.location(e); !ok {
					t.Fatalf("epoch %d at or below the watermark is not covered", e)
				}
			}
			if _, ok := got.location(c.epoch + 1); ok {
				t.Fatalf("epoch %d above the watermark is covered", c.epoch+1)
			}
			if loc, _ := got.location(c.epoch); !loc.Exact {
				t.Fatal("the top epoch is not exact")
			}
			if c.prev != nil {
				if loc, _ := got.location(*c.prev); !loc.Exact {
					t.Fatal("the previous epoch is not exact")
				}
			}
		})
	}
}

// After a flush, the query's last two epochs are still recognised exactly, through the server that
// wrote them and through another one: a query whose next epoch became durable but was never
// acknowledged (its server died) replays the one before it, which must be a duplicate, not a
// reused query id. (TestTorture found this: a takeover flushes the dead server's shard at once.)
// Older epochs below the watermark are a reused query id.
func TestReplayOfSecondLastEpochAfterFlush(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		srv := newOwnerServers(t, store, 2, 0, 0)
		a, b := srv[0], srv[1]
		if dup, err := b.put("other", 1, 9000, 2); err != nil || dup { // b owns the other shard
			t.Fatalf("put through b: dup %v, %v", dup, err)
		}
		for e := int64(1); e <= 4; e++ {
			if dup, err := a.put("q", e, e*10, 2); err != nil || dup {
				t.Fatalf("put q epoch %d: dup %v, %v", e, dup, err)
			}
		}
		if err := a.ss.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*ownerServer{a, b} {
			for _, e := range []int64{4, 3} {
				if dup, err := s.put("q", e, e*10, 2); err != nil || !dup {
					t.Fatalf("replay of epoch %d after the flush: dup %v, %v; want a duplicate", e, dup, err)
				}
			}
			if _, err := s.put("q", 2, 20, 2); !errors.Is(err, errQueryReusedTest) {
				t.Fatalf("replay of epoch 2, older than the last two: %v, want a reused query id", err)
			}
		}
		if got := storedRows(t, a.tbl, 2); len(got) != 5*2 {
			t.Fatalf("the table holds %d rows, want %d (every epoch once)", len(got), 5*2)
		}
	})
}

// TestQueryWatermarksBounded: a shard that sees 3,000 streaming queries keeps at most
// QueryWatermarksInManifest watermarks in its manifest (the rest in one archive, written once per
// half-bound of queries, as the base table's manifest does), so every flush and lease renewal
// rewrites a bounded manifest; and an early query's replayed epoch is still recognised, by the
// writer, by a writer that reopens the shard and by a read-only view.
func TestQueryWatermarksBounded(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tbl := createTable(t, store, nil)
	s := openShard(t, tbl, testShardID, nil)
	const queries, perFlush = 3000, 100
	query := func(i int) string { return fmt.Sprintf("query-%04d", i) }
	for i := range queries {
		put(t, s, query(i), 7, int64(i), 1, "a")
		if (i+1)%perFlush == 0 {
			flush(t, s)
		}
	}
	m := latestShardManifest(t, tbl, testShardID)
	limit := (&Options{}).EnsureDefaults().QueryWatermarksInManifest
	// The manifest less its flushed generations (a fold drains those; this test folds none).
	bare := m.Clone()
	bare.FlushedGenerations = nil
	b, err := encodeShardManifest(bare)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Queries) > limit || len(b) > 32<<10 {
		t.Fatalf("shard manifest carries %d query watermarks in %d bytes; want at most %d in 32 KiB", len(m.Queries), len(b), limit)
	}
	known := 0
	m.eachQueryWatermark(func(string, QueryWatermark) { known++ })
	if known != queries || m.QueriesArchive == "" {
		t.Fatalf("manifest and archive know %d queries (archive %q), want %d", known, m.QueriesArchive, queries)
	}
	if n := countKeys(t, store, newShardPaths(tbl.Name(), testShardID).root+queriesArchiveDir); n > 2 {
		t.Errorf("%d query watermark archives under the shard, want at most 2 (the current one and the one before)", n)
	}

	replay := func(s *Shard, q string, e int64) error {
		rec := makeRows(0, 1, "again", e)
		defer rec.Release()
		_, err := s.Put(ctx, &epochid.ID{QueryID: q, EpochID: e}, rec)
		return err
	}
	early := query(0)
	if _, hot := m.Queries[early]; hot {
		t.Fatalf("query %s is still in the manifest itself; the test needs an archived one", early)
	}
	if err := replay(s, early, 7); !errors.Is(err, epochid.ErrCommitted) {
		t.Fatalf("replay of %s epoch 7 through the writer: %v, want epochid.ErrCommitted", early, err)
	}
	if ok, _, err := NewStoredShard(tbl, testShardID, nil).EpochCommitted(ctx, early, 7); err != nil || !ok {
		t.Fatalf("read-only view: %s epoch 7 committed %v, %v; want true", early, ok, err)
	}
	s.Close()
	reopened := openShard(t, tbl, testShardID, nil)
	if err := replay(reopened, query(1), 7); !errors.Is(err, epochid.ErrCommitted) {
		t.Fatalf("replay of %s epoch 7 after reopening: %v, want epochid.ErrCommitted", query(1), err)
	}
	// The archived query's next epoch is new, and brings it back into the manifest at the flush.
	if err := replay(reopened, early, 8); err != nil {
		t.Fatalf("epoch 8 of %s: %v", early, err)
	}
	flush(t, reopened)
	if wm, ok := latestShardManifest(t, tbl, testShardID).Queries[early]; !ok || wm.Epoch != 8 || wm.PrevEpoch == nil || *wm.PrevEpoch != 7 {
		t.Fatalf("%s after its next epoch flushed: %+v (in the manifest: %v), want epoch 8 after 7", early, wm, ok)
	}
}
