package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/internal/panics"
)

// Table maintenance (docs/indices.md, Table maintenance; docs/operations.md, Maintenance).
//
// A TableMaintainer runs a table's configured maintenance after a user commit, in a fixed order:
//
//  0. the steps that packages above the engine contribute (MaintainerOptions.Steps): the MemWAL
//     fold (memwal.ShardSet.FoldStep), which appends a shard's flushed generations to the table,
//  1. optimize indices (a delta segment for unindexed fragments, merging segments),
//  2. compaction (small fragments and fragments with many deleted rows),
//  3. cleanup (expired stages, versions past retention and the files only they referenced).
//
// The order matters: a fold comes first because it adds fragments, which the index then covers
// (index catch-up is what lets a folded generation's files be retired) and compaction
// then merges; indices are brought up to date before compaction reads the table; cleanup runs
// last so that it can remove the files the others replaced. Iceberg publishing (a contributed
// step with BeforeCleanup) sits between compaction and cleanup.
//
// Each step runs only when a heuristic says it is worth it (unindexed fragments or too many index
// segments; enough small fragments; versions past retention), and has a failure policy:
// best-effort failures are logged and counted and the run goes on, a strict failure stops the run
// and is returned as a *MaintenanceError naming the step.
//
// The user's commit is visible before maintenance starts: MaintainAfterCommit is called with the
// committed manifest. In background mode (the default) it returns at once and the run happens in
// a goroutine; in inline mode it returns when the run is over. Runs of one table never overlap
// within a process, and commits arriving during a background run trigger exactly one more run.
// A contributed step with a MinInterval (the Iceberg publish) runs at most once per interval per
// table; a run within it defers the step, and the background runner runs again once the interval
// has passed (the trailing run, maintain_interval.go), so the last commits of a burst are served.
//
// Maintenance commits never trigger maintenance: they carry PropMaintenance, and a run marks its
// context, and MaintainAfterCommit ignores both.
//
// Work that lands outside the base table (MemWAL puts and flushes) makes no commit to trigger a
// run; its writer calls MaintainAfterWrite instead, when a contributed step has work.
//
// The state that makes runs single-flight (a run lock, the background run in flight and the one
// pending, the compaction turn, the last cleanup check) lives in a *Maintenance shared by the
// tables opened with the same Options.Maintenance: whoever owns the tables (a streaming.Sink, a
// command) creates it, and waits for its background runs with Maintenance.Wait.

// Transaction properties of maintenance commits.
const (
	// PropMaintenance names the maintenance step that made a commit ("optimize_indices",
	// "compaction"). Its presence is the recursion guard.
	PropMaintenance = "flight_sink.maintenance.operation"
	// PropMaintenanceAfter is the user version whose commit triggered the run.
	PropMaintenanceAfter = "flight_sink.maintenance.after_version"
)

// MaintenanceOperation names one maintenance step.
type MaintenanceOperation string

// Maintenance steps, in the order they run.
const (
	MaintainOptimizeIndices MaintenanceOperation = "optimize_indices"
	MaintainCompaction      MaintenanceOperation = "compaction"
	MaintainCleanup         MaintenanceOperation = "cleanup"
)

// maintenanceOrder is the fixed order of the engine's steps; contributed steps run before them.
var maintenanceOrder = []MaintenanceOperation{MaintainOptimizeIndices, MaintainCompaction, MaintainCleanup}

