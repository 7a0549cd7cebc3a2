package memwal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/memwal/wal"
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

// ownership is a ShardSet's part in shard ownership.
type ownership struct {
	// Set by newOwnership and read-only after.
	instance string
	stores   []*ManifestStore // by shard index: the observer's reads of each manifest
	peers    peerState        // its own locks
	claimMu  sync.Mutex       // one claim of a free shard by Route at a time

	// mu guards every field from routed to stopped (stop is closed under it, once). It is apart
	// from ShardSet.mu and never held while a store is called.
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
	loop     sync.WaitGroup // the lease keeper goroutine
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
