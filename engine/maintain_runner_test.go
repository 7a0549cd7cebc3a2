package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
)

// Inline table maintenance: the TableMaintainer's order, failure policies, recursion guard, and that maintenance
// never holds up the visibility of the user's commit.

// mtConfig is a configuration under which every step is due on a table prepared by mtPrepare.
func mtConfig(mode MaintenanceMode) MaintenanceConfig {
	return MaintenanceConfig{
		Mode:       mode,
		Compaction: CompactionMaintenance{MinFragments: 4},
		Cleanup:    CleanupMaintenance{KeepLast: 2, OlderThan: Duration(time.Second), Grace: Duration(time.Nanosecond), CheckInterval: Duration(time.Nanosecond)},
	}
}

// mtPrepare makes a keyed table with an index and, after it, several small unindexed fragments:
// every maintenance step has work. It returns the last user commit.
func mtPrepare(t *testing.T, store objstore.Store, name string, cfg MaintenanceConfig) (*Table, *Manifest) {
	t.Helper()
	tbl, err := Create(t.Context(), store, name, hSchema, CreateOptions{PrimaryKey: []string{"id"},
		Config: map[string]string{ConfigMaintenance: encodeConfig(t, cfg)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hAppend(t, tbl, hRange(0, 10), "a")
	if _, err := tbl.CreateIndex(t.Context(), IndexSpec{}); err != nil {
		t.Fatal(err)
	}
	var m *Manifest
	for i := range 5 {
		m = hAppend(t, tbl, hRange(10+int64(i)*10, 10), "b")
	}
	return tbl, m
}

// mtFuture is a clock an hour ahead, so cleanup finds versions past retention without waiting.
func mtFuture() time.Time { return time.Now().Add(time.Hour) }

// stepRecorder records the steps a maintainer starts, and can fail or block them.
type stepRecorder struct {
	mu    sync.Mutex
	steps []MaintenanceOperation
	fail  map[MaintenanceOperation]error
	block chan struct{} // when set, every step waits for it
}

func (r *stepRecorder) hook(ctx context.Context, op MaintenanceOperation) error {
	r.mu.Lock()
	r.steps = append(r.steps, op)
	err := r.fail[op]
	block := r.block
	r.mu.Unlock()
	if block != nil {
		<-block
	}
	return err
}

func (r *stepRecorder) got() []MaintenanceOperation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]MaintenanceOperation(nil), r.steps...)
}

func TestMaintainerRunsStepsInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl, user := mtPrepare(t, store, "order", mtConfig(MaintenanceInline))
		rec := &stepRecorder{}
		mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: rec.hook, now: mtFuture})
		if err := mt.MaintainAfterCommit(t.Context(), user); err != nil {
			t.Fatal(err)
		}
		want := []MaintenanceOperation{MaintainOptimizeIndices, MaintainCompaction, MaintainCleanup}
		if got := rec.got(); !equalOps(got, want) {
			t.Fatalf("steps %v, want %v", got, want)
		}
		// The commits in history: OptimizeIndex, then Rewrite, both marked as maintenance of the
		// user's version; cleanup commits nothing but removed the old versions.
		hist, err := tbl.History(t.Context(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if hist[1].Operation != OpOptimizeIndex || hist[0].Operation != OpRewrite {
			t.Fatalf("history %v %v, want OptimizeIndex then Rewrite", hist[1].Operation, hist[0].Operation)
		}
		for _, h := range hist {
			if h.Properties[PropMaintenanceAfter] != itoa(user.Version) || h.Properties[PropMaintenance] == "" {
				t.Fatalf("maintenance commit %d properties %v", h.Version, h.Properties)
			}
		}
		vs, err := tbl.Versions(t.Context())
		if err != nil || len(vs) != 2 {
			t.Fatalf("versions after cleanup %v (%v), want the last 2", vs, err)
		}
		m := hLatest(t, tbl)
		if len(m.Fragments) != 1 || len(m.Index("pk").UnindexedFragments(m)) != 1 {
			t.Fatalf("after maintenance: %d fragments, %d unindexed (compaction ran after the optimize)", len(m.Fragments), len(m.Index("pk").UnindexedFragments(m)))
		}
		hRequireRows(t, "rows after maintenance", hRead(t, tbl, 0), mergeWants(hWant(hRange(0, 10), "a"), hWant(hRange(10, 50), "b")))
	})
}