// A MaintenanceStep is maintenance that a package above the engine contributes to a table's runs
// (the engine cannot import it): the MemWAL fold. Contributed steps run first in every run, in
// the order MaintainerOptions.Steps gives, whenever the table's maintenance is on.
type MaintenanceStep struct {
	// Operation names the step in reports, metrics, logs and MaintenanceErrors.
	Operation MaintenanceOperation
	// Policy is the step's failure policy; default BestEffort.
	Policy FailurePolicy
	// Due is the step's heuristic, judged on the latest version m: whether it has work now.
	Due func(ctx context.Context, m *Manifest) (bool, error)
	// Run does the step's work. Every commit it makes must carry props (PropMaintenance is the
	// recursion guard).
	Run func(ctx context.Context, props map[string]string) error
	// BeforeCleanup places the step after compaction and before cleanup instead of first: the
	// Iceberg publish (iceberg), which mirrors what the fold and compaction committed and
	// must run before cleanup may expire what it mirrored.
	BeforeCleanup bool
	// MinInterval, when set, is the least time between two runs of the step in one table, judged
	// on the latest version m (0: no limit): a step that is due sooner is deferred, and the
	// background runner runs the table's maintenance again once the interval has passed (the
	// trailing run), so the last commits of a burst are served too. The Iceberg publish sets it.
	MinInterval func(m *Manifest) time.Duration
}

// ErrMaintenanceFailed is wrapped by every *MaintenanceError.
var ErrMaintenanceFailed = errors.New("post-commit maintenance failed")

// MaintenanceError reports a strict maintenance step that failed after a user commit. The
// commit itself succeeded: Version is visible.
type MaintenanceError struct {
	Table     string
	Version   uint64 // the user commit that triggered the run
	Operation MaintenanceOperation
	Err       error
}

func (e *MaintenanceError) Error() string {
	return fmt.Sprintf("table %s: maintenance after version %d (committed): %s failed: %v", e.Table, e.Version, e.Operation, e.Err)
}

// Unwrap returns ErrMaintenanceFailed and the step's error.
func (e *MaintenanceError) Unwrap() []error { return []error{ErrMaintenanceFailed, e.Err} }

// MaintainerOptions tune a TableMaintainer. The zero value is usable.
type MaintainerOptions struct {
	// Config, when set, replaces the configuration stored in the table.
	Config *MaintenanceConfig
	// DefaultConfig, when set, is the configuration of tables that store none (instead of the
	// built-in defaults): a server-wide default such as "off".
	DefaultConfig *MaintenanceConfig
	// MinCleanupGrace is the least cleanup grace, whatever the table configures: an unreferenced
	// file younger than it may belong to a write in flight.
	MinCleanupGrace time.Duration
	// StageTTL is the cleanup step's CleanupPolicy.StageTTL (default DefaultStageTTL): the
	// streaming sink passes the TTL its cleanup action uses, so that every cleanup path expires
	// stages alike.
	StageTTL time.Duration
	// Steps are the contributed steps, run before the engine's own. Every maintainer of a table
	// should be given the same steps: a background run started by one maintainer also serves the
	// triggers that arrive at the others while it runs.
	Steps []MaintenanceStep
	// BackgroundContext, when set, is the context of background runs (cancel it to stop them);
	// default: the caller's context without its cancellation.
	BackgroundContext context.Context
	// Logger; default the table's.
	Logger *slog.Logger

	// beforeStep, when set (tests), is called before each step runs; an error fails the step.
	beforeStep func(ctx context.Context, op MaintenanceOperation) error
	// now, when set (tests), is the clock.
	now func() time.Time
}

// TableMaintainer runs a table's maintenance. It holds no state of its own (the per-table
// single-flight state is the table's Options.Maintenance), so making one per commit costs nothing.
// Safe for concurrent use.
type TableMaintainer struct {
	t    *Table
	opts MaintainerOptions
}

// NewTableMaintainer returns a maintainer of t.
func NewTableMaintainer(t *Table, o *MaintainerOptions) *TableMaintainer {
	m := &TableMaintainer{t: t}
	if o != nil {
		m.opts = *o
	}
	if m.opts.Logger == nil {
		m.opts.Logger = t.opts.Logger
	}
	if m.opts.now == nil {
		m.opts.now = time.Now
	}
	return m
}

