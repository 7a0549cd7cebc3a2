package memwal

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"golang.org/x/sync/errgroup"
)

// Routing of unkeyed puts: each put goes to a shard the set owns, claiming a free one when it owns
// none (owner_lease.go says how a set owns shards and keeps them).

// errReroute: the shard a put was routed to was claimed by another server; route it again.
var errReroute = errors.New("memwal: the routed shard was claimed by another server")

// healthyWriters returns the set's writers that work, by shard index.
func (ss *ShardSet) healthyWriters() map[int]*Shard {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make(map[int]*Shard)
	for i, w := range ss.writers {
		if w != nil && w.Err() == nil {
			out[i] = w
		}
	}
	return out
}

// routedShard returns the shard a put of queryID goes to among those the set owns and writes.
func (ss *ShardSet) routedShard(queryID string) (int, bool) {
	ws := ss.healthyWriters()
	o := ss.own
	o.mu.Lock()
	var owned []int
	for i := range o.routed {
		if ws[i] != nil {
			owned = append(owned, i)
		} else {
			delete(o.routed, i) // its writer failed or was fenced
		}
	}
	o.mu.Unlock()
	if len(owned) == 0 {
		return 0, false
	}
	sort.Ints(owned)
	h := fnv.New64a()
	h.Write([]byte(queryID))
	return owned[h.Sum64()%uint64(len(owned))], true
}

// unroute forgets shard i as one the set owns; it reports whether it was.
func (ss *ShardSet) unroute(i int) bool {
	o := ss.own
	o.mu.Lock()
	defer o.mu.Unlock()
	was := o.routed[i]
	delete(o.routed, i)
	return was
}

// Route returns the shard a put of queryID to a table without a primary key goes to: one this set
// owns, claiming a free one when it owns none, else (no shard is free) the shard of the hash
// routing, claimed with reason "fallback".
func (ss *ShardSet) Route(ctx context.Context, queryID string) (int, error) {
	if i, ok := ss.routedShard(queryID); ok {
		return i, nil
	}
	o := ss.own
	o.mu.Lock()
	o.unkeyed = true
	o.mu.Unlock()
	ss.startOwnerLoop()
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	if i, ok := ss.routedShard(queryID); ok {
		return i, nil // a concurrent put claimed one
	}
	if i, ok := ss.adoptWriter(); ok {
		return i, nil
	}
	o.mu.Lock()
	scan := o.lastScan.IsZero() || time.Since(o.lastScan) >= ss.opts.Shard.OwnerLeaseTTL/4
	o.mu.Unlock()
	if scan {
		free, err := ss.freeShards(ctx)
		if err != nil {
			return 0, err
		}
		for _, i := range free {
			_, err := ss.open(ctx, i, ClaimStart, ss.claimFree(i))
			if errors.Is(err, errShardTaken) {
				continue
			}
			if err != nil {
				return 0, err
			}
			o.mu.Lock()
			o.routed[i] = true
			o.mu.Unlock()
			return i, nil
		}
		o.mu.Lock()
		o.lastScan = time.Now()
		o.mu.Unlock()
		ss.opts.Shard.Logger.Warn("memwal: every shard of the table is owned by a live server; falling back to hash routing, which fences the owners (give the table at least as many shards as servers)",
			"table", ss.table.Name(), "shards", len(ss.ids))
	}
	i := ShardForPartition(queryID, 0, len(ss.ids))
	if _, err := ss.open(ctx, i, ClaimFallback, nil); err != nil {
		return 0, err
	}
	return i, nil
}

// adoptWriter makes a shard the set writes but does not route to (claimed by a flush or the
// fallback) the one it routes its puts to: the set claimed it, so it owns it.
func (ss *ShardSet) adoptWriter() (int, bool) {
	ws := ss.healthyWriters()
	o := ss.own
	o.mu.Lock()
	defer o.mu.Unlock()
	best := -1
	for i := range ws {
		if !o.pending[i] && !o.busy[i] && (best < 0 || i < best) {
			best = i // not a takeover in progress: that one is folded and released
		}
	}
	if best < 0 {
		return 0, false
	}
	o.routed[best] = true
	return best, true
}

// freeShards reads, in parallel, the manifests of the shards the set does not write and returns
// those free for it, in index order.
func (ss *ShardSet) freeShards(ctx context.Context) ([]int, error) {
	ws := ss.healthyWriters()
	free := make([]bool, len(ss.ids))
	g, gctx := errgroup.WithContext(ctx)
	for i := range ss.ids {
		if ws[i] != nil {
			continue
		}
		g.Go(func() error {
			m, err := ss.readManifest(gctx, i)
			if err != nil {
				return fmt.Errorf("memwal shard %s of table %s: %w", ss.ids[i], ss.table.Name(), err)
			}
			free[i] = ss.observe(i, m)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []int
	for i, f := range free {
		if f {
			out = append(out, i)
		}
	}
	return out, nil
}

// PutUnkeyed puts the batches of epoch id, for a table without a primary key, into the shard
// Route chooses. decide, called before each attempt with where the shards hold the epoch
// (EpochHeld, as of no earlier than since: when the epoch's request arrived), says whether it is
// a replay (nothing is put, PutUnkeyed reports true) or fails the put; held is ShardSet.Put's
// per-writer rule. A put whose routed shard was claimed by another server is routed again, after
// a new look at every shard: the other server may have put the epoch there.
func (ss *ShardSet) PutUnkeyed(ctx context.Context, since time.Time, m *engine.Manifest, id *epochid.ID, batches []arrow.RecordBatch,
	decide func(EpochHolding) (bool, error), held func(*Shard) (bool, error)) (bool, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			since = time.Now() // rerouted: look again, after the claim that fenced us
		}
		i, err := ss.Route(ctx, id.QueryID)
		if err != nil {
			return false, err
		}
		h, err := ss.EpochHeld(ctx, since, id.QueryID, id.EpochID, i)
		if err != nil {
			return false, err
		}
		if done, err := decide(h); err != nil || done {
			return done, err
		}
		done, err := ss.Put(ctx, i, m, id, batches, held)
		if errors.Is(err, errReroute) && attempt < 2 {
			continue
		}
		return done, err
	}
}
