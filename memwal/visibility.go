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
//   - The capture hides the puts of every registration in flight at its cut: Shard.snapshot leaves
//     the memtable puts those requests made out (each put carries its request's registration, a
//     token in the request's context, BeginEpoch). An epoch that ended before the cut applied
//     every part before it ended, so the capture sees all of it.
//   - Only the puts the requests in flight made are hidden, never an earlier copy of their epoch:
//     a replay of an acknowledged epoch (which finds it held and puts nothing) is in flight too,
//     and the acknowledged rows stay visible throughout.
//   - A part of an epoch in flight that reached a flushed generation (a flush ran between its
//     apply and the epoch's end, or it is an earlier copy a replay finds there) cannot be left
//     out of the generation: the capture fails with errEpochInFlight, and the read waits for that
//     epoch to end and captures again.
//
// The cut covers the epochs this set puts, which on a keyed table is every epoch this server
// writes; an epoch another server writes into the same shards (read through StoredShard) is
// visible in each shard as that shard's part becomes durable.
//
// Row operations (delete) take the gate exclusively (quiesce): new epochs wait until they end,
// and the operation waits for the epochs in flight to end first, so each epoch is wholly before
// the operation or wholly after it.
type epochGate struct {
	mu sync.Mutex
	// changed is closed and replaced at every change of the counts below: waiters select on it.
	changed   chan struct{}
	inflight  map[epochid.ID]int // epochs being put (a replay racing its original counts twice)
	tokens    map[uint64]bool    // the registrations in flight (begin's tokens)
	lastToken uint64             // the newest token handed out
	anonymous int                // puts without an epoch identity in flight
	captures  int                // reads taking their cut now: epochs wait to start
	starting  int                // epochs waiting for captures to end: new captures wait for them
	exclusive int                // row operations holding the set: epochs wait to start
}

func newEpochGate() *epochGate {
	return &epochGate{changed: make(chan struct{}), inflight: make(map[epochid.ID]int), tokens: make(map[uint64]bool)}
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

// begin registers an epoch (id; nil for a put without identity) before its first part is put,
// and returns the registration's token, which the parts' puts carry (withPutToken). It waits while
// a row operation holds the set or a read takes its cut. Call end once every part has returned,
// whatever their outcome.
func (g *epochGate) begin(ctx context.Context, id *epochid.ID) (token uint64, end func(), err error) {
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
			return 0, nil, err
		}
	}
	setWaiting(false)
	g.lastToken++
	token = g.lastToken
	g.tokens[token] = true
	var k epochid.ID
	if id != nil {
		k = epochid.ID{QueryID: id.QueryID, EpochID: id.EpochID}
		g.inflight[k]++
	} else {
		g.anonymous++
	}
	var once sync.Once
	return token, func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			delete(g.tokens, token)
			if id == nil {
				g.anonymous--
			} else if g.inflight[k]--; g.inflight[k] == 0 {
				delete(g.inflight, k)
			}
			g.notifyLocked()
		})
	}, nil
}

// readCut is a read's cut (epochGate.capture): the registrations in flight, whose puts the read
// leaves out, and their epochs.
type readCut struct {
	epochs map[epochid.ID]struct{}
	tokens map[uint64]bool
}

// hides reports whether the cut leaves out a put made under registration token (0: a put of no
// registration, such as a replayed WAL entry).
func (c readCut) hides(token uint64) bool { return token != 0 && c.tokens[token] }

// capture takes a read's cut: the registrations in flight now, whose puts the read hides. No
// epoch starts until release is called; call it once the shards are captured.
func (g *epochGate) capture(ctx context.Context) (cut readCut, release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.starting > 0 {
		if err := g.waitLocked(ctx); err != nil {
			return readCut{}, nil, err
		}
	}
	g.captures++
	cut = readCut{epochs: make(map[epochid.ID]struct{}, len(g.inflight)), tokens: make(map[uint64]bool, len(g.tokens))}
	for k := range g.inflight {
		cut.epochs[k] = struct{}{}
	}
	for t := range g.tokens {
		cut.tokens[t] = true
	}
	var once sync.Once
	return cut, func() {
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

// putTokenKey is the context key of a request's registration token (epochGate.begin).
type putTokenKey struct{}

// withPutToken returns ctx carrying registration token: the puts made with it are hidden from the
// reads whose cut finds the registration in flight.
func withPutToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, putTokenKey{}, token)
}

// putToken returns the registration token ctx carries (0: none).
func putToken(ctx context.Context) uint64 {
	t, _ := ctx.Value(putTokenKey{}).(uint64)
	return t
}