// MaintainAfterCommit runs the table's maintenance after the user commit that produced
// committed, as the table's configuration says (mode, steps, thresholds, failure policies).
//
// It does nothing for a maintenance commit or when called from inside a maintenance run (the
// recursion guard), or when maintenance is off. In background mode it returns nil at once. In
// inline mode it returns when the run is over: nil, or the *MaintenanceError of a strict step that
// failed; best-effort failures are only logged and counted.
//
// The commit is visible before this is called; nothing here can undo or delay its visibility.
func (mt *TableMaintainer) MaintainAfterCommit(ctx context.Context, committed *Manifest) error {
	if committed == nil || isMaintenanceCommit(committed) || inMaintenance(ctx) {
		return nil
	}
	cfg, err := mt.config(committed)
	if err != nil {
		mt.opts.Logger.Warn("table maintenance skipped: invalid configuration", "table", mt.t.name, "err", err)
		maintenanceOps.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", "config"), attribute.String("outcome", "failed")))
		return nil
	}
	return mt.maintain(ctx, cfg.Mode, committed.Version)
}

// MaintainAfterWrite is MaintainAfterCommit for work that landed outside the base table, of
// which latest is the newest version known: MemWAL puts and flushes, which make no base commit,
// call it when a contributed step (the fold) has work. It runs the maintenance as the table's
// mode says (inline: now, before it returns; background: a run is scheduled, or one more after
// the run in flight; off: nothing), and does nothing from inside a maintenance run.
func (mt *TableMaintainer) MaintainAfterWrite(ctx context.Context, latest *Manifest) error {
	if latest == nil || inMaintenance(ctx) {
		return nil
	}
	mode, err := mt.Mode(latest)
	if err != nil {
		return nil // MaintainAfterCommit reports a bad configuration; a write is no place to
	}
	return mt.maintain(ctx, mode, latest.Version)
}

// Mode is the maintenance mode this maintainer applies to version m: the configuration it was
// given, else the table's, else the default it was given, else the engine's.
func (mt *TableMaintainer) Mode(m *Manifest) (MaintenanceMode, error) {
	cfg, err := mt.config(m)
	return cfg.Mode, err
}

func (mt *TableMaintainer) maintain(ctx context.Context, mode MaintenanceMode, after uint64) error {
	switch mode {
	case MaintenanceOff:
		return nil
	case MaintenanceInline:
		st := mt.t.maintenance()
		err := func() error {
			st.run.Lock()
			defer st.run.Unlock()
			_, err := mt.run(ctx, after)
			return err
		}()
		mt.scheduleTrailing(ctx, after)
		return err
	default:
		mt.schedule(ctx, after)
		return nil
	}
}

// Run runs the maintenance steps now, whatever the mode, and waits for them (heuristics,
// enabled steps and failure policies apply). It reports what ran.
func (mt *TableMaintainer) Run(ctx context.Context) (MaintenanceReport, error) {
	st := mt.t.maintenance()
	st.run.Lock()
	defer st.run.Unlock()
	m, err := mt.t.Latest(ctx)
	if err != nil {
		return MaintenanceReport{}, err
	}
	defer mt.scheduleTrailing(ctx, m.Version) // a step this run deferred gets its trailing run
	return mt.run(ctx, m.Version)
}

// Wait blocks until no background run of the table is in flight or scheduled (among the
// maintainers sharing its Options.Maintenance).
func (mt *TableMaintainer) Wait(ctx context.Context) error {
	return mt.t.maintenance().wait(ctx)
}

// MaintenanceReport says what one maintenance run did.
type MaintenanceReport struct {
	// After is the user version the run followed.
	After           uint64                 `json:"after_version"`
	Ran             []MaintenanceOperation `json:"ran"`
	Skipped         []MaintenanceOperation `json:"skipped"`
	Failed          []MaintenanceOperation `json:"failed"`
	OptimizeIndices *OptimizeIndexReport   `json:"optimize_indices,omitempty"`
	Compaction      *CompactReport         `json:"compaction,omitempty"`
	Cleanup         *CleanupReport         `json:"cleanup,omitempty"`
}

