package memwal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
	"golang.org/x/sync/errgroup"
)

// Peers: dedupe across servers. A query may hop servers, so before a put the set looks for its
// epoch in every shard, reading the shards other servers write from their durable state
// (peerState), which it tails without claiming them.

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
	shards []*peerShard // by shard index; set at creation, each with its own lock

	// mu guards the refreshes: running, cur, next and last.
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

	// mu guards what the last refresh read of the shard: manifest, headers and held.
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
