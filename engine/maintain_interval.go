package engine

import (
	"context"
	"time"
)

// Steps with a least interval between runs (MaintenanceStep.MinInterval): the Iceberg publish
// runs at most once per interval per table, and the background runner's trailing run serves
// the commits that arrived while it was deferred. The lag of such a step behind the newest
// commit is therefore bounded by about one interval plus the step's own time.

// deferred reports whether step, due on version m, is to wait because it ran less than its
// MinInterval ago; then it lowers *trailing to when it falls due. A step that is not deferred is
// recorded as run now (a failed run counts too: a failing step is not retried faster).
// REQUIRES: the table's run lock.
func (mt *TableMaintainer) deferred(step MaintenanceStep, m *Manifest, trailing *time.Time) bool {
	if step.MinInterval == nil {
		return false
	}
	iv := step.MinInterval(m)
	if iv <= 0 {
		return false
	}
	st := mt.t.maintenance()
	now := mt.opts.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	last, ran := st.lastStepRun[step.Operation]
	if due := last.Add(iv); ran && now.Before(due) {
		if trailing.IsZero() || due.Before(*trailing) {
			*trailing = due
		}
		return true
	}
	st.lastStepRun[step.Operation] = now
	return false
}

// setTrailing records the deferral of the run that just ended: each run judges every step, so
// the newest run's view replaces the last one's. REQUIRES: the table's run lock.
func (mt *TableMaintainer) setTrailing(trailing time.Time) {
	st := mt.t.maintenance()
	st.mu.Lock()
	st.trailing = trailing
	st.mu.Unlock()
}

// scheduleTrailing starts the background runner for a trailing run when a run outside it (an
// inline one) deferred a step and no runner is active; an active runner picks the trailing time
// up after its current run. after is the user version the deferring run followed.
func (mt *TableMaintainer) scheduleTrailing(ctx context.Context, after uint64) {
	st := mt.t.maintenance()
	st.mu.Lock()
	due := !st.trailing.IsZero()
	st.mu.Unlock()
	if due {
		mt.startBackground(ctx, after, true)
	}
}

// waitTrailing waits until the deferred step falls due, or a commit arrives (st.pending), and
// takes the pending commit if one did: it returns the user version the next run follows (after,
// or the newer pending one). ok is false when the runner is to end instead: bg ended, or nothing
// is deferred or pending any more.
func (mt *TableMaintainer) waitTrailing(bg context.Context, after uint64) (next uint64, ok bool) {
	st := mt.t.maintenance()
	for {
		st.mu.Lock()
		due, pending := st.trailing, st.pending
		if pending {
			st.pending, after = false, max(after, st.pendingAfter)
		}
		st.mu.Unlock()
		if pending {
			return after, true
		}
		if due.IsZero() {
			return after, false
		}
		timer := time.NewTimer(due.Sub(mt.opts.now()))
		select {
		case <-timer.C:
			return after, true
		case <-st.wake: // a commit (or a stale signal from before the wait: look again)
			timer.Stop()
		case <-bg.Done():
			timer.Stop()
			return after, false
		}
	}
}