func (mt *TableMaintainer) config(m *Manifest) (MaintenanceConfig, error) {
	c := mt.opts.Config
	if _, stored := m.Config[ConfigMaintenance]; c == nil && !stored {
		c = mt.opts.DefaultConfig
	}
	if c == nil {
		return MaintenanceConfigOf(m)
	}
	cfg := *c
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return *cfg.EnsureDefaults(), nil
}

// run runs the steps in order against the latest version. REQUIRES: the table's run lock.
func (mt *TableMaintainer) run(ctx context.Context, after uint64) (MaintenanceReport, error) {
	ctx = context.WithValue(ctx, maintenanceKey{}, true)
	ctx, span := tracer.Start(ctx, "engine.Maintain")
	defer span.End()
	rep := MaintenanceReport{After: after}
	start := time.Now()
	defer func() { mt.logRun(rep, start) }()
	// trailing is when the earliest step this run deferred falls due (zero: none); the
	// background runner reads it to schedule the trailing run.
	var trailing time.Time
	defer func() { mt.setTrailing(trailing) }()
	latest, err := mt.t.Latest(ctx)
	if err != nil {
		return rep, err
	}
	cfg, err := mt.config(latest)
	if err != nil {
		return rep, err
	}
	for _, step := range mt.steps() {
		op := step.Operation
		policy, on := step.Policy, true
		if step.Run == nil { // one of the engine's own
			policy, on = cfg.step(op)
		}
		if !on {
			continue
		}
		var worth bool
		if step.Due != nil {
			worth, err = step.Due(ctx, latest)
		} else {
			worth, err = mt.worthRunning(ctx, op, latest, &cfg)
		}
		if err == nil && !worth {
			rep.Skipped = append(rep.Skipped, op)
			maintenanceOps.Add(ctx, 1, opAttrs(op, "skipped"))
			continue
		}
		if err == nil && mt.deferred(step, latest, &trailing) {
			rep.Skipped = append(rep.Skipped, op)
			maintenanceOps.Add(ctx, 1, opAttrs(op, "deferred"))
			continue
		}
		start := time.Now()
		if err == nil && mt.opts.beforeStep != nil {
			err = mt.opts.beforeStep(ctx, op)
		}
		if err == nil {
			err = mt.runStep(ctx, step, after, &cfg, &rep)
		}
		maintenanceDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("operation", string(op))))
		if err != nil {
			rep.Failed = append(rep.Failed, op)
			maintenanceOps.Add(ctx, 1, opAttrs(op, "failed"))
			if policy == Strict {
				return rep, &MaintenanceError{Table: mt.t.name, Version: after, Operation: op, Err: err}
			}
			mt.opts.Logger.Warn("table maintenance step failed (best effort, continuing)", "table", mt.t.name,
				"operation", op, "after_version", after, "err", err)
		} else {
			rep.Ran = append(rep.Ran, op)
			maintenanceOps.Add(ctx, 1, opAttrs(op, "ok"))
		}
		if latest, err = mt.t.Latest(ctx); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// logRun logs a run that ran or failed a step as one INFO line (a run that found nothing due
// logs at DEBUG): its table, the version it followed, its steps by outcome, its duration, and
// what compaction and cleanup did.
func (mt *TableMaintainer) logRun(rep MaintenanceReport, start time.Time) {
	log := mt.opts.Logger.Info
	if len(rep.Ran) == 0 && len(rep.Failed) == 0 {
		log = mt.opts.Logger.Debug
	}
	args := []any{"table", mt.t.name, "after_version", rep.After, "ran", rep.Ran, "failed", rep.Failed,
		"skipped", rep.Skipped, "duration", time.Since(start).Round(time.Millisecond)}
	if c := rep.Compaction; c != nil {
		args = append(args, slog.Group("compaction", "fragments_removed", c.FragmentsRemoved, "fragments_added", c.FragmentsAdded))
	}
	if c := rep.Cleanup; c != nil {
		args = append(args, slog.Group("cleanup", "versions_removed", len(c.VersionsRemoved), "files_removed", len(c.FilesRemoved)))
	}
	log("table maintenance run", args...)
}

