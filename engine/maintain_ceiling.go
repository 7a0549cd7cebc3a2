package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The fragment ceiling: a table's bounds hold under any load, as an LSM's write stalls make them
// hold (docs/operations.md, Ceilings).
//
// Background compaction keeps a table's small fragments down, but it runs behind the commits and
// falls behind without limit on a loaded machine. compaction.max_fragments (default 64) is a
// ceiling that does not depend on it: a commit that adds fragments (Append, Update, Upsert) and
// finds at least that many small fragments in the version its manifest is about to follow stalls
// until a compaction has brought them below the ceiling. It waits for the compaction of the
// table that is running in this process (a maintenance run's, or another stalled commit's), and
// runs one itself when none is.
//
// The check is made on every attempt, against the exact version the attempt's manifest follows
// (a commit that loses the race checks its new base again), so every version such a commit
// creates holds at most ceiling-1 small fragments plus its own: the ceiling plus the commits in
// flight, however far maintenance falls behind.
//
// What holds besides:
//   - Rewrite (compaction), Delete, Overwrite, index and config commits never stall: they add no
//     fragment beside the ones they read. So the compaction a stall runs cannot stall itself,
//     and maintenance's own commits never wait for user commits.
//   - The ceiling holds whatever the maintenance mode, also "off", and whether the compaction
//     step is enabled: a bound that depends on maintenance running is not a bound. The ceiling
//     and the compaction options are read from the table's stored configuration
//     (ConfigMaintenance; defaults when it has none or it does not parse).
//   - A small fragment has fewer live rows than the compaction target. Full fragments are the
//     table's size, not a backlog, and do not count.
//   - When compaction cannot merge what is there (no two adjacent small fragments fit in one
//     target), the commit lands: nothing it waited for would change that.
//   - A stall ends with the commit's ctx. When the compaction it runs fails, the commit fails
//     too, with nothing committed (CommitDefinitelyFailed), as an LSM stops writes after a
//     background error.
//
// The stall compaction uses the table's merge_ratio when that plan brings the count below the
// ceiling, and otherwise merges every run of small fragments as far as the target allows (an
// explicit compaction's plan).

// PropMaintenanceTrigger names what started a maintenance commit that no user commit's
// maintenance run made: "fragment_ceiling" for the compaction of a stalled commit.
const PropMaintenanceTrigger = "flight_sink.maintenance.trigger"

// errStalled is wrapped by the error of a commit that stalled at the fragment ceiling and gave
// up there (its ctx ended, or the compaction that had to make room failed): no manifest names it.
var errStalled = errors.New("commit stalled at the fragment ceiling")

// ceilingRounds bounds the compactions one stalled commit waits for or runs; each brings the
// count down, so only commits racing in from other processes can make a second one necessary.
const ceilingRounds = 8

// Stall outcomes (the "outcome" attribute of flight_sink.commit.stalls).
const (
	stallCompacted      = "compacted"        // this commit ran the compaction that made room
	stallWaited         = "waited"           // another compaction made room
	stallNothingToMerge = "nothing_to_merge" // compaction cannot bring the count down; landed
	stallFailed         = "failed"           // ctx ended or the compaction failed; not committed
)

// addsFragments reports whether txn adds fragments beside the ones it read: the commits the
// fragment ceiling applies to.
func addsFragments(txn *Transaction) bool {
	switch txn.Operation {
	case OpAppend, OpUpdate, OpUpsert:
		return len(txn.Fragments) > 0
	}
	return false
}

// fragmentCeiling returns the fragment ceiling of version m and the compaction options that
// hold it (defaults filled).
func (t *Table) fragmentCeiling(m *Manifest) (int, CompactOptions) {
	cfg, err := MaintenanceConfigOf(m)
	if err != nil {
		// The maintainer reports an invalid configuration; the ceiling holds at its defaults.
		cfg = MaintenanceConfig{}
		cfg.EnsureDefaults()
	}
	return cfg.Compaction.MaxFragments, t.compactDefaults(cfg.compactOptions(nil))
}

// smallFragments counts the fragments of m with fewer live rows than target. In a partitioned
// table each partition's first small fragment is not counted: compaction cannot merge it with
// another partition's, so one small fragment a partition is the table's shape, as full fragments
// are, not a backlog (a table of 720 hourly partitions would otherwise stall every commit at a
// ceiling of 64, whatever compaction did).
func smallFragments(m *Manifest, target int64) int {
	n := 0
	var seen map[string]bool
	if len(m.PartitionSpec) > 0 {
		seen = make(map[string]bool)
	}
	for _, f := range m.Fragments {
		if f.LiveRows() >= target {
			continue
		}
		if seen != nil {
			if k := f.Partition.Key(); !seen[k] {
				seen[k] = true
				continue
			}
		}
		n++
	}
	return n
}