func TestMaintainerBestEffortFailureContinues(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl, user := mtPrepare(t, store, "besteffort", mtConfig(MaintenanceInline))
		rec := &stepRecorder{fail: map[MaintenanceOperation]error{MaintainOptimizeIndices: errors.New("injected")}}
		mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: rec.hook, now: mtFuture})
		if err := mt.MaintainAfterCommit(t.Context(), user); err != nil {
			t.Fatalf("best-effort failure returned %v", err)
		}
		want := []MaintenanceOperation{MaintainOptimizeIndices, MaintainCompaction, MaintainCleanup}
		if got := rec.got(); !equalOps(got, want) {
			t.Fatalf("steps %v, want %v", got, want)
		}
		rep, err := mt.Run(t.Context()) // the report shape: the optimize failed again, the rest ran or had nothing to do
		if err != nil || !equalOps(rep.Failed, []MaintenanceOperation{MaintainOptimizeIndices}) {
			t.Fatalf("report %+v, %v", rep, err)
		}
		if m := hLatest(t, tbl); len(m.Fragments) != 1 {
			t.Fatalf("compaction did not run after the failed optimize: %d fragments", len(m.Fragments))
		}
	})
}

func TestMaintainerStrictFailureNamesOperation(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		cfg := mtConfig(MaintenanceInline)
		cfg.Compaction.FailurePolicy = Strict
		tbl, user := mtPrepare(t, store, "strict", cfg)
		cause := errors.New("injected compaction failure")
		rec := &stepRecorder{fail: map[MaintenanceOperation]error{MaintainCompaction: cause}}
		mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: rec.hook, now: mtFuture})
		err := mt.MaintainAfterCommit(t.Context(), user)
		var me *MaintenanceError
		if !errors.As(err, &me) || me.Operation != MaintainCompaction || me.Version != user.Version ||
			!errors.Is(err, ErrMaintenanceFailed) || !errors.Is(err, cause) || !strings.Contains(err.Error(), "compaction") {
			t.Fatalf("strict failure: %v", err)
		}
		// The run stopped there: cleanup never started. The user's commit stays visible.
		if got := rec.got(); !equalOps(got, []MaintenanceOperation{MaintainOptimizeIndices, MaintainCompaction}) {
			t.Fatalf("steps %v", got)
		}
		if m, err := hOpen(t, store, "strict", nil).Manifest(t.Context(), user.Version); err != nil || m.Version != user.Version {
			t.Fatalf("user version after a strict failure: %v", err)
		}
		// A strict step that fails for real (not injected) is reported the same way.
		cfg.Mode = MaintenanceInline
		cfg.OptimizeIndices.FailurePolicy = Strict
		bad := NewTableMaintainer(tbl, &MaintainerOptions{Config: &cfg, beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
			if op == MaintainOptimizeIndices {
				// Remove an index segment file the merge will need.
				m := hLatest(t, tbl)
				for _, p := range segmentFiles(m.Index("pk").Segments) {
					if err := store.Delete(ctx, tbl.key(p)); err != nil {
						return err
					}
				}
				resetIndexCache(tbl)
			}
			return nil
		}})
		cfg.OptimizeIndices.MaxSegments = 1
		for i := range 3 {
			hAppend(t, tbl, hRange(1000+int64(i), 1), "z")
		}
		err = bad.MaintainAfterCommit(t.Context(), hLatest(t, tbl))
		if !errors.As(err, &me) || me.Operation != MaintainOptimizeIndices || !strings.Contains(err.Error(), "optimize_indices") {
			t.Fatalf("real strict failure: %v", err)
		}
	})
}

