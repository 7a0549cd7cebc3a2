package memwal

import (
	"context"
	"errors"
	"testing"

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
