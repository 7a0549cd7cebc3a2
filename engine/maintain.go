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
)

// Table maintenance (seed 002).
//
// A TableMaintainer runs a table's configured maintenance after a user commit, in a fixed order:
//
//  1. optimize indices (a delta segment for unindexed fragments, merging segments),
//  2. compaction (small fragments and fragments with many deleted rows),
//  3. cleanup (versions past retention and the files only they referenced).
//
// The order matters: indices are brought up to date before compaction reads the table, and
// cleanup runs last so that it can remove the files the first two replaced.
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
//
// Maintenance commits never trigger maintenance: they carry PropMaintenance, and a run marks its
// context, and MaintainAfterCommit ignores both.

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

// maintenanceOrder is the fixed order of the steps.
var maintenanceOrder = []MaintenanceOperation{MaintainOptimizeIndices, MaintainCompaction, MaintainCleanup}

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
	// file younger than it may belong to a write in flight. The streaming sink passes its stage
	// TTL, since staged partitions are unreferenced until their epoch commits.
	MinCleanupGrace time.Duration
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
// single-flight state is process-wide), so making one per commit costs nothing. Safe for
// concurrent use.
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
	switch cfg.Mode {
	case MaintenanceOff:
		return nil
	case MaintenanceInline:
		st := maintenanceStateOf(mt.t)
		st.run.Lock()
		defer st.run.Unlock()
		_, err := mt.run(ctx, committed.Version)
		return err
	default:
		mt.schedule(ctx, committed.Version)
		return nil
	}
}

// Run runs the maintenance steps now, whatever the mode, and waits for them (heuristics,
// enabled steps and failure policies apply). It reports what ran.
func (mt *TableMaintainer) Run(ctx context.Context) (MaintenanceReport, error) {
	st := maintenanceStateOf(mt.t)
	st.run.Lock()
	defer st.run.Unlock()
	m, err := mt.t.Latest(ctx)
	if err != nil {
		return MaintenanceReport{}, err
	}
	return mt.run(ctx, m.Version)
}

// Wait blocks until no background run of the table is in flight or scheduled in this process.
func (mt *TableMaintainer) Wait(ctx context.Context) error {
	return maintenanceStateOf(mt.t).wait(ctx)
}

// WaitForMaintenance blocks until no background maintenance run of any table is in flight in
// this process (for shutdown and tests).
func WaitForMaintenance(ctx context.Context) error {
	var states []*maintenanceState
	maintenanceStates.Range(func(_, v any) bool {
		states = append(states, v.(*maintenanceState))
		return true
	})
	for _, st := range states {
		if err := st.wait(ctx); err != nil {
			return err
		}
	}
	return nil
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
	latest, err := mt.t.Latest(ctx)
	if err != nil {
		return rep, err
	}
	cfg, err := mt.config(latest)
	if err != nil {
		return rep, err
	}
	for _, op := range maintenanceOrder {
		policy, on := cfg.step(op)
		if !on {
			continue
		}
		worth, err := mt.worthRunning(ctx, op, latest, &cfg)
		if err == nil && !worth {
			rep.Skipped = append(rep.Skipped, op)
			maintenanceOps.Add(ctx, 1, opAttrs(op, "skipped"))
			continue
		}
		start := time.Now()
		if err == nil && mt.opts.beforeStep != nil {
			err = mt.opts.beforeStep(ctx, op)
		}
		if err == nil {
			err = mt.runStep(ctx, op, after, &cfg, &rep)
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
		Grace: max(time.Duration(c.Cleanup.Grace), mt.opts.MinCleanupGrace), Now: mt.opts.now()}
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
		st := maintenanceStateOf(mt.t)
		now := mt.opts.now()
		st.mu.Lock()
		due := st.lastCleanupCheck.IsZero() || now.Sub(st.lastCleanupCheck) >= time.Duration(c.Cleanup.CheckInterval)
		if due {
			st.lastCleanupCheck = now
		}
		st.mu.Unlock()
		if !due || m.Version <= uint64(c.Cleanup.KeepLast) {
			return false, nil
		}
		p := mt.cleanupPolicy(c)
		p.EnsureDefaults()
		expired, err := mt.t.expiredVersions(ctx, p)
		return len(expired) > 0, err
	}
}

func (mt *TableMaintainer) runStep(ctx context.Context, op MaintenanceOperation, after uint64, c *MaintenanceConfig, rep *MaintenanceReport) error {
	props := map[string]string{PropMaintenance: string(op), PropMaintenanceAfter: strconv.FormatUint(after, 10)}
	switch op {
	case MaintainOptimizeIndices:
		r, err := mt.t.OptimizeIndices(ctx, OptimizeIndexOptions{MaxSegments: c.OptimizeIndices.MaxSegments, Properties: props})
		rep.OptimizeIndices = &r
		return err
	case MaintainCompaction:
		// One compaction of a table at a time in this process: a commit stalled at the fragment
		// ceiling waits for this one instead of racing it over the same fragments.
		st := maintenanceStateOf(mt.t)
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
	st := maintenanceStateOf(mt.t)
	st.mu.Lock()
	if st.running {
		st.pending = true
		st.pendingAfter = max(st.pendingAfter, after)
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
		for {
			st.run.Lock()
			err := RecoverError(mt.opts.Logger, "background table maintenance", func() error {
				_, err := mt.run(bg, after)
				return err
			})
			st.run.Unlock()
			if err != nil {
				mt.opts.Logger.Error("background table maintenance failed", "table", mt.t.name, "after_version", after, "err", err)
			}
			st.mu.Lock()
			if !st.pending || bg.Err() != nil {
				st.running, st.pending = false, false
				close(st.idle)
				st.mu.Unlock()
				return
			}
			st.pending, after = false, st.pendingAfter
			st.mu.Unlock()
		}
	}()
}

// maintenanceState is the process-wide maintenance state of one table.
type maintenanceState struct {
	run sync.Mutex // held by a run: runs never overlap

	mu               sync.Mutex
	running          bool          // a background goroutine is active
	pending          bool          // a commit arrived during the background run
	pendingAfter     uint64        // the newest such commit
	idle             chan struct{} // closed when the background goroutine ends
	lastCleanupCheck time.Time

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

// maintenanceStates maps a table (store and name) to its *maintenanceState.
var maintenanceStates sync.Map

func maintenanceStateOf(t *Table) *maintenanceState {
	k := t.store.String() + "|" + t.name
	if v, ok := maintenanceStates.Load(k); ok {
		return v.(*maintenanceState)
	}
	v, _ := maintenanceStates.LoadOrStore(k, &maintenanceState{compacting: make(chan struct{}, 1)})
	return v.(*maintenanceState)
}

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
		metric.WithDescription("Table maintenance steps after user commits, by operation and outcome (ok, skipped, failed)."))
	maintenanceDuration, _ = meter.Float64Histogram("flight_sink.maintenance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a table maintenance step took."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300))
}

func opAttrs(op MaintenanceOperation, outcome string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("operation", string(op)), attribute.String("outcome", outcome))
}
