package engine

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// TestFilteredScan checks that a filtered scan returns exactly the rows a full scan followed by
// the filter returns, and that the fragments' column ranges and the Parquet statistics let it
// skip the fragments and row groups no row of which can match (ScanStats counts them).
//
// The table: three fragments of 1,000 rows (ids 0..2999, in order), row groups of 100 rows, so
// each fragment has 10 row groups with disjoint id ranges; ids 1500..1509 are deleted; val is
// "a" for fragment 0, "b" for 1, "c" for 2.
func TestFilteredScan(t *testing.T) {
	storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
		tbl := hCreate(t, store, "prune", false, &Options{MaxRowGroupRows: 100})
		for i, val := range []string{"a", "b", "c"} {
			hAppend(t, tbl, hRange(int64(i)*1000, 1000), val)
		}
		if _, err := tbl.Delete(t.Context(), expr.And(expr.Ge("id", 1500), expr.Lt("id", 1510)), nil); err != nil {
			t.Fatal(err)
		}
		m := mustLatest(t, tbl)
		ids := func(p func(id int64) bool) []int64 {
			var out []int64
			for id := int64(0); id < 3000; id++ {
				if (id < 1500 || id >= 1510) && p(id) {
					out = append(out, id)
				}
			}
			return out
		}
		frag := func(i int) []uint64 { return []uint64{m.Fragments[i].ID} }
		cases := []struct {
			name      string
			filter    *expr.Predicate
			fragments []uint64
			exclude   *rowset.Set
			want      []int64
			stats     ScanStats
		}{
			{name: "id >= 2500", filter: expr.Ge("id", 2500), want: ids(func(id int64) bool { return id >= 2500 }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 5, RowGroupsSkipped: 5}},
			{name: "id = 1234", filter: expr.Eq("id", 1234), want: []int64{1234},
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 1, RowGroupsSkipped: 9}},
			{name: "in", filter: expr.Or(expr.Lt("id", 100), expr.In("id", 2950, 5000)), want: ids(func(id int64) bool { return id < 100 || id == 2950 }),
				stats: ScanStats{FragmentsRead: 2, FragmentsSkipped: 1, FragmentsUnopened: 1, RowGroupsRead: 2, RowGroupsSkipped: 18}},
			{name: "two runs of one fragment", filter: expr.And(expr.Lt("id", 1000), expr.Or(expr.Lt("id", 100), expr.Ge("id", 850))), want: ids(func(id int64) bool { return id < 100 || (id >= 850 && id < 1000) }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 3, RowGroupsSkipped: 7}},
			{name: "deleted rows in a kept row group", filter: expr.And(expr.Ge("id", 1490), expr.Lt("id", 1520)), want: ids(func(id int64) bool { return id >= 1490 && id < 1520 }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 2, RowGroupsSkipped: 8}},
			{name: "string column", filter: expr.Eq("val", "b"), want: ids(func(id int64) bool { return id >= 1000 && id < 2000 }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 10}},
			{name: "not", filter: expr.Not(expr.Lt("id", 2900)), want: ids(func(id int64) bool { return id >= 2900 }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 1, RowGroupsSkipped: 9}},
			{name: "is_null never prunes a column with nulls", filter: expr.IsNull("score"), want: ids(func(id int64) bool { return hScoreNull(id) }),
				stats: ScanStats{FragmentsRead: 3, RowGroupsRead: 30}},
			{name: "float column: fragment ranges prune, row groups do not", filter: expr.Gt("score", 2990.0), want: ids(func(id int64) bool { return id > 2990 && !hScoreNull(id) }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 2, FragmentsUnopened: 2, RowGroupsRead: 10}},
			{name: "fragments", fragments: frag(1), want: ids(func(id int64) bool { return id >= 1000 && id < 2000 }),
				stats: ScanStats{FragmentsRead: 1, RowGroupsRead: 10}},
			{name: "fragments and filter", fragments: append(frag(2), frag(0)...), filter: expr.Lt("id", 50), want: ids(func(id int64) bool { return id < 50 }),
				stats: ScanStats{FragmentsRead: 1, FragmentsSkipped: 1, FragmentsUnopened: 1, RowGroupsRead: 1, RowGroupsSkipped: 9}},
			{name: "exclude", fragments: frag(0), exclude: rowset.New(rowset.Address(m.Fragments[0].ID, 0), rowset.Address(m.Fragments[0].ID, 999)),
				want: ids(func(id int64) bool { return id > 0 && id < 999 }), stats: ScanStats{FragmentsRead: 1, RowGroupsRead: 10}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s, err := tbl.ScanManifest(t.Context(), m, ScanOptions{Columns: []string{"id"}, Filter: tc.filter, Fragments: tc.fragments, Exclude: tc.exclude})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Release()
				var got []int64
				for s.Next() {
					rec := s.RecordBatch()
					if rec.NumCols() != 1 || rec.Schema().Field(0).Name != "id" {
						t.Fatalf("batch schema %s, want only id", rec.Schema())
					}
					got = append(got, rec.Column(0).(*array.Int64).Int64Values()...)
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Errorf("got %d rows %v, want %d %v", len(got), shortList(got), len(tc.want), shortList(tc.want))
				}
				if s.Stats() != tc.stats {
					t.Errorf("stats %+v, want %+v", s.Stats(), tc.stats)
				}
			})
		}
	})
}

