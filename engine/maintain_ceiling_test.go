package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/objstore"
)

// The fragment ceiling (maintain_ceiling.go): fragments never pass compaction.max_fragments plus the
// commits in flight, however far maintenance falls behind, and a stall never deadlocks.

// ceilingTable creates a table whose maintenance configuration is cfg.
func ceilingTable(t *testing.T, store objstore.Store, name string, cfg MaintenanceConfig, opts *Options) *Table {
	t.Helper()
	tbl, err := Create(t.Context(), store, name, rowsSchema, CreateOptions{Config: map[string]string{ConfigMaintenance: encodeConfig(t, cfg)}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// requireFragmentCeiling reads every version of tbl and fails when one holds more than bound
// small fragments; it returns the largest count seen.
func requireFragmentCeiling(t *testing.T, tbl *Table, bound int) int {
	t.Helper()
	ctx := t.Context()
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	peak := 0
	for _, v := range vs {
		m, err := tbl.Manifest(ctx, v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		_, o := tbl.fragmentCeiling(m)
		n := smallFragments(m, o.TargetRowsPerFragment)
		if n > bound {
			t.Fatalf("version %d (%s) holds %d small fragments, the ceiling allows %d", v, m.Transaction.Operation, n, bound)
		}
		peak = max(peak, n)
	}
	return peak
}

// ceilingCompactions counts the compactions that stalled commits ran.
func ceilingCompactions(t *testing.T, tbl *Table) int {
	t.Helper()
	vs, err := tbl.Versions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hist, err := tbl.History(t.Context(), len(vs))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range hist {
		if h.Properties[PropMaintenanceTrigger] == "fragment_ceiling" {
			n++
		}
	}
	return n
}

// Concurrent writers append many one-fragment commits to a table with a ceiling of 8 while
// maintenance cannot help: its background compaction is stuck until the writers are done, or
// maintenance is off with the compaction step disabled. Every version of the table holds at most
// the ceiling of small fragments (each commit checks the exact version it lands on, so the
// commits in flight add nothing), the writers finish because the stalled commits compact
// themselves, and every row is there exactly once.
func TestFragmentCeilingHoldsWhenMaintenanceIsStuck(t *testing.T) {
	const ceiling, writers, appends, per = 8, 4, 20, 5
	off := false
	cases := []struct {
		name  string
		cfg   MaintenanceConfig
		stuck bool // the background compaction blocks until the writers are done
	}{
		{"background compaction stuck", MaintenanceConfig{Compaction: CompactionMaintenance{MaxFragments: ceiling, MinFragments: 2}}, true},
		{"maintenance off", MaintenanceConfig{Mode: MaintenanceOff, Compaction: CompactionMaintenance{MaxFragments: ceiling, Enabled: &off}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) {
				ctx := t.Context()
				tbl := ceilingTable(t, store, "ceiling", tc.cfg, nil)
				release := make(chan struct{})
				var releaseOnce sync.Once
				unblock := func() { releaseOnce.Do(func() { close(release) }) }
				defer unblock()
				var blocked sync.WaitGroup // the background compaction reached its block
				var blockOnce sync.Once
				if tc.stuck {
					blocked.Add(1)
				}
				mt := NewTableMaintainer(tbl, &MaintainerOptions{beforeStep: func(ctx context.Context, op MaintenanceOperation) error {
					if op == MaintainCompaction && tc.stuck {
						blockOnce.Do(blocked.Done)
						select {
						case <-release:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return nil
				}})
				var wantIDs []int64
				errs := make(chan error, writers)
				var wg sync.WaitGroup
				for w := range writers {
					for k := range appends {
						wantIDs = append(wantIDs, idRange(int64(w*10_000+k*per), per)...)
					}
					wg.Go(func() {
						for k := range appends {
							rec := makeRows(idRange(int64(w*10_000+k*per), per))
							m, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"writer": strconv.Itoa(w)})
							rec.Release()
							if err == nil {
								err = mt.MaintainAfterCommit(ctx, m)
							}
							if err != nil {
								errs <- fmt.Errorf("writer %d append %d: %w", w, k, err)
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				if tc.stuck {
					blocked.Wait() // the maintainer did try, and was held back the whole time
				}
				unblock()
				if err := mt.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				peak := requireFragmentCeiling(t, tbl, ceiling)
				stalls := ceilingCompactions(t, tbl)
				t.Logf("%d appends: peak %d small fragments (ceiling %d), %d compactions run by stalled commits", writers*appends, peak, ceiling, stalls)
				if stalls == 0 {
					t.Fatalf("%d one-fragment appends passed a ceiling of %d without a stalled commit compacting", writers*appends, ceiling)
				}
				requireSameIDs(t, "rows after the run", scanRows(t, tbl, 0), wantIDs)
			})
		})
	}
}

// A commit that stalls at the ceiling waits for the compaction running in this process rather
// than racing it; when its ctx ends first it fails with that error, wrapped so that the writer
// deletes its data files, and nothing is committed.
func TestFragmentCeilingStallEndsWithContext(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl := ceilingTable(t, store, "ceiling", MaintenanceConfig{Mode: MaintenanceOff, Compaction: CompactionMaintenance{MaxFragments: 2}}, nil)
	appendIDs(t, tbl, idRange(0, 5), nil)
	before := appendIDs(t, tbl, idRange(5, 5), nil)
	dataFiles := len(listKeys(t, tbl, "data"))

	st := tbl.maintenance()
	if err := st.lockCompaction(ctx); err != nil { // a compaction of the table is running
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	rec := makeRows(idRange(10, 5))
	_, err = tbl.Append(waitCtx, []arrow.RecordBatch{rec}, nil)
	rec.Release()
	st.unlockCompaction()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errStalled) || !CommitDefinitelyFailed(err) {
		t.Fatalf("append at the ceiling while a compaction runs: %v, want the stall to end with its deadline", err)
	}
	if !strings.Contains(err.Error(), "max_fragments 2") {
		t.Fatalf("error %q does not name the ceiling", err)
	}
	if m := hLatest(t, tbl); m.Version != before.Version {
		t.Fatalf("a failed stalled append committed version %d", m.Version)
	}
	if n := len(listKeys(t, tbl, "data")); n != dataFiles {
		t.Fatalf("%d data files after the failed append, want %d (its files deleted)", n, dataFiles)
	}

	// Once the compaction slot is free, the next append runs the compaction and lands.
	m := appendIDs(t, tbl, idRange(10, 5), nil)
	if n := smallFragments(m, tbl.opts.TargetRowsPerFragment); n > 2 {
		t.Fatalf("append after the stall: %d small fragments, ceiling 2", n)
	}
	if ceilingCompactions(t, tbl) != 1 {
		t.Fatalf("want exactly one compaction run by the stalled append")
	}
	requireSameIDs(t, "rows", scanRows(t, tbl, 0), idRange(0, 15))
}

// Full fragments are the table's size, not a backlog: a table of full fragments passes its
// ceiling without a stall. Deletes and Overwrites never stall.
func TestFragmentCeilingCountsSmallFragmentsOnly(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := ceilingTable(t, store, "full", MaintenanceConfig{Mode: MaintenanceOff, Compaction: CompactionMaintenance{MaxFragments: 2}},
		&Options{TargetRowsPerFragment: 5})
	var m *Manifest
	for i := range 6 {
		m = appendIDs(t, tbl, idRange(int64(i)*5, 5), nil)
	}
	if len(m.Fragments) != 6 || ceilingCompactions(t, tbl) != 0 {
		t.Fatalf("%d fragments, %d ceiling compactions; want 6 full fragments and none", len(m.Fragments), ceilingCompactions(t, tbl))
	}
}

// compaction.max_fragments is validated with the rest of the maintenance configuration: a value
// outside 2..100000 is refused naming the field, and 0 or absent means 64.
func TestMaxFragmentsConfig(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int // 0: refused
	}{
		{`{}`, 64},
		{`{"compaction": {"max_fragments": 0}}`, 64},
		{`{"compaction": {"max_fragments": 8}}`, 8},
		{`{"compaction": {"max_fragments": 2}}`, 2},
		{`{"compaction": {"max_fragments": 100000}}`, 100000},
		{`{"compaction": {"max_fragments": 1}}`, 0},
		{`{"compaction": {"max_fragments": -1}}`, 0},
		{`{"compaction": {"max_fragments": 100001}}`, 0},
		{`{"compaction": {"max_fragments": 9223372036854775807}}`, 0},
		{`{"compaction": {"max_fragments": 1.5}}`, 0},
		{`{"compaction": {"max_fragments": "64"}}`, 0},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := ParseMaintenanceConfig(tc.value)
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "max_fragments") {
					t.Fatalf("parsed to %+v, %v; want an error naming max_fragments", c.Compaction, err)
				}
				return
			}
			if err != nil || c.Compaction.MaxFragments != tc.want {
				t.Fatalf("max_fragments %d, %v; want %d", c.Compaction.MaxFragments, err, tc.want)
			}
		})
	}
	// UpdateConfig refuses it before committing anything.
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createRowsTable(t, store, "cfg", nil)
	if _, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigMaintenance: `{"compaction": {"max_fragments": 1}}`}, nil, nil); err == nil {
		t.Fatal("UpdateConfig accepted max_fragments 1")
	}
	if v := hLatest(t, tbl).Version; v != 1 {
		t.Fatalf("a refused config update committed version %d", v)
	}
}

