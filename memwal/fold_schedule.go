package memwal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// When a ShardSet folds: after a flush, when a shard's oldest flushed row reaches its fold age,
// on FoldAll, and as the table maintainer's fold step (the fold itself: fold.go).

// MaintainFold is the MemWAL fold's name as a maintenance step (reports, metrics, the
// PropMaintenance of its commits).
const MaintainFold engine.MaintenanceOperation = "memwal_fold"

// DefaultFoldGenerations is ShardSetOptions.FoldGenerations unless set.
const DefaultFoldGenerations = 4

// foldByAge schedules the table's maintenance whenever a shard's oldest flushed row reaches its
// fold age (readyLocked), every Freshness/16, until Close.
func (ss *ShardSet) foldByAge(stop <-chan struct{}) {
	defer ss.hooks.Done()
	t := time.NewTicker(max(ss.opts.Freshness/16, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ss.scheduleFold()
		}
	}
}

// Flush seals and flushes the memtables of the shards at the given indexes (every shard when
// none is given) to generations. It flushes the shards this set writes and claims (reason
// "flush") those that are free (owner_lease.go), releasing them after on a table without a primary key;
// a shard another live server owns is that server's to flush and is skipped, so a flush never
// fences a live owner. A writer of the set that another server fenced (took the shard over) is
// dropped, and the shard is then flushed as one the set does not write: skipped while its new
// owner lives.
func (ss *ShardSet) Flush(ctx context.Context, shards ...int) error {
	if len(shards) == 0 {
		shards = ss.all()
	}
	for _, i := range shards {
		w := ss.healthyWriters()[i]
		if w != nil {
			err := w.Flush(ctx)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrFenced) {
				return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
			}
			// Fenced: the shard's new owner replays its WAL, this writer's acknowledged puts
			// included, so nothing is lost by dropping the writer.
			ss.opts.Shard.Logger.Warn("memwal: another server claimed a shard this server wrote; flushing it is that server's", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
			ss.unroute(i)
			ss.dropWriter(i, w)
			ss.own.noteFenced(i)
		}
		if err := ss.flushUnwritten(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// flushUnwritten flushes shard i, which the set does not write, when it is free: it claims the
// shard (reason "flush"), flushes it and releases it after on a table without a primary key. A
// shard that holds nothing, or that a live server owns, is skipped.
func (ss *ShardSet) flushUnwritten(ctx context.Context, i int) error {
	m, err := ss.readManifest(ctx, i)
	if err != nil {
		return fmt.Errorf("flush memwal shard %s: %w", ss.ids[i], err)
	}
	if m == nil || !ss.observe(i, m) {
		return nil // nothing was ever written there, or a live server owns it
	}
	w, err := ss.open(ctx, i, ClaimFlush, ss.claimFree(i))
	if errors.Is(err, errShardTaken) {
		return nil
	} else if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
	}
	ss.releaseUnrouted(ctx, i, w)
	return nil
}

// FoldShard folds shard i into the base table when it has at least minGenerations flushed
// generations waiting (Folder.FoldShardIfReady) and returns the generations reclaimed. It
// is the fold_memwal_shard action's fold, made on request: its commit carries no maintenance
// property, and the table's maintenance runs after it (MaintainAfterFold) as after any commit.
func (ss *ShardSet) FoldShard(ctx context.Context, i, minGenerations int) (int, error) {
	return ss.folder(nil).FoldShardIfReady(ctx, ss.ids[i], max(minGenerations, 1))
}

// FoldAll flushes every shard's memtable and folds every flushed generation into the base table:
// what a complete epoch must do before it overwrites the table, so that the Overwrite replaces
// the shards' rows too.
//
// It claims every shard it does not write (reason "fold_all"), fencing their owners: an overwrite
// must hold every row acknowledged before it. On a table without a primary key it releases those
// shards after (releaseUnrouted).
//
// A writer of the set that another server fenced (took the shard over) is dropped and the shard
// claimed again: the claim replays the shard's WAL, the dropped writer's acknowledged puts
// included. Each writer of the set is confirmed as its shard's owner (one manifest probe), even
// one with nothing to flush.
func (ss *ShardSet) FoldAll(ctx context.Context) error {
	for i := range ss.ids {
		for attempt := 0; ; attempt++ {
			claimed := ss.healthyWriters()[i] == nil
			w, err := ss.open(ctx, i, ClaimFoldAll, nil)
			if err != nil {
				return err
			}
			err = w.Flush(ctx)
			if err == nil && !claimed {
				// A writer with nothing to flush answers without reading the shard manifest:
				// confirm that it still owns the shard, or the rows another server acknowledged
				// there since it took the shard over stay out of the fold.
				err = w.confirmWriter(ctx)
			}
			if errors.Is(err, ErrFenced) && !claimed && attempt == 0 {
				ss.opts.Shard.Logger.Warn("memwal: another server claimed a shard this server wrote; claiming it again to fold every shard", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
				ss.unroute(i)
				ss.dropWriter(i, w)
				ss.own.noteFenced(i)
				continue
			}
			if err != nil {
				return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
			}
			if claimed {
				defer ss.releaseUnrouted(ctx, i, w)
			}
			break
		}
	}
	c := ss.folder(nil)
	for _, id := range ss.ids {
		if _, err := c.FoldShard(ctx, id); err != nil {
			return fmt.Errorf("fold memwal shard %s: %w", id, err)
		}
	}
	return nil
}

// Maintainer returns the table's maintainer with the set's fold step. Every maintainer of a
// table with shards should be this one, so that a background run serves every trigger.
func (ss *ShardSet) Maintainer() *engine.TableMaintainer {
	o := ss.opts.Maintainer
	o.Steps = append([]engine.MaintenanceStep{ss.FoldStep()}, o.Steps...)
	return engine.NewTableMaintainer(ss.table, &o)
}

// MaintainAfterFold runs the table's maintenance after a fold made outside maintenance (a
// fold_memwal_shard, a stalled put's fold): the fold is a commit like any other, it adds
// fragments and lets index catch-up advance.
func (ss *ShardSet) MaintainAfterFold(ctx context.Context) error {
	m, err := ss.table.Latest(ctx)
	if err != nil {
		return err
	}
	return ss.Maintainer().MaintainAfterWrite(ctx, m)
}

// AfterPut starts the table's maintenance when the fold step has work after puts of epoch data
// (m is the base version the puts were checked against): in inline mode it runs before AfterPut
// returns, and only a strict step failing makes it return an error (the puts are durable all the
// same: their replay is a duplicate).
func (ss *ShardSet) AfterPut(ctx context.Context, m *engine.Manifest) error {
	if !ss.foldDue() {
		return nil
	}
	return ss.Maintainer().MaintainAfterWrite(ctx, m)
}

// afterFlush is the writers' AfterFlush hook. The flusher runs behind the puts, so the put that
// sealed a memtable has returned before its generation is flushed; with background maintenance
// the flush itself schedules the fold that put could not, and a stream that stops leaves no more
// than FoldGenerations-1 generations waiting. Inline maintenance folds only in puts, and "off"
// never (but for a put stalled at the fold ceiling).
func (ss *ShardSet) afterFlush() {
	ss.hookMu.Lock()
	if ss.closed {
		ss.hookMu.Unlock()
		return
	}
	ss.hooks.Add(1)
	ss.hookMu.Unlock()
	go func() { // the hook must not wait: the writer's next flush waits for it
		defer ss.hooks.Done()
		ss.scheduleFold()
	}()
}

// scheduleFold starts the table's background maintenance when a shard is ready to fold.
func (ss *ShardSet) scheduleFold() {
	if !ss.foldDue() {
		return
	}
	log := ss.opts.Maintainer.Logger
	_ = panics.Recover(log, "memwal fold after a flush", func() error {
		ctx := ss.opts.Maintainer.BackgroundContext
		m, err := ss.table.Latest(ctx)
		if err != nil {
			return nil // the next put, flush or tick looks again
		}
		mt := ss.Maintainer()
		if mode, err := mt.Mode(m); err != nil || mode != engine.MaintenanceBackground {
			return nil
		}
		return mt.MaintainAfterWrite(ctx, m) // schedules: the run reports its own errors
	})
}

// FoldStep is the MemWAL fold as a step of the table's maintenance (engine.MaintenanceStep): it
// is due when a shard this set writes has flushed FoldGenerations generations, one of them since
// its last fold started (a writer's view of its generations is only refreshed by its own
// flushes, so a shard just folded is not tried again until it flushes), and it folds each such
// shard. Best effort: a fold that fails is logged, and the shard's next flush tries again.
func (ss *ShardSet) FoldStep() engine.MaintenanceStep {
	return engine.MaintenanceStep{
		Operation: MaintainFold,
		Policy:    engine.BestEffort,
		Due:       func(context.Context, *engine.Manifest) (bool, error) { return ss.foldDue(), nil },
		Run:       ss.fold,
	}
}

func (ss *ShardSet) fold(ctx context.Context, props map[string]string) error {
	var errs []error
	c := ss.folder(props)
	for i, id := range ss.ids {
		need, ok := ss.startFold(i)
		if !ok {
			continue
		}
		if _, err := c.FoldShardIfReady(ctx, id, need); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// foldDue reports whether a shard is ready to fold (readyLocked).
func (ss *ShardSet) foldDue() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := range ss.ids {
		if ss.readyLocked(i) {
			return true
		}
	}
	return false
}

// startFold reports whether shard i is ready to fold and, if so, records that its fold starts;
// need is the number of generations the fold needs (one when it folds by age).
func (ss *ShardSet) startFold(i int) (need int, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if need = ss.needLocked(i); need == 0 {
		return 0, false
	}
	ss.foldedAt[i] = ss.writers[i].Stats().NextGeneration
	return need, true
}

// readyLocked: this set's writer of shard i has flushed a generation since its last fold started,
// and either automatic folds are on and FoldGenerations generations wait, or the oldest flushed
// row is a quarter of the freshness bound old. REQUIRES: ss.mu.
func (ss *ShardSet) readyLocked(i int) bool { return ss.needLocked(i) > 0 }

// needLocked is the number of generations shard i's fold needs when it is ready (readyLocked),
// else 0. REQUIRES: ss.mu.
func (ss *ShardSet) needLocked(i int) int {
	w := ss.writers[i]
	if w == nil {
		return 0
	}
	st := w.Stats()
	if st.Generations == 0 || st.NextGeneration <= ss.foldedAt[i] {
		return 0
	}
	need := ss.opts.FoldGenerations
	if need < 0 {
		return 0 // automatic folds are off
	}
	if st.Generations >= need {
		return need
	}
	if f := ss.opts.Freshness; f > 0 && !st.OldestGeneration.IsZero() && time.Since(st.OldestGeneration) >= f/4 {
		return 1
	}
	return 0
}

// folder returns a Folder that takes this set's fold turns and stamps props.
func (ss *ShardSet) folder(props map[string]string) *Folder {
	return NewFolder(ss.table, &FoldOptions{Shard: ss.opts.Shard, Turns: &ss.turns, Properties: props})
}