// TestFilteredScanErrors: a filter that does not fit the schema, and a fragment the version does
// not have, fail the scan before it reads anything, with the sentinel callers map.
func TestFilteredScanErrors(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := hCreate(t, store, "prune_errors", false, nil)
	hAppend(t, tbl, hRange(0, 10), "a")
	m := mustLatest(t, tbl)
	for _, tc := range []struct {
		name string
		o    ScanOptions
		want error
	}{
		{"unknown column", ScanOptions{Filter: expr.Eq("nope", 1)}, expr.ErrInvalidPredicate},
		{"wrong literal", ScanOptions{Filter: expr.Eq("id", "x")}, expr.ErrInvalidPredicate},
		{"unknown fragment", ScanOptions{Fragments: []uint64{m.Fragments[0].ID + 100}}, ErrFragmentNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tbl.ScanManifest(t.Context(), m, tc.o)
			if err == nil {
				s.Release()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// TestFilteredScanByTime: a time-ordered stream, one day per epoch, unpartitioned. A filter on one
// day opens only that day's fragment (its timestamp, time, float, decimal and boolean columns
// each prune by their ranges), returns exactly the rows the filter selects, and a version written
// before fragments kept ranges (no Stats) reads the same rows, opening every fragment.
func TestFilteredScanByTime(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "tod", Type: arrow.FixedWidthTypes.Time64us},
		{Name: "temp", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "price", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}},
		{Name: "late", Type: arrow.FixedWidthTypes.Boolean},
	}, nil)
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := Create(t.Context(), store, "events", sc, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const days, perDay = 10, 240
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for d := range days {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		for r := range perDay {
			at := base.AddDate(0, 0, d).Add(time.Duration(r) * 6 * time.Minute)
			b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(at.UnixMicro()))
			b.Field(1).(*array.Time64Builder).Append(arrow.Time64(at.Sub(at.Truncate(24 * time.Hour)).Microseconds()))
			if r%7 == 0 {
				b.Field(2).AppendNull()
			} else {
				b.Field(2).(*array.Float64Builder).Append(float64(d*100 + r%50))
			}
			b.Field(3).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(d*10_000 + r)))
			b.Field(4).(*array.BooleanBuilder).Append(d == days-1)
		}
		rec := b.NewRecordBatch()
		b.Release()
		if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	m := mustLatest(t, tbl)
	legacy := *m
	legacy.Fragments = slices.Clone(m.Fragments)
	for i := range legacy.Fragments {
		legacy.Fragments[i].Stats = nil
	}
	day3 := base.AddDate(0, 0, 3)
	cases := []struct {
		name     string
		filter   *expr.Predicate
		wantRows int64
		opened   int
	}{
		{"one day by timestamp", expr.And(expr.Ge("ts", day3.Format(time.RFC3339)), expr.Lt("ts", day3.AddDate(0, 0, 1).Format(time.RFC3339))), perDay, 1},
		{"float", expr.Gt("temp", 850.0), perDay - 35, 1},            // day 8 holds 800..849, day 9 900..949 (35 nulls)
		{"decimal", expr.Eq("price", json.Number("30001.07")), 0, 0}, // no such price: day 3 holds 300.00..302.39
		{"decimal present", expr.Eq("price", json.Number("300.07")), 1, 1},
		{"boolean", expr.Eq("late", true), perDay, 1},
		{"time of day never prunes a whole day", expr.Lt("tod", int64(3_600_000_000)), days * 10, days},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []*Manifest{m, &legacy} {
				s, err := tbl.ScanManifest(t.Context(), v, ScanOptions{Filter: tc.filter})
				if err != nil {
					t.Fatal(err)
				}
				var rows int64
				for s.Next() {
					rows += s.RecordBatch().NumRows()
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				st := s.Stats()
				s.Release()
				if rows != tc.wantRows {
					t.Errorf("%d rows, want %d", rows, tc.wantRows)
				}
				if v == m && st.FragmentsUnopened != days-tc.opened {
					t.Errorf("%d fragments unopened, want %d (stats %+v)", st.FragmentsUnopened, days-tc.opened, st)
				}
				if v == &legacy && st.FragmentsUnopened != 0 {
					t.Errorf("a version without ranges: %d fragments unopened", st.FragmentsUnopened)
				}
			}
		})
	}
}
