package memwal

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Server-owned shards (tables without a primary key).
//
// A ShardSet is one table's shards as one server process serves them, and it has an instance id
// of its own (a fresh UUID per set: one per table per process start). A put of any query goes to
// a shard the set owns (Route): the first put claims one that no live set owns, conditionally
// (the claim's put-if-absent of the next manifest version checks the version it follows: of two
// sets racing for a shard exactly one wins) and records the instance id as ShardManifest.Owner.
// The set keeps the shard; every put of every query of this server shares its group commit.
//
// Liveness is a lease kept by manifest commits. Every commit of the owner advances the manifest's
// Heartbeat (ManifestStore.CommitUpdate); when the owner has committed nothing for a third of
// Options.OwnerLeaseTTL it commits a renewal. An observer never compares clocks of two machines:
// it notes, on its own clock, when it first saw a shard's (Owner, WriterEpoch, Heartbeat), and a
// shard whose triple has not changed for the whole TTL has a dead owner. Such a shard is taken
// over (takeOver): claimed on that same condition, replayed, flushed and folded into the base
// table, then released (Owner cleared) so the next server to start claims it as free; a set that
// owns no shard keeps it as its own instead.
//
// A shard is free for a set when it has no manifest, no owner, this set as its owner, or an owner
// whose lease this set saw expire. When no shard is free (more servers than shards, or a server
// restarted before its predecessor's lease ran out), the set falls back to the hash routing of
// ShardForPartition and claims the shard it names, fencing its owner: the behaviour before
// ownership, logged as a warning and counted as claims with reason "fallback"; the set then owns
// that shard. A set whose owned shard another server claimed routes its put again rather than
// claim it back. A table should have at least as many shards as servers writing it.
//
// Dedupe across servers. A query may hop servers, so an epoch it sent through another server may
// be in any shard. Before a put, EpochHeld looks for the epoch in every shard: a shard this set
// writes answers from its writer's memory (after an ownership probe, for a shard other than the
// put's, when the answer is no), any other from its durable state, its manifest's
// per-query watermark and the identities of its WAL entries not yet flushed (peerState). Those
// reads never claim. One refresh of the other shards covers every put that arrived before it
// started, the shards are read in parallel, and entry headers are cached by position (an object
// store's entries are immutable), so a refresh costs a listing, the new entries and one manifest
// probe per shard.

// DefaultOwnerLeaseTTL is Options.OwnerLeaseTTL unless set.
const DefaultOwnerLeaseTTL = 15 * time.Second

// Reasons of a shard claim (the reason attribute of flight_sink.memwal.shard.claims).
const (
	ClaimStart    = "start"    // a free shard for this set's puts, or a first claim of a keyed table's shard
	ClaimTakeover = "takeover" // a shard whose owner's lease expired
	ClaimFenced   = "fenced"   // reopened after another server claimed the shard (keyed tables)
	ClaimFallback = "fallback" // no shard was free: hash routing
	ClaimFlush    = "flush"    // flush_memwal of a free shard
	ClaimFoldAll  = "fold_all" // a complete epoch flushes and folds every shard first
)

// errShardTaken: a conditional claim found the shard owned by a live set.
var errShardTaken = errors.New("memwal: shard is owned by a live shard set")

// errReroute: the shard a put was routed to was claimed by another server; route it again.
var errReroute = errors.New("memwal: the routed shard was claimed by another server")

// ownership is a ShardSet's part in shard ownership. mu is apart from ShardSet.mu and never held
// while a store is called.
type ownership struct {
	instance string
	stores   []*ManifestStore // by shard index: the observer's reads of each manifest
	peers    peerState
	claimMu  sync.Mutex // one claim of a free shard by Route at a time

	mu       sync.Mutex
	routed   map[int]bool // shards this set owns for its unkeyed puts
	unkeyed  bool         // the set routes unkeyed puts (the lease observer takes shards over)
	leases   []leaseSeen
	lastScan time.Time // when Route last found no free shard
	claims   map[string]int64
	busy     map[int]bool // a takeover of the shard is running
	pending  map[int]bool // taken over, fold not finished
	fenced   map[int]bool // the set's writer was fenced or failed: its next claim is "fenced"
	started  bool
	stopped  bool // the keeper never starts (again)
	stop     chan struct{}
	loop     sync.WaitGroup
}

// leaseSeen is what the observer last saw of a shard's owner, and when it first saw it.
type leaseSeen struct {
	owner     string
	epoch     uint64
	heartbeat uint64
	since     time.Time
}