// steps returns the steps of a run in order: the contributed ones, then the engine's (with no
// Run: runStep and worthRunning know them by name), with the contributed BeforeCleanup steps
// just before cleanup.
func (mt *TableMaintainer) steps() []MaintenanceStep {
	out := make([]MaintenanceStep, 0, len(mt.opts.Steps)+len(maintenanceOrder))
	var late []MaintenanceStep
	for _, s := range mt.opts.Steps {
		if s.Policy == "" {
			s.Policy = BestEffort
		}
		if s.BeforeCleanup {
			late = append(late, s)
			continue
		}
		out = append(out, s)
	}
	for _, op := range maintenanceOrder {
		if op == MaintainCleanup {
			out = append(out, late...)
		}
		out = append(out, MaintenanceStep{Operation: op})
	}
	return out
}

func (c *MaintenanceConfig) step(op MaintenanceOperation) (FailurePolicy, bool) {
	switch op {
	case MaintainOptimizeIndices:
		return c.OptimizeIndices.FailurePolicy, enabled(c.OptimizeIndices.Enabled)
	case MaintainCompaction:
		return c.Compaction.FailurePolicy, enabled(c.Compaction.Enabled)
	default:
		return c.Cleanup.FailurePolicy, enabled(c.Cleanup.Enabled)
	}
}

func (c *MaintenanceConfig) compactOptions(props map[string]string) CompactOptions {
	return CompactOptions{TargetRowsPerFragment: c.Compaction.TargetRowsPerFragment,
		MaxDeletedShare: c.Compaction.MaxDeletedShare, MergeRatio: c.Compaction.MergeRatio, Properties: props}
}

func (mt *TableMaintainer) cleanupPolicy(c *MaintenanceConfig) CleanupPolicy {
	return CleanupPolicy{OlderThan: time.Duration(c.Cleanup.OlderThan), KeepLast: c.Cleanup.KeepLast,
		Grace: max(time.Duration(c.Cleanup.Grace), mt.opts.MinCleanupGrace), StageTTL: mt.opts.StageTTL, Now: mt.opts.now()}
}

// worthRunning is the heuristic of each step, judged on version m.
func (mt *TableMaintainer) worthRunning(ctx context.Context, op MaintenanceOperation, m *Manifest, c *MaintenanceConfig) (bool, error) {
	switch op {
	case MaintainOptimizeIndices:
		for i := range m.Indices {
			ix := &m.Indices[i]
			if len(ix.UnindexedFragments(m)) >= c.OptimizeIndices.MinUnindexedFragments || len(ix.Segments) > c.OptimizeIndices.MaxSegments {
				return true, nil
			}
		}
		return false, nil
	case MaintainCompaction:
		plan := mt.t.PlanCompaction(m, c.compactOptions(nil))
		n := 0
		for _, g := range plan.Groups {
			if len(g) == 1 {
				return true, nil // a fragment with too many deleted rows
			}
			n += len(g)
		}
		return n >= c.Compaction.MinFragments, nil
	default:
		st := mt.t.maintenance()
		now := mt.opts.now()
		st.mu.Lock()
		due := st.lastCleanupCheck.IsZero() || now.Sub(st.lastCleanupCheck) >= time.Duration(c.Cleanup.CheckInterval)
		if due {
			st.lastCleanupCheck = now
		}
		st.mu.Unlock()
		if !due {
			return false, nil
		}
		p := mt.cleanupPolicy(c)
		p.EnsureDefaults()
		// Expired stages are worth a cleanup on their own: a table whose history is short still
		// collects the stages of retried task attempts.
		stages, err := mt.t.listStages(ctx)
		if err != nil {
			return false, err
		}
		for _, st := range stages {
			if st.created.Before(p.Now.Add(-p.StageTTL)) {
				return true, nil
			}
		}
		if m.Version <= uint64(c.Cleanup.KeepLast) {
			return false, nil
		}
		expired, err := mt.t.expiredVersions(ctx, p)
		return len(expired) > 0, err
	}
}

