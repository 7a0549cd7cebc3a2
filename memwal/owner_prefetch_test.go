package memwal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
)

// TestEpochHeldAsOfArrival: the replay check sees every epoch another server made durable before
// the request arrived, even while a refresh that started earlier (a prefetch for an earlier
// request) is still reading: that refresh may have listed the other shard before the epoch landed,
// so it must not serve. Server b's store calls each wait 50 ms before they run, so the prefetch has
// usually listed a's WAL before a's put and is still reading when the check is made; the outcome
// must not depend on that.
func TestEpochHeldAsOfArrival(t *testing.T) {
	ctx := context.Background()
	a, b, _, target := twoServers(t, 50*time.Millisecond)
	for e := int64(1); e <= 6; e++ {
		b.ss.PrefetchPeers() // for an earlier request: starts, and lists a's WAL, before the epoch below lands
		// Its listing is past: a list and a read of a's segment, each waiting 50 ms first. Its
		// manifest read, 50 ms more, is still to come.
		time.Sleep(115 * time.Millisecond)
		if dup, err := a.put("qa", e, 100+e*10, 2); err != nil || dup {
			t.Fatalf("put qa epoch %d through a: dup %v, %v", e, dup, err)
		}
		since := time.Now() // the replay arrives at b after a acknowledged the epoch
		h, err := b.ss.EpochHeld(ctx, since, "qa", e, target)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Held {
			t.Fatalf("epoch %d, durable through server a before the replay arrived at b, is not held: %+v", e, h)
		}
		if h, err := b.ss.EpochHeld(ctx, since, "qa", e+100, target); err != nil || h.Held {
			t.Fatalf("epoch %d never written reads as held (%+v) or fails: %v", e+100, h, err)
		}
	}
	// And through the put path: a replay at b is a duplicate and writes nothing.
	if dup, err := b.put("qa", 3, 130, 2); err != nil || !dup {
		t.Fatalf("replay of qa epoch 3 through b: dup %v, %v; want a duplicate", dup, err)
	}
}

// TestEpochHeldReusesFinishedRefresh: a refresh of the other shards that started after the request
// arrived serves its replay check even when it has already ended (a prefetch that finished while
// the put read the base table): the check makes no store call and still sees the epoch the other
// server made durable before the request arrived.
func TestEpochHeldReusesFinishedRefresh(t *testing.T) {
	ctx := context.Background()
	a, b, bStore, target := twoServers(t, 5*time.Millisecond)
	for e := int64(1); e <= 3; e++ {
		if dup, err := a.put("qa", e, 100+e*10, 2); err != nil || dup {
			t.Fatalf("put qa epoch %d through a: dup %v, %v", e, dup, err)
		}
		since := time.Now() // the request arrives at b, which prefetches as it reads the base table
		b.ss.PrefetchPeers()
		if h, err := b.ss.EpochHeld(ctx, since, "qa", e, target); err != nil || !h.Held {
			t.Fatalf("epoch %d: held %+v, %v", e, h, err)
		}
		// The prefetch has ended now. Another check for the same request reads nothing more.
		calls := bStore.Stats().Calls
		for _, q := range []int64{e, e + 100} {
			h, err := b.ss.EpochHeld(ctx, since, "qa", q, target)
			if err != nil || h.Held != (q == e) {
				t.Fatalf("epoch %d checked again: held %+v, %v", q, h, err)
			}
		}
		after := bStore.Stats().Calls
		for op, n := range after {
			if n != calls[op] {
				t.Fatalf("epoch %d: the check after the refresh ended made %d %s calls; the refresh serves it", e, n-calls[op], op)
			}
		}
	}
}

// twoServers makes an unkeyed table of two shards on a local disk and two shard sets on it, a
// and b, each with one query's first epoch written (so each owns a shard); b's store calls each
// wait latency first. It returns b's store and the shard b routes query "qa" to.
func twoServers(t *testing.T, latency time.Duration) (a, b *ownerServer, bStore *faultstore.Store, target int) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Create(ctx, local, "events", rowsSchema,
		engine.CreateOptions{Config: map[string]string{ConfigShards: "2"}}, nil); err != nil {
		t.Fatal(err)
	}
	open := func(store objstore.Store) *ownerServer {
		tbl, err := engine.Open(ctx, store, "events", nil)
		if err != nil {
			t.Fatal(err)
		}
		ss := NewShardSet(tbl, ShardIDs(2), &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
		t.Cleanup(ss.Close)
		return &ownerServer{t: t, tbl: tbl, ss: ss}
	}
	bStore = faultstore.New(local, faultstore.FixedLatency(latency))
	a, b = open(local), open(bStore)
	for i, s := range []*ownerServer{a, b} {
		if dup, err := s.put(fmt.Sprintf("q%d", i), 0, int64(i)*1000, 2); err != nil || dup {
			t.Fatalf("first put of server %d: dup %v, %v", i, dup, err)
		}
	}
	target, ok := b.ss.routedShard("qa")
	if !ok {
		t.Fatal("server b owns no shard")
	}
	return a, b, bStore, target
}