func newOwnership(ss *ShardSet) *ownership {
	o := &ownership{instance: uuid.NewString(), routed: map[int]bool{}, claims: map[string]int64{}, busy: map[int]bool{}, pending: map[int]bool{}, fenced: map[int]bool{}, leases: make([]leaseSeen, len(ss.ids)),
		stores: make([]*ManifestStore, len(ss.ids)), stop: make(chan struct{})}
	for i, id := range ss.ids {
		o.stores[i] = NewManifestStore(ss.table.Store(), ss.table.Name(), id, &ss.opts.Shard)
	}
	o.peers.shards = make([]*peerShard, len(ss.ids))
	for i, id := range ss.ids {
		paths := newShardPaths(ss.table.Name(), id)
		o.peers.shards[i] = &peerShard{ms: NewManifestStore(ss.table.Store(), ss.table.Name(), id, &ss.opts.Shard),
			wal: wal.NewLog(wal.Config{Store: ss.table.Store(), Shard: id, Prefix: paths.walPrefix()}), headers: map[uint64][]epochid.ID{}}
	}
	return o
}

// Instance returns the set's instance id, the owner it records in the manifests of the shards it
// claims.
func (ss *ShardSet) Instance() string { return ss.own.instance }

// Claims returns how many shards the set has claimed, by reason (what it added to the
// flight_sink.memwal.shard.claims counter).
func (ss *ShardSet) Claims() map[string]int64 {
	o := ss.own
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.claims)
}

// countClaim counts a claim of the set, in Claims and the process's metric.
func (ss *ShardSet) countClaim(ctx context.Context, reason string) {
	o := ss.own
	o.mu.Lock()
	o.claims[reason]++
	o.mu.Unlock()
	recordClaim(ctx, reason)
}

// noteFenced records that the set's writer of shard i was fenced or failed.
func (o *ownership) noteFenced(i int) {
	o.mu.Lock()
	o.fenced[i] = true
	o.mu.Unlock()
}

// takeFenced reports, once, whether the set's writer of shard i was fenced or failed.
func (o *ownership) takeFenced(i int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	was := o.fenced[i]
	delete(o.fenced, i)
	return was
}

