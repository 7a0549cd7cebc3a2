package engine

import (
	"slices"
	"testing"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestPlanCompaction(t *testing.T) {
	tbl := &Table{opts: *(&Options{TargetRowsPerFragment: 100}).EnsureDefaults()}
	frag := func(id uint64, rows, deleted int64) Fragment {
		return Fragment{ID: id, PhysicalRows: rows, DeletedRows: deleted}
	}
	ids := func(p CompactionPlan) [][]uint64 {
		var out [][]uint64
		for _, g := range p.Groups {
			var gi []uint64
			for _, f := range g {
				gi = append(gi, f.ID)
			}
			out = append(out, gi)
		}
		return out
	}
	cases := []struct {
		name  string
		frags []Fragment
		want  [][]uint64
	}{
		{"nothing", nil, nil},
		{"one small fragment stays", []Fragment{frag(1, 10, 0)}, nil},
		{"full fragments stay", []Fragment{frag(1, 100, 0), frag(2, 100, 0)}, nil},
		{"small neighbours merge", []Fragment{frag(1, 10, 0), frag(2, 20, 0), frag(3, 30, 0)}, [][]uint64{{1, 2, 3}}},
		{"a full fragment splits runs", []Fragment{frag(1, 10, 0), frag(2, 10, 0), frag(3, 100, 0), frag(4, 10, 0), frag(5, 10, 0)},
			[][]uint64{{1, 2}, {4, 5}}},
		{"runs are cut at the target", []Fragment{frag(1, 60, 0), frag(2, 30, 0), frag(3, 30, 0), frag(4, 30, 0)},
			[][]uint64{{1, 2}, {3, 4}}},
		{"too many deletions: rewritten alone", []Fragment{frag(1, 100, 11), frag(2, 100, 0)}, [][]uint64{{1}}},
		{"10% deleted is fine", []Fragment{frag(1, 100, 10)}, nil},
		{"fully deleted fragment goes", []Fragment{frag(1, 100, 0), frag(2, 50, 50), frag(3, 100, 0)}, [][]uint64{{2}}},
		{"deleted rows do not count toward the target", []Fragment{frag(1, 100, 50), frag(2, 60, 0)}, [][]uint64{{1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ids(tbl.PlanCompaction(&Manifest{Fragments: c.frags}, CompactOptions{}))
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("plan %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlanCompactionIncremental(t *testing.T) {
	tbl := &Table{opts: *(&Options{TargetRowsPerFragment: 100}).EnsureDefaults()}
	frag := func(id uint64, rows, deleted int64) Fragment {
		return Fragment{ID: id, PhysicalRows: rows, DeletedRows: deleted}
	}
	cases := []struct {
		name  string
		frags []Fragment
		want  [][]uint64
	}{
		{"small ones merge, the big older one waits", []Fragment{frag(1, 40, 0), frag(2, 5, 0), frag(3, 5, 0), frag(4, 5, 0)},
			[][]uint64{{2, 3, 4}}},
		{"the older one joins once the newer rows reach half of it", []Fragment{frag(1, 40, 0), frag(2, 10, 0), frag(3, 10, 0)},
			[][]uint64{{1, 2, 3}}},
		{"a binary counter", []Fragment{frag(1, 32, 0), frag(2, 16, 0), frag(3, 8, 0), frag(4, 4, 0), frag(5, 4, 0)},
			[][]uint64{{1, 2, 3, 4, 5}}},
		{"the target still cuts", []Fragment{frag(1, 60, 0), frag(2, 30, 0), frag(3, 30, 0)}, [][]uint64{{2, 3}}},
		{"full fragments split runs", []Fragment{frag(1, 5, 0), frag(2, 5, 0), frag(3, 100, 0), frag(4, 5, 0), frag(5, 5, 0)},
			[][]uint64{{1, 2}, {4, 5}}},
		{"too many deletions: rewritten even when large", []Fragment{frag(1, 90, 50), frag(2, 5, 0)}, [][]uint64{{1, 2}}},
		{"too many deletions alone", []Fragment{frag(1, 100, 11), frag(2, 100, 0)}, [][]uint64{{1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got [][]uint64
			for _, g := range tbl.PlanCompaction(&Manifest{Fragments: c.frags}, CompactOptions{MergeRatio: 2}).Groups {
				var gi []uint64
				for _, f := range g {
					gi = append(gi, f.ID)
				}
				got = append(got, gi)
			}
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("plan %v, want %v", got, c.want)
			}
		})
	}
}

// TestIncrementalCompactionWriteAmplification drives the planner the way background maintenance
// does — a stream of 1,000-row epochs, compaction whenever the plan would rewrite 16 or more
// fragments, target 1 M rows — and counts the rows each policy rewrites per row ingested. A full
// compaction rewrites the growing fragment every time (tens of times per row); the incremental
// plan rewrites each row a handful of times and keeps the fragment count about as low.
func TestIncrementalCompactionWriteAmplification(t *testing.T) {
	tbl := &Table{opts: *(&Options{}).EnsureDefaults()}
	simulate := func(ratio float64) (amplification float64, maxFrags int) {
		var frags []Fragment
		var rewritten, ingested int64
		next := uint64(0)
		add := func(rows int64) Fragment {
			next++
			return Fragment{ID: next, PhysicalRows: rows}
		}
		for e := 0; e < 3600; e++ {
			frags = append(frags, add(1000))
			ingested += 1000
			maxFrags = max(maxFrags, len(frags))
			plan := tbl.PlanCompaction(&Manifest{Fragments: frags}, CompactOptions{MergeRatio: ratio})
			n := 0
			for _, g := range plan.Groups {
				n += len(g)
			}
			if n < defaultMinCompactFragments {
				continue
			}
			merged := map[uint64][]Fragment{} // first fragment id of a group -> the group
			in := map[uint64]bool{}
			for _, g := range plan.Groups {
				merged[g[0].ID] = g
				for _, f := range g {
					in[f.ID] = true
				}
			}
			var out []Fragment
			for _, f := range frags {
				if g, ok := merged[f.ID]; ok {
					var rows int64
					for _, x := range g {
						rows += x.PhysicalRows
					}
					rewritten += rows
					out = append(out, add(rows))
				} else if !in[f.ID] {
					out = append(out, f)
				}
			}
			frags = out
		}
		return float64(rewritten) / float64(ingested), maxFrags
	}
	fullAmp, fullMax := simulate(0)
	incAmp, incMax := simulate(defaultCompactMergeRatio)
	t.Logf("rows rewritten per row ingested: full %.1f (max %d fragments), incremental %.1f (max %d fragments)", fullAmp, fullMax, incAmp, incMax)
	if incAmp > 8 || incAmp*4 > fullAmp {
		t.Fatalf("incremental compaction rewrites %.1f rows per row (full: %.1f); want at most 8 and a quarter of full", incAmp, fullAmp)
	}
	if incMax > 25 {
		t.Fatalf("incremental compaction let %d fragments pile up", incMax)
	}
}

func TestCompact(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "cmp", false, &Options{TargetRowsPerFragment: 1000})
		want := map[int64]string{}
		for i := range int64(20) {
			hAppend(t, tbl, hRange(i*50, 50), "a")
			for _, id := range hRange(i*50, 50) {
				want[id] = "a"
			}
		}
		// Deletions before compaction are dropped for good.
		if _, err := tbl.Delete(ctx, expr.And(expr.Ge("id", 100), expr.Lt("id", 150)), nil); err != nil {
			t.Fatal(err)
		}
		for id := int64(100); id < 150; id++ {
			delete(want, id)
		}
		before := hLatest(t, tbl)
		var progress []CompactProgress
		rep, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 400, Properties: map[string]string{"by": "test"},
			Progress: func(p CompactProgress) { progress = append(progress, p) }})
		if err != nil {
			t.Fatal(err)
		}
		after := hLatest(t, tbl)
		if rep.Version != after.Version || rep.ReadVersion != before.Version || rep.FragmentsRemoved != 20 ||
			rep.RowsRewritten != 950 || rep.DeletedRowsDropped != 50 || rep.BytesWritten == 0 || rep.BytesRead == 0 {
			t.Fatalf("report %+v", rep)
		}
		// 950 live rows in groups of at most 400 live rows: 400 (9 fragments, one of them emptied
		// by the delete), 400, 150.
		var rows []int64
		for _, f := range after.Fragments {
			rows = append(rows, f.PhysicalRows)
			if f.DeletionFile != "" {
				t.Fatalf("compacted fragment %d still has a deletion file", f.ID)
			}
		}
		if !slices.Equal(rows, []int64{400, 400, 150}) || len(after.Fragments) != rep.FragmentsAdded {
			t.Fatalf("fragments after compaction hold %v rows", rows)
		}
		if after.Rows() != 950 {
			t.Fatalf("%d rows after compaction", after.Rows())
		}
		hRequireRows(t, "after compaction", hRead(t, tbl, 0), want)
		hRequireRows(t, "time travel to before compaction", hRead(t, tbl, before.Version), want)
		last := progress[len(progress)-1]
		if last.RowsDone != 950 || last.RowsTotal != 950 || last.FragmentsDone != 20 || last.FragmentsTotal != 20 {
			t.Fatalf("last progress %+v", last)
		}
		txn, err := tbl.ReadTransaction(ctx, after)
		if err != nil {
			t.Fatal(err)
		}
		if txn.Operation != OpRewrite || txn.Rewrite == nil || len(txn.Rewrite.OldFragmentIDs()) != 20 || txn.Properties["by"] != "test" {
			t.Fatalf("rewrite transaction %+v", txn)
		}
		// The mapping sends every live old address to the row with the same id.
		oldAddr := hAddresses(t, tbl, before.Version)
		newAddr := hAddresses(t, tbl, after.Version)
		am, err := resolveCommitted(txn, after)
		if err != nil {
			t.Fatal(err)
		}
		all := &rowset.Set{}
		for _, a := range oldAddr {
			all.Add(a)
		}
		mapped, lost := am.mapRows(all)
		if !lost.IsEmpty() || mapped.Len() != int64(len(oldAddr)) {
			t.Fatalf("mapping lost %d of %d live rows", lost.Len(), len(oldAddr))
		}
		for id, a := range oldAddr {
			m, _ := am.mapRows(rowset.New(a))
			if got := m.Addresses(); len(got) != 1 || got[0] != newAddr[id] {
				t.Fatalf("id %d: old address %x maps to %x, the row is at %x", id, a, got, newAddr[id])
			}
		}
		// Nothing left to do: no commit.
		rep, err = tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 400})
		if err != nil || rep.Version != 0 {
			t.Fatalf("second compaction: %+v %v", rep, err)
		}
	})
}

// hAddresses returns id -> row address at a version.
func hAddresses(t testing.TB, tbl *Table, version uint64) map[int64]uint64 {
	t.Helper()
	s, err := tbl.Scan(t.Context(), ScanOptions{Version: version, Columns: []string{"id"}, WithRowAddresses: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	out := map[int64]uint64{}
	for s.Next() {
		ids := s.RecordBatch().Column(0).(interface{ Value(int) int64 })
		for i, a := range s.RowAddresses() {
			out[ids.Value(i)] = a
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