// In a partitioned table the ceiling counts the small fragments compaction can merge away: each
// partition's first one is the table's shape. A table of more partitions than the ceiling takes
// appends to partitions it holds without a compaction each, until the extra fragments reach the
// ceiling; then one compaction makes room, and no version passes the ceiling.
func TestFragmentCeilingPartitioned(t *testing.T) {
	ctx := t.Context()
	cfg := MaintenanceConfig{}
	cfg.Compaction.MaxFragments = 8
	tbl, err := Create(ctx, newLocalStore(t), "parts", rowsSchema, CreateOptions{
		Config:      map[string]string{ConfigMaintenance: encodeConfig(t, cfg)},
		PartitionBy: mustSpec(t, `[{"column":"id","transform":"bucket[20]"}]`),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 200)
	for i := range ids {
		ids[i] = int64(i)
	}
	rec := makeRows(ids)
	_, err = tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	m := mustLatest(t, tbl)
	parts := len(m.Fragments)
	if parts < 15 {
		t.Fatalf("200 ids over 20 buckets made %d fragments", parts)
	}
	for i := range 7 { // 7 extra fragments: below the ceiling of 8
		rec := makeRows([]int64{int64(i)})
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := ceilingCompactions(t, tbl); n != 0 {
		t.Fatalf("%d compactions for 7 extra fragments over %d partitions, the ceiling 8", n, parts)
	}
	for i := range 10 {
		rec := makeRows([]int64{int64(i)})
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := ceilingCompactions(t, tbl); n == 0 {
		t.Fatal("17 extra fragments and no compaction at the ceiling 8")
	}
	requireFragmentCeiling(t, tbl, 8)
	var rows int64
	for _, f := range mustLatest(t, tbl).Fragments {
		rows += f.LiveRows()
	}
	if rows != 217 {
		t.Fatalf("the table holds %d rows, want 217", rows)
	}
}