func TestMaintainerRecursionGuard(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl, user := mtPrepare(t, store, "guard", mtConfig(MaintenanceInline))
		var nested atomic.Int32
		var mt *TableMaintainer
		mt = NewTableMaintainer(tbl, &MaintainerOptions{now: mtFuture, beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
			// A commit made from inside a run (as a maintenance step's own commit would be) must
			// not start another run: inline, that would deadlock on the table's run lock.
			m := hAppend(t, tbl, []int64{int64(9000 + nested.Add(1))}, "n")
			return mt.MaintainAfterCommit(ctx, m)
		}})
		done := make(chan error, 1)
		go func() { done <- mt.MaintainAfterCommit(t.Context(), user) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("maintenance re-entered itself from inside a run")
		}
		if nested.Load() != 3 {
			t.Fatalf("%d steps ran, want 3", nested.Load())
		}
		// Maintenance commits are marked, and handing one to the maintainer does nothing.
		hist, err := tbl.History(t.Context(), 20)
		if err != nil {
			t.Fatal(err)
		}
		var maint *Manifest
		for _, h := range hist {
			if h.Operation == OpRewrite || h.Operation == OpOptimizeIndex {
				if h.Properties[PropMaintenance] == "" {
					t.Fatalf("maintenance commit %d (%s) without %s: %v", h.Version, h.Operation, PropMaintenance, h.Properties)
				}
				if maint == nil {
					if maint, err = tbl.Manifest(t.Context(), h.Version); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if maint == nil {
			t.Fatal("the run committed nothing")
		}
		for i := range 6 { // small fragments pile up again: there would be work
			hAppend(t, tbl, hRange(5000+int64(i), 1), "x")
		}
		before := latestVersion(t, tbl)
		guarded := NewTableMaintainer(tbl, &MaintainerOptions{now: mtFuture, beforeStep: func(context.Context, MaintenanceOperation) error {
			t.Error("a maintenance commit triggered maintenance")
			return nil
		}})
		if err := guarded.MaintainAfterCommit(t.Context(), maint); err != nil {
			t.Fatal(err)
		}
		// And so does a call from a context inside a run.
		if err := guarded.MaintainAfterCommit(context.WithValue(t.Context(), maintenanceKey{}, true), hLatest(t, tbl)); err != nil {
			t.Fatal(err)
		}
		if v := latestVersion(t, tbl); v != before {
			t.Fatalf("version %d, want %d: the guarded calls committed something", v, before)
		}
	})
}

func TestMaintainerNeverDelaysVisibility(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl, user := mtPrepare(t, store, "visible", mtConfig(MaintenanceBackground))
		rec := &stepRecorder{block: make(chan struct{})}
		mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: rec.hook, now: mtFuture})
		start := time.Now()
		if err := mt.MaintainAfterCommit(t.Context(), user); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("background MaintainAfterCommit took %v", d)
		}
		// While maintenance is stuck, the user's commit is visible and more commits land.
		other := hOpen(t, store, "visible", nil)
		if m := hLatest(t, other); m.Version != user.Version {
			t.Fatalf("another reader sees version %d, want the user's %d", m.Version, user.Version)
		}
		m2 := hAppend(t, tbl, hRange(500, 5), "c")
		if err := mt.MaintainAfterCommit(t.Context(), m2); err != nil { // coalesced into one more run
			t.Fatal(err)
		}
		if m := hLatest(t, other); m.Version != m2.Version {
			t.Fatalf("another reader sees version %d, want %d", m.Version, m2.Version)
		}
		close(rec.block)
		if err := mt.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if m := hLatest(t, tbl); len(m.Fragments) > 2 {
			t.Fatalf("background maintenance did not compact: %d fragments", len(m.Fragments))
		}

		// Inline: the commit is visible to others while the run is still going.
		cfg := mtConfig(MaintenanceInline)
		tbl2, user2 := mtPrepare(t, store, "visible2", cfg)
		var sawUser atomic.Bool
		inline := NewTableMaintainer(tbl2, &MaintainerOptions{now: mtFuture, beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
			m, err := hOpen(t, store, "visible2", nil).Latest(ctx)
			if err == nil && m.Version >= user2.Version {
				sawUser.Store(true)
			}
			return err
		}})
		if err := inline.MaintainAfterCommit(t.Context(), user2); err != nil || !sawUser.Load() {
			t.Fatalf("inline run: %v, user commit visible during the run: %v", err, sawUser.Load())
		}
	})
}