func (mt *TableMaintainer) runStep(ctx context.Context, step MaintenanceStep, after uint64, c *MaintenanceConfig, rep *MaintenanceReport) error {
	op := step.Operation
	props := map[string]string{PropMaintenance: string(op), PropMaintenanceAfter: strconv.FormatUint(after, 10)}
	if step.Run != nil {
		return step.Run(ctx, props)
	}
	switch op {
	case MaintainOptimizeIndices:
		r, err := mt.t.OptimizeIndices(ctx, OptimizeIndexOptions{MaxSegments: c.OptimizeIndices.MaxSegments, Properties: props})
		rep.OptimizeIndices = &r
		return err
	case MaintainCompaction:
		// One compaction of a table at a time in this process: a commit stalled at the fragment
		// ceiling waits for this one instead of racing it over the same fragments.
		st := mt.t.maintenance()
		if err := st.lockCompaction(ctx); err != nil {
			return err
		}
		defer st.unlockCompaction()
		r, err := mt.t.Compact(ctx, c.compactOptions(props))
		rep.Compaction = &r
		return err
	default:
		r, err := mt.t.Cleanup(ctx, mt.cleanupPolicy(c))
		rep.Cleanup = &r
		return err
	}
}

// schedule starts a background run, or marks one pending if a run is in flight.
func (mt *TableMaintainer) schedule(ctx context.Context, after uint64) {
	mt.startBackground(ctx, after, false)
}

// startBackground starts the table's background runner, or, if it is active, marks a run
// pending (and wakes the runner if it waits for a trailing run) unless only a trailing run is
// asked for (trailingOnly: the runner picks up the trailing time itself after its run).
//
// The runner runs, then runs again at once while commits arrived during its run, then, while a
// step it deferred (MaintenanceStep.MinInterval) is outstanding, waits until that step falls due
// or a commit arrives and runs again. It ends when nothing is pending or deferred, or when its
// context ends; Wait waits for all of it, trailing runs included.
func (mt *TableMaintainer) startBackground(ctx context.Context, after uint64, trailingOnly bool) {
	st := mt.t.maintenance()
	st.mu.Lock()
	if st.running {
		if !trailingOnly {
			st.pending = true
			st.pendingAfter = max(st.pendingAfter, after)
			select {
			case st.wake <- struct{}{}:
			default:
			}
		}
		st.mu.Unlock()
		return
	}
	st.running = true
	st.idle = make(chan struct{})
	st.mu.Unlock()
	bg := mt.opts.BackgroundContext
	if bg == nil {
		bg = context.WithoutCancel(ctx)
	}
	go func() {
		waitFirst := trailingOnly
		for {
			if waitFirst {
				var ok bool
				if after, ok = mt.waitTrailing(bg, after); !ok {
					st.mu.Lock()
					st.running, st.pending = false, false
					close(st.idle)
					st.mu.Unlock()
					return
				}
			}
			st.run.Lock()
			err := panics.Recover(mt.opts.Logger, "background table maintenance", func() error {
				_, err := mt.run(bg, after)
				return err
			})
			st.run.Unlock()
			if err != nil {
				mt.opts.Logger.Error("background table maintenance failed", "table", mt.t.name, "after_version", after, "err", err)
			}
			st.mu.Lock()
			if bg.Err() != nil || (!st.pending && st.trailing.IsZero()) {
				st.running, st.pending = false, false
				close(st.idle)
				st.mu.Unlock()
				return
			}
			waitFirst = !st.pending
			if st.pending {
				st.pending, after = false, st.pendingAfter
			}
			st.mu.Unlock()
		}
	}()
}

