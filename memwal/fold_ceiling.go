package memwal

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

// The fold ceiling: a put to a shard whose backlog is at Options.MaxUnfoldedGenerations stalls
// before it is written until a fold brings the backlog below (ShardSet's doc comment).

// Put stall outcomes (the "outcome" attribute of flight_sink.memwal.put.stalls).
const (
	putStallFolded   = "folded"      // this put ran the fold that made room
	putStallWaited   = "waited"      // another fold, or the flusher, made room
	putStallNoChange = "no_progress" // nothing changed after several rounds; the put went ahead
	putStallFailed   = "failed"      // ctx ended or the fold failed; nothing written
)

// putStallRounds bounds the rounds of one stall that change nothing before the put goes ahead
// anyway: a fold folds every flushed generation, so one round normally suffices.
const putStallRounds = 3

// holdCeiling returns at once when shard i's backlog, as writer w and base version m see it, is
// below the fold ceiling, and otherwise stalls until a fold has brought it below.
func (ss *ShardSet) holdCeiling(ctx context.Context, m *engine.Manifest, i int, w *Shard) error {
	limit, shard, log := ss.opts.Shard.MaxUnfoldedGenerations, ss.ids[i], ss.opts.Shard.Logger
	backlog := func(m *engine.Manifest) (unfolded, sealed int) {
		// Generations are numbered densely from 1 by this writer; the fold watermark is the last
		// one the base table holds.
		st := w.Stats()
		if last, merged := st.NextGeneration-1, m.MemWALMerged[shard]; st.NextGeneration > 0 && last > merged {
			unfolded = int(last - merged)
		}
		return unfolded, st.SealedMemtables
	}
	unfolded, sealed := backlog(m)
	if unfolded+sealed < limit {
		return nil
	}
	start, before, outcome := time.Now(), unfolded+sealed, putStallWaited
	end := func(after int, err error) {
		waited := time.Since(start)
		recordPutStall(ctx, outcome, waited)
		logf := log.Warn
		args := []any{"table", ss.table.Name(), "shard", shard, "generations", before, "ceiling", limit,
			"waited", waited.Round(time.Millisecond), "outcome", outcome, "generations_after", after}
		if err != nil {
			logf = log.Error
			args = append(args, "err", err)
		}
		logf("memwal put stalled at the fold ceiling (max unfolded generations) until a fold made room", args...)
	}
	fail := func(err error) error {
		outcome = putStallFailed
		end(-1, err)
		return fmt.Errorf("memwal shard %s: put stalled with %d generations waiting to be folded (ceiling %d); nothing was written: %w", shard, before, limit, err)
	}
	for idle := 0; unfolded+sealed >= limit; {
		if idle == putStallRounds {
			outcome = putStallNoChange
			break
		}
		was := unfolded + sealed
		if unfolded == 0 {
			// Only memtables waiting for the flusher: they become generations as it catches up.
			if err := w.Flush(ctx); err != nil {
				return fail(err)
			}
		} else if ran, err := ss.stallFold(ctx, m, i); err != nil {
			return fail(err)
		} else if ran {
			outcome = putStallFolded
		}
		var err error
		if m, err = ss.table.Latest(ctx); err != nil {
			return fail(err)
		}
		if unfolded, sealed = backlog(m); unfolded+sealed >= was {
			idle++
		}
	}
	end(unfolded+sealed, nil)
	return nil
}

// stallFold folds shard i for a stalled put: it runs the fold when no other stalled put of this
// set is running one, and otherwise waits for that one (or ctx). It reports whether it ran the
// fold. A maintenance fold of the shard that is running is waited for inside the folder (the
// set's fold turns). The fold's commit is a maintenance commit (its trigger "fold_ceiling"),
// and the table's maintenance runs after it as after a fold_memwal_shard.
func (ss *ShardSet) stallFold(ctx context.Context, m *engine.Manifest, i int) (bool, error) {
	ss.mu.Lock()
	if ch := ss.stallFolds[i]; ch != nil {
		ss.mu.Unlock()
		select {
		case <-ch:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	ch := make(chan struct{})
	ss.stallFolds[i] = ch
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		ss.stallFolds[i] = nil
		ss.mu.Unlock()
		close(ch)
	}()
	props := map[string]string{engine.PropMaintenance: string(MaintainFold),
		engine.PropMaintenanceAfter: strconv.FormatUint(m.Version, 10), engine.PropMaintenanceTrigger: "fold_ceiling"}
	n, err := ss.folder(props).FoldShardIfReady(ctx, ss.ids[i], 1)
	if err != nil {
		return true, fmt.Errorf("fold: %w", err)
	}
	if n > 0 {
		// The fold is a base commit like any other; its maintenance failing does not undo it.
		if err := ss.MaintainAfterFold(ctx); err != nil {
			ss.opts.Shard.Logger.Warn("memwal: maintenance after a stalled put's fold failed", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
		}
	}
	return true, nil
}