func TestMaintainerBackgroundSingleFlight(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl, user := mtPrepare(t, store, "flight", mtConfig(MaintenanceBackground))
		var running, most, runs atomic.Int32
		release := make(chan struct{})
		mt := NewTableMaintainer(tbl, &MaintainerOptions{now: mtFuture, beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
			if op != MaintainOptimizeIndices && op != MaintainCompaction && op != MaintainCleanup {
				return nil
			}
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			if op == MaintainCompaction {
				runs.Add(1)
				<-release
			}
			return nil
		}})
		for range 20 {
			if err := mt.MaintainAfterCommit(t.Context(), user); err != nil {
				t.Fatal(err)
			}
		}
		// A second maintainer of the same table shares the single flight.
		if err := NewTableMaintainer(tbl, nil).MaintainAfterCommit(t.Context(), user); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		close(release)
		if err := tbl.opts.Maintenance.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if most.Load() != 1 {
			t.Fatalf("%d maintenance steps ran at once", most.Load())
		}
		if r := runs.Load(); r < 1 || r > 2 {
			t.Fatalf("%d compaction attempts for 21 triggers, want the first run and at most one coalesced rerun", r)
		}
	})
}

func TestMaintainerSkipsWhatIsNotWorthIt(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		cfg := MaintenanceConfig{Mode: MaintenanceInline}
		tbl, err := Create(t.Context(), store, "quiet", hSchema, CreateOptions{PrimaryKey: []string{"id"},
			Config: map[string]string{ConfigMaintenance: encodeConfig(t, cfg)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := hAppend(t, tbl, hRange(0, 10), "a")
		rec := &stepRecorder{}
		mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: rec.hook})
		rep, err := mt.Run(t.Context())
		if err != nil || len(rep.Ran) != 0 || len(rec.got()) != 0 || latestVersion(t, tbl) != m.Version {
			t.Fatalf("maintenance of a healthy table: %+v, steps %v, %v", rep, rec.got(), err)
		}
		// Off means off, whatever there is to do.
		for i := range 20 {
			hAppend(t, tbl, hRange(100+int64(i), 1), "b")
		}
		off := MaintenanceConfig{Mode: MaintenanceOff}
		if _, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigMaintenance: encodeConfig(t, off)}, nil, nil); err != nil {
			t.Fatal(err)
		}
		m = hLatest(t, tbl)
		if err := mt.MaintainAfterCommit(t.Context(), m); err != nil || len(rec.got()) != 0 || latestVersion(t, tbl) != m.Version {
			t.Fatalf("maintenance off: steps %v, %v", rec.got(), err)
		}
		// A disabled step is skipped, the others run.
		noCompact := MaintenanceConfig{Mode: MaintenanceInline, Compaction: CompactionMaintenance{Enabled: new(false)}}
		if _, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigMaintenance: encodeConfig(t, noCompact)}, nil, nil); err != nil {
			t.Fatal(err)
		}
		rep, err = mt.Run(t.Context())
		if err != nil || len(rep.Ran) != 0 || len(hLatest(t, tbl).Fragments) != 21 {
			t.Fatalf("compaction disabled: %+v %v", rep, err)
		}
	})
}

