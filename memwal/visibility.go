package memwal

import (
	"context"
	"sync"

	"github.com/flight-sink/flight-sink/internal/epochid"
)

// epochGate orders the epochs a ShardSet puts against the set's reads and its row operations.
//
// An epoch of a keyed table is one put per shard, and each shard applies its part to its memtable
// when its own group commit is durable, so the parts land one after the other. A read captures
// the shards one after the other too. Without the gate a read could capture shard A after A
// applied its part of an epoch and shard B before B applied its part, and return half the epoch.
// The gate makes a read a consistent cut across the shards:
//
//   - An epoch registers before its first part is put (BeginEpoch) and ends after its last part
//     returned. A read takes its cut (capture) while no epoch is starting, and starts no epoch
//     while it captures: every epoch is either registered when the cut is taken or starts after
//     the capture ended.
//   - The capture hides every epoch registered at its cut from every shard (Shard.snapshot and
//     StoredShard.snapshot leave those puts out of the memtable rows). An epoch that ended before
//     the cut applied every part before it ended, so the capture sees all of it.
//   - A part of a hidden epoch that reached a flushed generation (a flush ran between its apply
//     and the epoch's end) cannot be left out of the generation: the capture fails with
//     errEpochInFlight, and the read waits for that epoch to end and captures again.
//
// The cut covers the epochs this set puts, which on a keyed table is every epoch this server
// writes; an epoch another server writes into the same shards is visible in each shard as that
// shard's part becomes durable.
//
// Row operations (delete) take the gate exclusively (quiesce): new epochs wait until they end,
// and the operation waits for the epochs in flight to end first, so each epoch is wholly before
// the operation or wholly after it.
type epochGate struct {
	mu sync.Mutex
	// changed is closed and replaced at every change of the counts below: waiters select on it.
	changed   chan struct{}
	inflight  map[epochid.ID]int // epochs being put (a replay racing its original counts twice)
	anonymous int                // puts without an epoch identity in flight
	captures  int                // reads taking their cut now: epochs wait to start
	starting  int                // epochs waiting for captures to end: new captures wait for them
	exclusive int                // row operations holding the set: epochs wait to start
}

func newEpochGate() *epochGate {
	return &epochGate{changed: make(chan struct{}), inflight: make(map[epochid.ID]int)}
}

// notifyLocked wakes every waiter. REQUIRES: g.mu.
func (g *epochGate) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// waitLocked releases g.mu until the next change or ctx's end, and takes it again.
// REQUIRES: g.mu.
func (g *epochGate) waitLocked(ctx context.Context) error {
	ch := g.changed
	g.mu.Unlock()
	defer g.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin registers an epoch (id; nil for a put without identity) before its first part is put. It
// waits while a row operation holds the set or a read takes its cut. Call end once every part
// has returned, whatever their outcome.
func (g *epochGate) begin(ctx context.Context, id *epochid.ID) (end func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting := false // counted in g.starting
	setWaiting := func(w bool) {
		if w == waiting {
			return
		}
		if waiting = w; w {
			g.starting++
		} else {
			g.starting--
			g.notifyLocked()
		}
	}
	for g.exclusive > 0 || g.captures > 0 {
		// Waiting for captures holds new ones back (they are short); waiting for a row operation
		// does not, so reads go on while a delete runs.
		setWaiting(g.exclusive == 0)
		if err := g.waitLocked(ctx); err != nil {
			setWaiting(false)
			return nil, err
		}
	}
	setWaiting(false)
	var k epochid.ID
	if id != nil {
		k = epochid.ID{QueryID: id.QueryID, EpochID: id.EpochID}
		g.inflight[k]++
	} else {
		g.anonymous++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if id == nil {
				g.anonymous--
			} else if g.inflight[k]--; g.inflight[k] == 0 {
				delete(g.inflight, k)
			}
			g.notifyLocked()
		})
	}, nil
}

// capture takes a read's cut: the epochs in flight now, which the read hides. No epoch starts
// until release is called; call it once the shards are captured.
func (g *epochGate) capture(ctx context.Context) (hide map[epochid.ID]struct{}, release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.starting > 0 {
		if err := g.waitLocked(ctx); err != nil {
			return nil, nil, err
		}
	}
	g.captures++
	hide = make(map[epochid.ID]struct{}, len(g.inflight))
	for k := range g.inflight {
		hide[k] = struct{}{}
	}
	var once sync.Once
	return hide, func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.captures--
			g.notifyLocked()
		})
	}, nil
}

// awaitEnd waits until epoch k is no longer in flight (or ctx ends).
func (g *epochGate) awaitEnd(ctx context.Context, k epochid.ID) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.inflight[k] > 0 {
		if err := g.waitLocked(ctx); err != nil {
			return err
		}
	}
	return nil
}

// quiesce holds the set for a row operation: epochs not started yet wait until release, and
// quiesce returns once every epoch in flight has ended.
func (g *epochGate) quiesce(ctx context.Context) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.exclusive++
	var once sync.Once
	release = func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.exclusive--
			g.notifyLocked()
		})
	}
	for len(g.inflight) > 0 || g.anonymous > 0 {
		if err := g.waitLocked(ctx); err != nil {
			g.mu.Unlock()
			release()
			g.mu.Lock()
			return nil, err
		}
	}
	return release, nil
}

// epochInFlightError: a part of an epoch a capture hides is in a flushed generation already; the
// read waits for the epoch to end (epochGate.awaitEnd) and captures again.
type epochInFlightError struct {
	shard string
	key   epochid.ID
}

func (e *epochInFlightError) Error() string {
	return "memwal shard " + e.shard + ": a part of an epoch in flight (query " + e.key.QueryID + ") was flushed before the epoch ended"
}
