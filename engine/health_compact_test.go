package engine

import (
	"slices"
	"testing"

	"github.com/flight-sink/flight-sink/engine/objstore"
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

func TestCompact(t *testing.T) {
	hStores(t, func(t *testing.T, store objstore.Store) {
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
		if _, err := tbl.Delete(ctx, And(Ge("id", 100), Lt("id", 150)), nil); err != nil {
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
		all := &RowSet{}
		for _, a := range oldAddr {
			all.Add(a)
		}
		mapped, lost := am.mapRows(all)
		if !lost.IsEmpty() || mapped.Len() != int64(len(oldAddr)) {
			t.Fatalf("mapping lost %d of %d live rows", lost.Len(), len(oldAddr))
		}
		for id, a := range oldAddr {
			m, _ := am.mapRows(NewRowSet(a))
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