func TestMaintenanceConfig(t *testing.T) {
	def, err := ParseMaintenanceConfig("")
	if err != nil || def.Mode != MaintenanceBackground || !enabled(def.Compaction.Enabled) || def.Cleanup.KeepLast != 1000 ||
		time.Duration(def.Cleanup.OlderThan) != time.Hour || def.Compaction.FailurePolicy != BestEffort {
		t.Fatalf("defaults: %+v %v", def, err)
	}
	c, err := ParseMaintenanceConfig(`{"mode":"inline","cleanup":{"older_than":"90s","grace":3600,"failure_policy":"strict"},"compaction":{"enabled":false}}`)
	if err != nil || c.Mode != MaintenanceInline || time.Duration(c.Cleanup.OlderThan) != 90*time.Second ||
		time.Duration(c.Cleanup.Grace) != time.Hour || c.Cleanup.FailurePolicy != Strict || enabled(c.Compaction.Enabled) {
		t.Fatalf("parsed %+v %v", c, err)
	}
	back, err := ParseMaintenanceConfig(encodeConfig(t, c))
	if err != nil || encodeConfig(t, back) != encodeConfig(t, c) {
		t.Fatalf("round trip %s -> %s (%v)", encodeConfig(t, c), encodeConfig(t, back), err)
	}
	for _, bad := range []string{`{"mode":"sometimes"}`, `{"compaction":{"failure_policy":"maybe"}}`, `{"cleanup":{"olderthan":"1h"}}`,
		`{"cleanup":{"older_than":"soon"}}`, `not json`, `{"compaction":{"max_deleted_share":1.5}}`} {
		if _, err := ParseMaintenanceConfig(bad); err == nil {
			t.Errorf("config %s accepted", bad)
		}
	}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := hCreate(t, store, "cfg", false, nil)
		if _, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigMaintenance: `{"mode":"never"}`}, nil, nil); err == nil {
			t.Fatal("an invalid maintenance config was stored")
		}
		m, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigMaintenance: `{"mode":"off"}`, "a": "1"}, nil, map[string]string{"who": "test"})
		if err != nil || m.Config["a"] != "1" || m.Transaction.Operation != OpUpdateConfig {
			t.Fatalf("update config: %+v %v", m, err)
		}
		if got, err := MaintenanceConfigOf(m); err != nil || got.Mode != MaintenanceOff {
			t.Fatalf("stored config %+v %v", got, err)
		}
		m, err = tbl.UpdateConfig(t.Context(), nil, []string{"a"}, nil)
		if _, still := m.Config["a"]; err != nil || still {
			t.Fatalf("unset: %v %v", m.Config, err)
		}
		// A server-wide default applies to tables that store no configuration, and only to them.
		off := &MaintenanceConfig{Mode: MaintenanceOff}
		inline := &MaintenanceConfig{Mode: MaintenanceInline}
		if c, err := NewTableMaintainer(tbl, &MaintainerOptions{DefaultConfig: inline}).config(m); err != nil || c.Mode != MaintenanceOff {
			t.Fatalf("stored config under a default: %+v %v", c, err)
		}
		plain := hCreate(t, store, "cfg2", false, nil)
		if c, err := NewTableMaintainer(plain, &MaintainerOptions{DefaultConfig: off}).config(hLatest(t, plain)); err != nil || c.Mode != MaintenanceOff {
			t.Fatalf("default config: %+v %v", c, err)
		}
		if c, err := NewTableMaintainer(plain, &MaintainerOptions{Config: inline, DefaultConfig: off}).config(hLatest(t, plain)); err != nil || c.Mode != MaintenanceInline {
			t.Fatalf("override config: %+v %v", c, err)
		}
	})
}

func equalOps(a, b []MaintenanceOperation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mergeWants(ms ...map[int64]string) map[int64]string {
	out := map[int64]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// The single-flight state is the Maintenance in the table's Options, not process-wide: Tables
// opened with one Maintenance share it (Wait waits for a background run started through either),
// while a Table opened with another one runs its maintenance without waiting for theirs, and
// that Maintenance's Wait has nothing to wait for.
func TestMaintenanceIsPassedThroughOptions(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, user := mtPrepare(t, store, "shared", mtConfig(MaintenanceBackground))
	shared, apart := NewMaintenance(), NewMaintenance()
	one := hOpen(t, store, "shared", &Options{Maintenance: shared})
	two := hOpen(t, store, "shared", &Options{Maintenance: shared})
	three := hOpen(t, store, "shared", &Options{Maintenance: apart})

	release, blocked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	bg := NewTableMaintainer(one, &MaintainerOptions{now: mtFuture, beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
		once.Do(func() { close(blocked) })
		<-release
		return nil
	}})
	if err := bg.MaintainAfterCommit(t.Context(), user); err != nil {
		t.Fatal(err)
	}
	<-blocked // a background run of the table holds the run lock of shared
	// Released before the temporary directory goes.
	t.Cleanup(func() {
		close(release)
		if err := shared.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	})

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := NewTableMaintainer(two, nil).Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait through another Table of the same Maintenance: %v, want it to wait for the blocked run", err)
	}
	if err := apart.Wait(t.Context()); err != nil {
		t.Fatalf("Wait on a Maintenance without runs: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := NewTableMaintainer(three, &MaintainerOptions{now: mtFuture}).Run(t.Context())
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run through a Table of another Maintenance: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a run through a Table of another Maintenance waited for the blocked run: the state is shared")
	}
}