// ceilingCompaction returns the options of the compaction that brings m's small fragments below
// ceiling: o (the table's incremental plan) when its plan does, else a plan that merges every
// run of small fragments. ok is false when neither merges anything.
func (t *Table) ceilingCompaction(m *Manifest, o CompactOptions, ceiling int) (_ CompactOptions, ok bool) {
	small := smallFragments(m, o.TargetRowsPerFragment)
	merges := func(o CompactOptions) int {
		n := 0
		for _, g := range t.PlanCompaction(m, o).Groups {
			n += len(g) - 1 // each group becomes one fragment (its live rows fit the target)
		}
		return n
	}
	if n := merges(o); n > 0 && small-n < ceiling {
		return o, true
	}
	o.MergeRatio = 0
	return o, merges(o) > 0
}

// holdFragmentCeiling returns m when txn may land on it, or stalls until a compaction has
// brought the small fragments below the table's ceiling and returns the version it then read.
// See the comment at the top of this file.
func (t *Table) holdFragmentCeiling(ctx context.Context, txn *Transaction, m *Manifest) (*Manifest, error) {
	if !addsFragments(txn) {
		return m, nil
	}
	ceiling, o := t.fragmentCeiling(m)
	before := smallFragments(m, o.TargetRowsPerFragment)
	if before < ceiling {
		return m, nil
	}
	if _, ok := t.ceilingCompaction(m, o, ceiling); !ok {
		return m, nil // nothing to merge: waiting would change nothing
	}
	start := time.Now()
	outcome := stallWaited
	end := func(after int, err error) {
		waited := time.Since(start)
		recordStall(ctx, txn.Operation, outcome, waited)
		log := t.opts.Logger.Warn
		args := []any{"table", t.name, "operation", txn.Operation, "fragments", before, "ceiling", ceiling,
			"waited", waited.Round(time.Millisecond), "outcome", outcome, "fragments_after", after}
		if err != nil {
			log = t.opts.Logger.Error
			args = append(args, "err", err)
		}
		log("commit stalled at the fragment ceiling (compaction.max_fragments) until a compaction made room", args...)
	}
	fail := func(err error) error {
		outcome = stallFailed
		end(-1, err)
		return fmt.Errorf("table %s: %w (%d small fragments, compaction.max_fragments %d); nothing was committed: %w",
			t.name, errStalled, before, ceiling, err)
	}
	st := t.maintenance()
	for round := 0; ; round++ {
		if round == ceilingRounds {
			outcome = stallNothingToMerge
			break
		}
		// Wait for the compaction running in this process, if any, then look again: it may have
		// made room already.
		if err := st.lockCompaction(ctx); err != nil {
			return nil, fail(err)
		}
		cur, err := t.Latest(ctx)
		if err == nil {
			ceiling, o = t.fragmentCeiling(cur)
			if co, ok := t.ceilingCompaction(cur, o, ceiling); ok && smallFragments(cur, o.TargetRowsPerFragment) >= ceiling {
				co.Properties = map[string]string{PropMaintenance: string(MaintainCompaction),
					PropMaintenanceAfter: strconv.FormatUint(cur.Version, 10), PropMaintenanceTrigger: "fragment_ceiling"}
				_, err = t.Compact(context.WithValue(ctx, maintenanceKey{}, true), co)
				outcome = stallCompacted
			}
		}
		st.unlockCompaction()
		// A compaction that lost to an Overwrite or to another compaction of the same fragments
		// changed nothing; the table moved on, look again.
		if err != nil && !errors.Is(err, ErrCommitConflict) {
			return nil, fail(err)
		}
		if m, err = t.Latest(ctx); err != nil {
			return nil, fail(err)
		}
		ceiling, o = t.fragmentCeiling(m)
		if smallFragments(m, o.TargetRowsPerFragment) < ceiling {
			break
		}
		if _, ok := t.ceilingCompaction(m, o, ceiling); !ok {
			outcome = stallNothingToMerge
			break
		}
	}
	end(smallFragments(m, o.TargetRowsPerFragment), nil)
	return m, nil
}