// observe records what the observer sees of shard i's manifest m (nil: the shard has none) and
// reports whether the shard is free for this set.
func (ss *ShardSet) observe(i int, m *ShardManifest) bool {
	o := ss.own
	if m == nil || m.Owner == "" || m.Owner == o.instance {
		return true
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	l := &o.leases[i]
	if l.owner != m.Owner || l.epoch != m.WriterEpoch || l.heartbeat != m.Heartbeat || l.since.IsZero() {
		*l = leaseSeen{owner: m.Owner, epoch: m.WriterEpoch, heartbeat: m.Heartbeat, since: now}
		return false
	}
	return now.Sub(l.since) >= ss.opts.Shard.OwnerLeaseTTL
}

// claimFree is the condition of a claim of a free shard i.
func (ss *ShardSet) claimFree(i int) func(*ShardManifest) error {
	return func(cur *ShardManifest) error {
		if ss.observe(i, cur) {
			return nil
		}
		return fmt.Errorf("memwal shard %s is owned by %s: %w", ss.ids[i], cur.Owner, errShardTaken)
	}
}

// readManifest returns shard i's newest manifest as the observer reads it, nil when it has none.
func (ss *ShardSet) readManifest(ctx context.Context, i int) (*ShardManifest, error) {
	m, err := ss.own.stores[i].ReadLatest(ctx)
	if errors.Is(err, ErrNoManifest) {
		return nil, nil
	}
	return m, err
}

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

// startOwnerLoop starts, once, the set's lease keeper: it renews the leases of the set's writers
// and, for a set routing unkeyed puts, takes over the shards whose owner's lease expired.
func (ss *ShardSet) startOwnerLoop() {
	o := ss.own
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started || o.stopped {
		return
	}
	ss.hookMu.Lock()
	closed := ss.closed
	ss.hookMu.Unlock()
	if closed {
		return
	}
	o.started = true
	o.loop.Add(1)
	go func() {
		defer o.loop.Done()
		tick := max(ss.opts.Shard.OwnerLeaseTTL/4, time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-o.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(ss.opts.Maintainer.BackgroundContext, ss.opts.Shard.OwnerLeaseTTL)
			_ = panics.Recover(ss.opts.Shard.Logger, "memwal lease keeper", func() error {
				ss.renewLeases(ctx)
				o.mu.Lock()
				unkeyed := o.unkeyed
				o.mu.Unlock()
				if unkeyed {
					ss.takeOverExpired(ctx)
				}
				return nil
			})
			cancel()
		}
	}()
}

// stopOwnerLoop stops the lease keeper and waits for it.
func (ss *ShardSet) stopOwnerLoop() {
	o := ss.own
	o.mu.Lock()
	if !o.stopped {
		o.stopped = true
		close(o.stop)
	}
	o.mu.Unlock()
	o.loop.Wait()
}

// renewLeases commits a renewal for every writer of the set that has committed nothing for a
// third of the lease TTL. A writer found fenced stops.
func (ss *ShardSet) renewLeases(ctx context.Context) {
	for i, w := range ss.healthyWriters() {
		if w.ms.sinceOwnerCommit() < ss.opts.Shard.OwnerLeaseTTL/3 {
			continue
		}
		_, err := w.ms.CommitUpdate(ctx, w.epoch, func(*ShardManifest) error { return nil })
		if errors.Is(err, ErrFenced) || errors.Is(err, engine.ErrTableNotFound) { // taken over, or dropped
			_ = w.fail(err)
			ss.unroute(i)
		} else if err != nil {
			ss.opts.Shard.Logger.Warn("memwal: lease renewal failed; will retry", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
		}
	}
}

// takeOverExpired starts a takeover of every shard the set does not write whose owner's lease it
// saw expire, and resumes those taken over whose fold has not finished. Each runs on a goroutine
// of its own, so that a slow fold does not hold up the renewal of the set's own leases.
func (ss *ShardSet) takeOverExpired(ctx context.Context) {
	o := ss.own
	ws := ss.healthyWriters()
	for i := range ss.ids {
		o.mu.Lock()
		busy, pending := o.busy[i], o.pending[i]
		o.mu.Unlock()
		if busy {
			continue
		}
		var deadOwner string
		if !pending {
			if ws[i] != nil {
				continue
			}
			m, err := ss.readManifest(ctx, i)
			if err != nil {
				ss.opts.Shard.Logger.Warn("memwal: lease observer could not read a shard manifest", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
				continue
			}
			if m == nil || m.Owner == "" || m.Owner == o.instance || !ss.observe(i, m) {
				continue
			}
			deadOwner = m.Owner
		}
		o.mu.Lock()
		if !o.stopped {
			o.busy[i] = true
			o.loop.Add(1)
			go func() {
				defer o.loop.Done()
				// Stopped with the keeper (Close): a takeover left half done resumes in whoever
				// claims the shard next, which replays it.
				tctx, cancel := context.WithCancel(ss.opts.Maintainer.BackgroundContext)
				defer cancel()
				go func() {
					select {
					case <-o.stop:
						cancel()
					case <-tctx.Done():
					}
				}()
				err := panics.Recover(ss.opts.Shard.Logger, "memwal takeover", func() error { return ss.takeOver(tctx, i, deadOwner) })
				if err != nil {
					ss.opts.Shard.Logger.Warn("memwal: takeover of a shard failed; will retry", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
				}
				o.mu.Lock()
				delete(o.busy, i)
				o.mu.Unlock()
			}()
		}
		o.mu.Unlock()
	}
}

// takeOver claims shard i from its dead owner (on the condition that the lease is still the
// expired one: of racing observers exactly one wins), replays its WAL (OpenShard), flushes it and
// folds it into the base table, so every put the dead owner acknowledged is in the table. Then it
// releases the shard, unless the set owns no shard for its puts: then it keeps it as its own.
// deadOwner empty resumes a takeover whose claim succeeded and whose fold did not.
func (ss *ShardSet) takeOver(ctx context.Context, i int, deadOwner string) error {
	o := ss.own
	var w *Shard
	if deadOwner != "" {
		var err error
		w, err = ss.open(ctx, i, ClaimTakeover, ss.claimFree(i))
		if errors.Is(err, errShardTaken) {
			return nil // the owner came back, or another observer won
		}
		if err != nil {
			return err
		}
		o.mu.Lock()
		o.pending[i] = true
		o.mu.Unlock()
		ss.opts.Shard.Logger.Info("memwal: took over a shard whose owner stopped renewing its lease", "table", ss.table.Name(), "shard", ss.ids[i],
			"dead_owner", deadOwner, "owner", o.instance, "lease_ttl", ss.opts.Shard.OwnerLeaseTTL)
	} else if w = ss.healthyWriters()[i]; w == nil {
		o.mu.Lock()
		delete(o.pending, i) // the writer failed or was fenced: its next owner replays the shard
		o.mu.Unlock()
		return nil
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("flush after takeover: %w", err)
	}
	if _, err := ss.FoldShard(ctx, i, 1); err != nil {
		return fmt.Errorf("fold after takeover: %w", err)
	}
	o.mu.Lock()
	delete(o.pending, i)
	o.mu.Unlock()
	if _, owned := ss.routedShard(""); !owned {
		o.mu.Lock()
		o.routed[i] = true
		o.mu.Unlock()
	}
	ss.releaseUnrouted(ctx, i, w)
	return nil
}

// releaseUnrouted releases writer w of shard i, which a flush, a fold_all or a takeover claimed,
// unless the set routes its puts there or the table is keyed (its puts go to every shard).
func (ss *ShardSet) releaseUnrouted(ctx context.Context, i int, w *Shard) {
	o := ss.own
	o.mu.Lock()
	routed := o.routed[i]
	o.mu.Unlock()
	if routed {
		return
	}
	if m, err := ss.table.Latest(ctx); err != nil || len(m.PrimaryKey) > 0 {
		return // a keyed table's puts go to every shard; keep it (or keep its lease, to expire)
	}
	ss.release(ctx, i, w)
}

// release clears the set as shard i's owner (a manifest commit of writer w) and closes w. Best
// effort: a release that fails leaves a lease that expires.
func (ss *ShardSet) release(ctx context.Context, i int, w *Shard) {
	ss.unroute(i)
	_, err := w.ms.CommitUpdate(ctx, w.epoch, func(m *ShardManifest) error {
		if m.Owner != ss.own.instance {
			return errNoUpdate
		}
		m.Owner = ""
		return nil
	})
	if err != nil && !errors.Is(err, ErrFenced) {
		ss.opts.Shard.Logger.Warn("memwal: could not release a shard; its lease will expire", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
	}
	ss.dropWriter(i, w)
}

// EpochHolding says where a table's shards hold a streaming epoch (EpochHeld).
type EpochHolding struct {
	// Held: a shard holds the epoch exactly (a WAL entry not yet flushed, or its query's flushed
	// watermark is that epoch); Shard and Location say where.
	Held     bool
	Shard    string
	Location EpochLocation
	// Above: no shard holds the epoch exactly and shard AboveShard has flushed epochs of the query
	// up to AboveEpoch, past it.
	Above      bool
	AboveShard string
	AboveEpoch int64
}

// EpochHeld looks for epoch epochID of query queryID in every shard, claiming none: shard target
// (the one the put goes to) from its writer's memory, where the set writes it (a writer fenced
// meanwhile finds out when it writes, and the put is routed again and looks again); another shard
// the set writes from its writer's memory when it holds the epoch, else after one probe that the
// writer still owns it (memwal.EpochCommitted); any other shard from its durable state as a
// refresh started no earlier than since read it (peerState; zero since: this call). since is
// when the epoch's request arrived, so any epoch durable before then is seen, and a refresh that
// PrefetchPeers started after the request arrived, while its caller read the base table, serves.
func (ss *ShardSet) EpochHeld(ctx context.Context, since time.Time, queryID string, epochID int64, target int) (EpochHolding, error) {
	if since.IsZero() {
		since = time.Now()
	}
	var h EpochHolding
	note := func(shard string, ok bool, loc EpochLocation) bool {
		switch {
		case !ok:
		case !loc.FromWatermark || loc.Exact:
			h = EpochHolding{Held: true, Shard: shard, Location: loc}
			return true
		case loc.WatermarkEpoch > epochID && (!h.Above || loc.WatermarkEpoch > h.AboveEpoch):
			h.Above, h.AboveShard, h.AboveEpoch = true, shard, loc.WatermarkEpoch
		}
		return false
	}
	ws := ss.healthyWriters()
	var others []int
	for i, id := range ss.ids {
		if w := ws[i]; w != nil {
			ok, loc := w.EpochCommitted(queryID, epochID)
			if !ok && i != target {
				var err error
				if ok, loc, err = EpochCommitted(ctx, w, queryID, epochID); err != nil {
					return EpochHolding{}, fmt.Errorf("memwal shard %s of table %s: %w", id, ss.table.Name(), err)
				}
			}
			if note(id, ok, loc) {
				return h, nil
			}
		} else {
			others = append(others, i)
		}
	}
	if len(others) == 0 {
		return h, nil
	}
	if err := ss.own.peers.refresh(ctx, ss, others, since); err != nil {
		return EpochHolding{}, err
	}
	for _, i := range others {
		if ok, loc := ss.own.peers.shards[i].holds(queryID, epochID); note(ss.ids[i], ok, loc) {
			return h, nil
		}
	}
	return h, nil
}

// peerState is the cached durable state of the shards a set does not write, for EpochHeld.
// Refreshes run one at a time; a caller joins the running refresh when it started no earlier
// than the caller's since and reads the shards it wants, else the next refresh that has not
// started yet (or starts it), so one refresh serves every put that arrived before it began.
type peerState struct {
	shards []*peerShard

	mu      sync.Mutex
	running bool
	cur     *peerRun // the running refresh, when running
	next    *peerRun
	last    *peerRun // the newest refresh that ended
}

// peerRun is one refresh of the peer shards.
type peerRun struct {
	done    chan struct{}
	want    map[int]bool
	started time.Time // before its first store call
	err     error
	reread  map[int]bool // shards it read
}

// refresh returns once a refresh that started no earlier than since has read every shard of
// want.
func (p *peerState) refresh(ctx context.Context, ss *ShardSet, want []int, since time.Time) error {
	for {
		p.mu.Lock()
		var r *peerRun
		if l := p.last; l != nil && l.err == nil && !l.started.Before(since) && covers(l.want, want) {
			// Ended, and started after the request arrived (a prefetch, or another put's
			// refresh): what it read is fresh enough, and no newer refresh has replaced it since.
			p.mu.Unlock()
			return nil
		}
		if c := p.cur; p.running && !c.started.Before(since) && covers(c.want, want) {
			r = c // started after the request arrived: what it reads is fresh enough
		} else {
			r = p.joinNextLocked(ss, want)
		}
		p.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		missing := false
		for _, i := range want {
			missing = missing || !r.reread[i]
		}
		if !missing {
			return nil
		}
	}
}

// prefetch makes sure a refresh of want starts now or as soon as the running one ends, without
// waiting for it: a put that arrived before it started joins it (refresh).
func (p *peerState) prefetch(ss *ShardSet, want []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.joinNextLocked(ss, want)
}

// joinNextLocked adds want to the next refresh that has not started, making it (and starting it
// when none runs) if needed, and returns it. REQUIRES: p.mu held.
func (p *peerState) joinNextLocked(ss *ShardSet, want []int) *peerRun {
	r := p.next
	if r == nil {
		r = &peerRun{done: make(chan struct{}), want: map[int]bool{}}
		p.next = r
	}
	for _, i := range want {
		r.want[i] = true
	}
	if !p.running {
		p.startLocked(ss)
	}
	return r
}

// covers reports whether every shard of want is in have.
func covers(have map[int]bool, want []int) bool {
	for _, i := range want {
		if !have[i] {
			return false
		}
	}
	return true
}

// startLocked starts the pending run. REQUIRES: p.mu held, no run running.
func (p *peerState) startLocked(ss *ShardSet) {
	r := p.next
	r.started = time.Now() // before any store call of the run: refresh compares it with since
	p.next, p.cur, p.running = nil, r, true
	go func() {
		ctx, cancel := context.WithTimeout(ss.opts.Maintainer.BackgroundContext, time.Minute)
		defer cancel()
		r.reread = map[int]bool{}
		g, gctx := errgroup.WithContext(ctx)
		for i := range r.want {
			r.reread[i] = true
			g.Go(func() error {
				if err := p.shards[i].tail(gctx); err != nil {
					return fmt.Errorf("memwal: dedupe read of shard %s of table %s: %w", ss.ids[i], ss.table.Name(), err)
				}
				return nil
			})
		}
		r.err = g.Wait()
		p.mu.Lock()
		p.running, p.cur, p.last = false, nil, r
		if p.next != nil {
			p.startLocked(ss)
		}
		p.mu.Unlock()
		close(r.done)
	}()
}

// peerShard is the cached durable state of one shard: its manifest and the epoch identities of
// its WAL entries after the manifest's replay_after.
type peerShard struct {
	ms  *ManifestStore
	wal *wal.Log

	mu       sync.Mutex
	manifest *ShardManifest          // nil: the shard has none
	headers  map[uint64][]epochid.ID // identities of the entries after replay_after, by position
	held     map[epochid.ID]uint64   // the same, by identity
}

// tail reads what changed in the shard since the last refresh: the WAL listing, then, at once,
// the entries not read before (an object store's entries are immutable by position; entries read
// from a local disk's segments, where a fenced writer's stale record may share a position, are
// decoded again from the listing, which costs no store call) and the newest manifest. The order
// that matters is listing before manifest: a flush commits its manifest before it deletes the
// entries it covers, so an entry gone when listed is below the replay_after, and under the
// watermarks, of a manifest read after the listing. An entry listed but gone when read was
// deleted after its covering manifest was committed, which the manifest read beside it may have
// missed: then the manifest is read once more, after. (Reading the manifest beside the entries,
// not after them, saves a store round trip per refresh on object storage.)
func (ps *peerShard) tail(ctx context.Context) error {
	ps.mu.Lock()
	after := uint64(0)
	if ps.manifest != nil {
		after = ps.manifest.ReplayAfterWALEntryPosition
	}
	cached := make(map[uint64][]epochid.ID, len(ps.headers))
	for pos, ids := range ps.headers {
		cached[pos] = ids
	}
	ps.mu.Unlock()
	positions, err := ps.wal.List(ctx, after)
	if err != nil {
		return err
	}
	defer ps.wal.Forget()
	headers := make(map[uint64][]epochid.ID, len(positions))
	var mu sync.Mutex
	var gone atomic.Bool // an entry listed was deleted before it was read
	var m *ShardManifest
	readManifest := func(ctx context.Context) error {
		var err error
		m, err = ps.ms.ReadLatest(ctx)
		if errors.Is(err, ErrNoManifest) {
			m, err = nil, nil
		}
		return err
	}
	mg, mctx := errgroup.WithContext(ctx)
	mg.Go(func() error { return readManifest(mctx) }) // after the listing: see above
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, pos := range positions {
		segment := ps.wal.Listed(pos)
		if ids, ok := cached[pos]; ok && !segment {
			headers[pos] = ids
			continue
		}
		g.Go(func() error {
			e, err := ps.wal.ReadHeader(gctx, pos)
			if errors.Is(err, objstore.ErrNotFound) {
				gone.Store(true) // flushed meanwhile: a manifest read after this covers it
				return nil
			}
			if err != nil {
				return err
			}
			var ids []epochid.ID
			for _, p := range e.Puts {
				if p.Epoch != nil {
					ids = append(ids, epochid.ID{QueryID: p.Epoch.QueryID, EpochID: p.Epoch.EpochID})
				}
			}
			mu.Lock()
			headers[pos] = ids
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	if merr := mg.Wait(); err == nil {
		err = merr
	}
	if err != nil {
		return err
	}
	if gone.Load() {
		if err := readManifest(ctx); err != nil {
			return err
		}
	}
	held := make(map[epochid.ID]uint64)
	for pos, ids := range headers {
		if m != nil && pos <= m.ReplayAfterWALEntryPosition {
			delete(headers, pos)
			continue
		}
		for _, k := range ids {
			if p, ok := held[k]; !ok || pos < p {
				held[k] = pos
			}
		}
	}
	ps.mu.Lock()
	ps.manifest, ps.headers, ps.held = m, headers, held
	ps.mu.Unlock()
	return nil
}

// holds answers Shard.EpochCommitted from the shard's cached durable state.
func (ps *peerShard) holds(queryID string, epochID int64) (bool, EpochLocation) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pos, ok := ps.held[epochid.ID{QueryID: queryID, EpochID: epochID}]; ok {
		return true, EpochLocation{Position: pos}
	}
	if ps.manifest != nil {
		if wm, ok := ps.manifest.queryWatermark(queryID); ok {
			loc, held := wm.location(epochID)
			return held, loc
		}
	}
	return false, EpochLocation{}
}

// PrefetchPeers starts, without waiting, a refresh of the durable state of the shards this set
// does not write, when the set routes unkeyed puts: a caller that will put an epoch calls it as
// the request arrives, before its own reads (the base table's latest version), so the replay
// check of EpochHeld (with since no later than this call) finds the refresh under way or done
// instead of starting it. On an object store that takes the refresh's round trips off the put's
// path. Nothing is claimed.
func (ss *ShardSet) PrefetchPeers() {
	o := ss.own
	o.mu.Lock()
	unkeyed := o.unkeyed
	o.mu.Unlock()
	if !unkeyed {
		return
	}
	ws := ss.healthyWriters()
	var others []int
	for i := range ss.ids {
		if ws[i] == nil {
			others = append(others, i)
		}
	}
	if len(others) > 0 {
		o.peers.prefetch(ss, others)
	}
}