// maintenanceState is the maintenance state of one table in one *Maintenance.
type maintenanceState struct {
	run sync.Mutex // held by a run: runs never overlap

	mu               sync.Mutex
	running          bool          // a background goroutine is active
	pending          bool          // a commit arrived during the background run
	pendingAfter     uint64        // the newest such commit
	idle             chan struct{} // closed when the background goroutine ends
	lastCleanupCheck time.Time
	lastStepRun      map[MaintenanceOperation]time.Time // when steps with a MinInterval last ran
	trailing         time.Time                          // when the earliest deferred step falls due
	wake             chan struct{}                      // a commit for a runner waiting for trailing

	// compacting holds a token while a maintenance compaction or a fragment-ceiling compaction
	// of the table runs in this process (capacity 1; a channel so that waiting honours ctx).
	compacting chan struct{}
}

// lockCompaction waits until no other compaction of the table runs in this process and takes
// the turn, or returns ctx's error. Release it with unlockCompaction.
func (st *maintenanceState) lockCompaction(ctx context.Context) error {
	select {
	case st.compacting <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (st *maintenanceState) unlockCompaction() { <-st.compacting }

func (st *maintenanceState) wait(ctx context.Context) error {
	st.mu.Lock()
	if !st.running {
		st.mu.Unlock()
		return nil
	}
	ch := st.idle
	st.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Maintenance holds the maintenance state of the tables opened with it (Options.Maintenance):
// per table, the lock that keeps runs from overlapping, the background run in flight and the one
// pending, the last cleanup check, and the compaction turn that maintenance and commits stalled
// at the fragment ceiling take. Runs of one table never overlap among the Tables sharing a
// Maintenance; Tables with different ones (other processes, or owners that chose so) coordinate
// through commits alone, which is always correct, only less economical. Safe for concurrent use.
type Maintenance struct {
	mu     sync.Mutex
	tables map[string]*maintenanceState // by store and table name
}

// NewMaintenance returns an empty Maintenance.
func NewMaintenance() *Maintenance {
	return &Maintenance{tables: make(map[string]*maintenanceState)}
}

// Wait blocks until no background maintenance run of any of its tables is in flight or
// scheduled, or ctx ends (for shutdown and tests).
func (mn *Maintenance) Wait(ctx context.Context) error {
	mn.mu.Lock()
	states := make([]*maintenanceState, 0, len(mn.tables))
	for _, st := range mn.tables {
		states = append(states, st)
	}
	mn.mu.Unlock()
	for _, st := range states {
		if err := st.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (mn *Maintenance) stateOf(t *Table) *maintenanceState {
	k := t.store.String() + "|" + t.name
	mn.mu.Lock()
	defer mn.mu.Unlock()
	st := mn.tables[k]
	if st == nil {
		st = &maintenanceState{compacting: make(chan struct{}, 1), wake: make(chan struct{}, 1),
			lastStepRun: make(map[MaintenanceOperation]time.Time)}
		mn.tables[k] = st
	}
	return st
}

// maintenance returns t's state in its Options.Maintenance.
func (t *Table) maintenance() *maintenanceState { return t.opts.Maintenance.stateOf(t) }

// maintenanceKey marks the context of a maintenance run.
type maintenanceKey struct{}

func inMaintenance(ctx context.Context) bool {
	v, _ := ctx.Value(maintenanceKey{}).(bool)
	return v
}

// isMaintenanceCommit reports whether m was committed by a maintenance step.
func isMaintenanceCommit(m *Manifest) bool {
	_, ok := m.Transaction.Properties[PropMaintenance]
	return ok
}

var (
	maintenanceOps      metric.Int64Counter
	maintenanceDuration metric.Float64Histogram
)

func init() {
	maintenanceOps, _ = meter.Int64Counter("flight_sink.maintenance.operations",
		metric.WithDescription("Table maintenance steps after user commits, by operation and outcome (ok, skipped, deferred, failed)."))
	maintenanceDuration, _ = meter.Float64Histogram("flight_sink.maintenance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a table maintenance step took."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300))
}

func opAttrs(op MaintenanceOperation, outcome string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("operation", string(op)), attribute.String("outcome", outcome))
}
