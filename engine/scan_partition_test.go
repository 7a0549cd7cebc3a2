package engine

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine/expr"
)

// scanIDs scans version m with filter and returns the ids read and the scan's counters.
func scanIDs(t testing.TB, tbl *Table, m *Manifest, filter *expr.Predicate) ([]int64, ScanStats) {
	t.Helper()
	s, err := tbl.ScanManifest(t.Context(), m, ScanOptions{Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var ids []int64
	for s.Next() {
		col := s.RecordBatch().Column(0).(*array.Int64)
		ids = append(ids, col.Int64Values()...)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids, s.Stats()
}

// matchingIDs evaluates filter on every row of m: the ids a correct filtered scan returns.
func matchingIDs(t testing.TB, tbl *Table, m *Manifest, filter *expr.Predicate) []int64 {
	t.Helper()
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Version: m.Version})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range recs {
		match, err := filter.Match(r)
		if err != nil {
			t.Fatal(err)
		}
		col := r.Column(0).(*array.Int64)
		for i, ok := range match {
			if ok {
				ids = append(ids, col.Value(i))
			}
		}
		r.Release()
	}
	slices.Sort(ids)
	return ids
}

// TestPartitionPruning filters tables of several specs with comparisons, "in", null tests and
// their combinations: every filtered scan returns exactly the rows the filter matches, and the
// filters that name a partition's source skip fragments before opening them.
func TestPartitionPruning(t *testing.T) {
	const day = "2024-01-01"
	dayStart, dayEnd := "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"
	for _, c := range []struct {
		spec    string
		filters []*expr.Predicate
		prunes  []bool // per filter: must skip a fragment by partition
	}{
		{`[{"column":"ts","transform":"hour"}]`, []*expr.Predicate{
			expr.And(expr.Ge("ts", "2024-01-01T02:00:00Z"), expr.Lt("ts", "2024-01-01T03:00:00Z")),
			expr.Eq("ts", "2024-01-01T04:00:00.000004Z"),
			expr.Gt("ts", "2024-01-01T04:30:00Z"),
			expr.Le("ts", "2024-01-01T00:00:00Z"),
			expr.Or(expr.Lt("ts", "1970-01-01T00:00:00Z"), expr.Ge("ts", "2024-01-01T05:00:00Z")),
			expr.Not(expr.Lt("ts", "2024-01-01T02:00:00Z")),
			expr.Ne("ts", "2024-01-01T02:00:00Z"),
		}, []bool{true, true, true, true, true, false, false}},
		{`[{"column":"ts","transform":"day"},{"column":"country"}]`, []*expr.Predicate{
			expr.And(expr.Ge("ts", dayStart), expr.Lt("ts", dayEnd), expr.Eq("country", "NL")),
			expr.IsNull("country"),
			expr.IsNotNull("country"),
			expr.In("country", "DE", "FR", nil),
			expr.Ne("country", "NL"),
			expr.Or(expr.Eq("country", "BE"), expr.Eq("v", 7)),
			expr.Eq("country", "XX"),
		}, []bool{true, true, true, true, true, false, true}},
		{`[{"column":"d","transform":"month"}]`, []*expr.Predicate{
			expr.Eq("d", day),
			expr.Ge("d", "2024-02-01"),
			expr.Lt("d", "1969-12-15"),
		}, []bool{true, true, true}},
		{`[{"column":"id","transform":"bucket[8]"}]`, []*expr.Predicate{
			expr.Eq("id", 17),
			expr.In("id", 1, 2, 3),
			expr.Lt("id", 5), // a bucket proves nothing about order
		}, []bool{true, true, false}},
		{`[{"column":"country","transform":"truncate[1]"},{"column":"id","transform":"truncate[50]"}]`, []*expr.Predicate{
			expr.Eq("country", "DE"),
			expr.Ge("country", "E"),
			expr.And(expr.Ge("id", 100), expr.Lt("id", 150)),
			expr.Eq("id", 12345678901), // no row: every fragment pruned
		}, []bool{true, true, true, true}},
	} {
		t.Run(c.spec, func(t *testing.T) {
			store := newLocalStore(t)
			tbl, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, c.spec)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for e := range int64(3) {
				rec := makeEvents(idRange(e*100, 100), 6, e)
				if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			m := mustLatest(t, tbl)
			for i, f := range c.filters {
				want := matchingIDs(t, tbl, m, f)
				got, st := scanIDs(t, tbl, m, f)
				if !slices.Equal(got, want) {
					t.Fatalf("filter %s: read %d rows %v, the filter matches %d %v", f, len(got), shortList(got), len(want), shortList(want))
				}
				if c.prunes[i] != (st.FragmentsPruned > 0) {
					t.Fatalf("filter %s: %d of %d fragments pruned by partition, want pruning %v", f, st.FragmentsPruned, len(m.Fragments), c.prunes[i])
				}
				if st.FragmentsPruned+st.FragmentsRead+st.FragmentsSkipped != len(m.Fragments) {
					t.Fatalf("filter %s: counters %+v do not add up to %d fragments", f, st, len(m.Fragments))
				}
				t.Logf("%s: %d rows, %d/%d fragments pruned", f, len(got), st.FragmentsPruned, len(m.Fragments))
			}
		})
	}
}

// TestCompactionStaysWithinPartitions: compaction of many small epochs of several partitions
// groups fragments of one partition only, and leaves one fragment per partition.
func TestCompactionStaysWithinPartitions(t *testing.T) {
	store := newLocalStore(t)
	tbl, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, `[{"column":"country"}]`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for e := range int64(8) {
		rec := makeEvents(idRange(e*20, 20), 6, e)
		if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	m := mustLatest(t, tbl)
	for _, o := range []CompactOptions{{}, {MergeRatio: 4}} {
		plan := tbl.PlanCompaction(m, o)
		if len(plan.Groups) == 0 {
			t.Fatalf("ratio %v: nothing planned for %d small fragments", o.MergeRatio, len(m.Fragments))
		}
		for _, g := range plan.Groups {
			for _, f := range g[1:] {
				if !f.Partition.Equal(g[0].Partition) {
					t.Fatalf("ratio %v: a group merges partitions %s and %s", o.MergeRatio, g[0].Partition, f.Partition)
				}
			}
		}
	}
	rep, err := tbl.Compact(t.Context(), CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m = mustLatest(t, tbl)
	if err := tbl.CheckFragmentPartitions(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if len(m.Fragments) != 5 || m.Rows() != 160 {
		t.Fatalf("compaction (%+v) left %d fragments, %d rows; want one per country (5), 160 rows", rep, len(m.Fragments), m.Rows())
	}
}

// TestDeleteWholePartitionsIsMetadataOnly: a delete whose filter covers whole partitions drops
// their fragments in one commit and writes no deletion file; a partial one masks rows as before;
// a delete prepared before a fragment was dropped still lands.
func TestDeleteWholePartitionsIsMetadataOnly(t *testing.T) {
	for _, c := range []struct {
		spec  string
		where *expr.Predicate
	}{
		{`[{"column":"ts","transform":"day"}]`, expr.And(expr.Ge("ts", "2024-01-01T00:00:00Z"), expr.Lt("ts", "2024-01-02T00:00:00Z"))},
		{`[{"column":"ts","transform":"hour"}]`, expr.Or(expr.Lt("ts", "2024-01-01T02:00:00Z"), expr.Ge("ts", "2024-01-01T04:00:00Z"))},
		{`[{"column":"d","transform":"month"}]`, expr.Lt("d", "2024-01-01")},
		{`[{"column":"country"},{"column":"id","transform":"truncate[50]"}]`, expr.And(expr.In("country", "NL", "DE"), expr.Ge("id", 100))},
		{`[{"column":"country"}]`, expr.IsNull("country")},
	} {
		t.Run(c.spec, func(t *testing.T) {
			store := newLocalStore(t)
			tbl, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, c.spec)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for e := range int64(2) {
				rec := makeEvents(idRange(e*100, 100), 6, e)
				if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			before := mustLatest(t, tbl)
			deleted := matchingIDs(t, tbl, before, c.where)
			survivors := slices.DeleteFunc(scanAllIDs(t, tbl), func(id int64) bool { _, found := slices.BinarySearch(deleted, id); return found })
			// A partial delete prepared now, committed after the whole-partition one.
			partial, err := tbl.PrepareDelete(t.Context(), before, expr.In("id", 1, 2, 3, 150, 151))
			if err != nil {
				t.Fatal(err)
			}
			res, err := tbl.Delete(t.Context(), c.where, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Committed || res.Manifest.Version != before.Version+1 {
				t.Fatalf("delete: %+v", res)
			}
			if files := listKeys(t, tbl, "_deletions/"); len(files) != 0 {
				t.Fatalf("a delete of whole partitions wrote deletion files %v", files)
			}
			if len(res.Manifest.Fragments) >= len(before.Fragments) {
				t.Fatalf("no fragment dropped: %d before, %d after", len(before.Fragments), len(res.Manifest.Fragments))
			}
			if got := scanAllIDs(t, tbl); !slices.Equal(got, survivors) {
				t.Fatalf("after the delete %d rows, want the %d the filter does not match", len(got), len(survivors))
			}
			if _, err := tbl.Commit(t.Context(), partial); err != nil {
				t.Fatalf("a delete prepared before the fragments were dropped: %v", err)
			}
			want := slices.DeleteFunc(slices.Clone(survivors), func(id int64) bool { return slices.Contains([]int64{1, 2, 3, 150, 151}, id) })
			if got := scanAllIDs(t, tbl); !slices.Equal(got, want) {
				t.Fatalf("after both deletes %d rows, want %d", len(got), len(want))
			}
		})
	}
}

func scanAllIDs(t testing.TB, tbl *Table) []int64 {
	t.Helper()
	ids, _ := scanIDs(t, tbl, mustLatest(t, tbl), nil)
	return ids
}

// TestPartitionPruningAtRangeBounds: a range filter whose bound is a partition's first instant
// excludes that partition (the bound is compared with the partition's source range, not with
// the transformed literal), so a one-day filter reads that day's fragments only.
func TestPartitionPruningAtRangeBounds(t *testing.T) {
	tbl, err := Create(t.Context(), newLocalStore(t), "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, `[{"column":"ts","transform":"day"}]`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for d := range int64(3) {
		rec := eventsOnDay(d*1000, 1000, d) // day d, and late rows of day d-1
		if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	m := mustLatest(t, tbl)
	for _, f := range []*expr.Predicate{
		expr.And(expr.Ge("ts", "2024-01-02T00:00:00Z"), expr.Lt("ts", "2024-01-03T00:00:00Z")),
		expr.And(expr.Gt("ts", "2024-01-01T23:59:59.999999Z"), expr.Le("ts", "2024-01-02T23:59:59.999999Z")),
	} {
		got, st := scanIDs(t, tbl, m, f)
		if want := matchingIDs(t, tbl, m, f); !slices.Equal(got, want) {
			t.Fatalf("%s: %d rows, want %d", f, len(got), len(want))
		}
		if st.FragmentsRead != 2 || st.FragmentsPruned != len(m.Fragments)-2 {
			t.Fatalf("%s: %+v of %d fragments, want the day's 2 read", f, st, len(m.Fragments))
		}
	}
}
