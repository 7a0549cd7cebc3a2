// Package backoff spaces out the retries of writers that lost a race: two committers that both
// tried to create the next version of a table or shard manifest, or two conditional writes of one
// object key. Every such retry loop of engine, its object stores and memwal waits here, so they
// share one rule: full jitter (a uniformly random wait up to a window) over a window that doubles
// per attempt up to a cap, which spreads colliding writers out instead of having them collide
// again in lockstep.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a window that starts at Base and doubles per attempt up to Max.
type Policy struct {
	Base, Max time.Duration
}

// Race is the policy of a committer that lost the conditional create of a manifest version to
// another writer: the window starts at 1ms and doubles up to 100ms.
var Race = Policy{Base: time.Millisecond, Max: 100 * time.Millisecond}

// Window returns the window of attempt (0 for the first retry): min(Base << attempt, Max).
func (p Policy) Window(attempt int) time.Duration {
	w := p.Max
	if attempt < 62 && p.Base <= p.Max>>min(attempt, 62) {
		w = p.Base << attempt
	}
	return max(w, 1)
}

// Sleep waits a uniformly random duration in (0, Window(attempt)]. It returns ctx.Err() when ctx
// is done first, nil otherwise.
func (p Policy) Sleep(ctx context.Context, attempt int) error {
	return Wait(ctx, time.Duration(rand.Int64N(int64(p.Window(attempt))))+1)
}

// Wait waits d, or until ctx is done (then it returns ctx.Err()).
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
