package engine

import (
	"fmt"
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
				t.Log(fmt.Sprintf("%s: %d rows, %d/%d fragments pruned", f, len(got), st.FragmentsPruned, len(m.Fragments)))
			}
		})
	}
}
