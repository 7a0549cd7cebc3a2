package engine

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestDeleteByPredicate(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "del", false, &Options{TargetRowsPerFragment: 40})
		hAppend(t, tbl, hRange(0, 100), "a") // fragments of 40, 40, 20
		v2 := hLatest(t, tbl).Version

		// Rows 10..29 with a score (ids divisible by 5 have none) plus id 95.
		where := expr.Or(expr.And(expr.Ge("id", 10), expr.Lt("id", 30), expr.IsNotNull("score")), expr.Eq("id", 95))
		res, err := tbl.Delete(ctx, where, map[string]string{"who": "test"})
		if err != nil {
			t.Fatal(err)
		}
		want := hWant(hRange(0, 100), "a")
		deleted := 0
		for id := int64(10); id < 30; id++ {
			if !hScoreNull(id) {
				delete(want, id)
				deleted++
			}
		}
		deleted++ // 95 has a null score but matches the second branch
		delete(want, 95)
		if !res.Committed || res.RowsDeleted != int64(deleted) || res.Manifest.Version != v2+1 {
			t.Fatalf("delete result %+v, want %d rows at version %d", res, deleted, v2+1)
		}
		hRequireRows(t, "after delete", hRead(t, tbl, 0), want)
		if got := hLatest(t, tbl).Rows(); got != int64(len(want)) {
			t.Fatalf("manifest rows %d, want %d", got, len(want))
		}
		// Time travel: the version before still has every row.
		hRequireRows(t, "version before the delete", hRead(t, tbl, v2), hWant(hRange(0, 100), "a"))

		// Deletion files: one per touched fragment, named <fragment>-<version>-<uuid>.bin.
		m := hLatest(t, tbl)
		files := 0
		for _, f := range m.Fragments {
			if f.DeletionFile == "" {
				continue
			}
			files++
			frag, v, ok := parseDeletionKey(f.DeletionFile)
			if !ok || frag != f.ID || v != m.Version {
				t.Fatalf("deletion file %q of fragment %d at version %d", f.DeletionFile, f.ID, m.Version)
			}
		}
		if files != 2 {
			t.Fatalf("%d fragments have deletion files, want 2 (ids 10-29 and 95)", files)
		}
		txn, err := tbl.ReadTransaction(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if txn.Operation != OpDelete || txn.Deleted.Len() != int64(deleted) || txn.Properties["who"] != "test" {
			t.Fatalf("transaction %s with %d affected rows, props %v", txn.Operation, txn.Deleted.Len(), txn.Properties)
		}

		// A second delete in the same fragment merges into a new file; nothing matched commits
		// nothing.
		if _, err := tbl.Delete(ctx, expr.In("id", 0, 1), nil); err != nil {
			t.Fatal(err)
		}
		delete(want, 0)
		delete(want, 1)
		hRequireRows(t, "after the second delete", hRead(t, tbl, 0), want)
		res, err = tbl.Delete(ctx, expr.Eq("id", 12345), nil)
		if err != nil || res.Committed || res.RowsDeleted != 0 {
			t.Fatalf("empty delete: %+v %v", res, err)
		}
		if _, err := tbl.Delete(ctx, expr.Eq("nope", 1), nil); !errors.Is(err, arrowschema.ErrSchemaMismatch) {
			t.Fatalf("delete on an unknown column: %v", err)
		}
		if _, err := tbl.Delete(ctx, nil, nil); err == nil {
			t.Fatal("delete without a predicate succeeded")
		}

		// Delete every row of the first fragment: the scan skips it.
		if _, err := tbl.Delete(ctx, expr.Lt("id", 40), nil); err != nil {
			t.Fatal(err)
		}
		for id := int64(0); id < 40; id++ {
			delete(want, id)
		}
		hRequireRows(t, "after emptying a fragment", hRead(t, tbl, 0), want)
	})
}

func TestDeleteRowsByAddress(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "rows", false, &Options{TargetRowsPerFragment: 10})
		hAppend(t, tbl, hRange(0, 25), "a")
		s, err := tbl.Scan(ctx, ScanOptions{Columns: []string{"id"}, WithRowAddresses: true})
		if err != nil {
			t.Fatal(err)
		}
		rows := &rowset.Set{}
		want := hWant(hRange(0, 25), "a")
		for s.Next() {
			ids := s.RecordBatch().Column(0)
			for i, a := range s.RowAddresses() {
				id := ids.(interface{ Value(int) int64 }).Value(i)
				if id%3 == 0 {
					rows.Add(a)
					delete(want, id)
				}
			}
		}
		s.Release()
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		res, err := tbl.DeleteRows(ctx, rows, nil)
		if err != nil || res.RowsDeleted != rows.Len() {
			t.Fatalf("delete rows: %+v %v", res, err)
		}
		hRequireRows(t, "after delete by address", hRead(t, tbl, 0), want)
		// Addresses of rows already deleted are dropped; addresses outside the table fail.
		res, err = tbl.DeleteRows(ctx, rows, nil)
		if err != nil || res.Committed {
			t.Fatalf("deleting deleted rows again: %+v %v", res, err)
		}
		if _, err := tbl.DeleteRows(ctx, rowset.New(rowset.Address(99, 0)), nil); err == nil {
			t.Fatal("delete of a fragment that does not exist succeeded")
		}
		if _, err := tbl.DeleteRows(ctx, rowset.New(rowset.Address(1, 10)), nil); err == nil {
			t.Fatal("delete past a fragment's end succeeded")
		}
	})
}

func TestUpdate(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "upd", true, &Options{TargetRowsPerFragment: 30})
		hAppend(t, tbl, hRange(0, 60), "a")
		res, err := tbl.Update(ctx, UpdateSpec{Where: expr.And(expr.Ge("id", 20), expr.Lt("id", 40)), Set: map[string]any{"val": "b"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Committed || res.RowsUpdated != 20 {
			t.Fatalf("update result %+v", res)
		}
		want := hWant(hRange(0, 60), "a")
		maps.Copy(want, hWant(hRange(20, 20), "b"))
		hRequireRows(t, "after update", hRead(t, tbl, 0), want)
		m := hLatest(t, tbl)
		if m.Transaction.Operation != OpUpdate || m.Rows() != 60 {
			t.Fatalf("latest %s with %d rows", m.Transaction.Operation, m.Rows())
		}
		// Setting null, then errors: the key, an unknown column, a bad literal, null in a
		// non-nullable column.
		if _, err := tbl.Update(ctx, UpdateSpec{Where: expr.Eq("id", 59), Set: map[string]any{"val": nil}}, nil); err != nil {
			t.Fatal(err)
		}
		got := hRead(t, tbl, 0)
		if v, ok := got[59]; !ok || v != "" {
			t.Fatalf("row 59 after setting val null: %q %v", v, ok)
		}
		for _, u := range []UpdateSpec{
			{Where: expr.Eq("id", 1), Set: map[string]any{"id": 5}},
			{Where: expr.Eq("id", 1), Set: map[string]any{"nope": 5}},
			{Where: expr.Eq("id", 1), Set: map[string]any{"score": "x"}},
			{Where: expr.Eq("id", 1), Set: map[string]any{}},
			{Set: map[string]any{"val": "x"}},
		} {
			if _, err := tbl.Update(ctx, u, nil); err == nil {
				t.Fatalf("update %+v succeeded", u)
			}
		}
		nonNull, err := Create(ctx, store, "upd-nn", arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int32}}, nil), CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nonNull.Update(ctx, UpdateSpec{Where: expr.Eq("k", 1), Set: map[string]any{"k": nil}}, nil); !errors.Is(err, arrowschema.ErrSchemaMismatch) {
			t.Fatalf("setting a non-nullable column to null: %v", err)
		}
	})
}

func TestUpsert(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "ups", true, nil)
		hAppend(t, tbl, hRange(0, 10), "a")
		// Keys 5..14: 5..9 replace, 10..14 insert; key 7 twice in the input, the last wins.
		r1 := hBatch(hRange(5, 10), "b")
		r2 := hBatch([]int64{7}, "c")
		defer r1.Release()
		defer r2.Release()
		props := EpochProperties(epochid.ID{QueryID: "q", EpochID: 1}, nil)
		res, err := tbl.Upsert(ctx, []arrow.RecordBatch{r1, r2}, props)
		if err != nil {
			t.Fatal(err)
		}
		if res.RowsUpdated != 5 || res.RowsInserted != 5 {
			t.Fatalf("upsert result %+v, want 5 updated and 5 inserted", res)
		}
		want := hWant(hRange(0, 5), "a")
		maps.Copy(want, hWant(hRange(5, 10), "b"))
		want[7] = "c"
		hRequireRows(t, "after upsert", hRead(t, tbl, 0), want)
		m := hLatest(t, tbl)
		if m.Transaction.Operation != OpUpsert || m.Streams["q"].Epoch != 1 {
			t.Fatalf("latest: %s, stream watermark %+v", m.Transaction.Operation, m.Streams)
		}
		// The epoch is committed: an upsert replaying it fails like a replayed append.
		if _, err := tbl.Upsert(ctx, []arrow.RecordBatch{r2}, props); !errors.Is(err, epochid.ErrCommitted) {
			t.Fatalf("replayed upsert epoch: %v", err)
		}
		hRequireRows(t, "after the refused replay", hRead(t, tbl, 0), want)

		noKey := hCreate(t, store, "ups-nokey", false, nil)
		if _, err := noKey.Upsert(ctx, []arrow.RecordBatch{r1}, nil); err == nil || !strings.Contains(err.Error(), "primary key") {
			t.Fatalf("upsert without a primary key: %v", err)
		}
	})
}

// TestDeleteAndCompactEveryType deletes rows from, updates and compacts a table holding every
// column type the engine stores, and checks each surviving row column by column: the deletion
// filter (a take over each column) and the rewrite must handle nested and fixed-width types.
func TestDeleteAndCompactEveryType(t *testing.T) {
	fields := []arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 4}, Nullable: true},
		{Name: "d32", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "pt", Type: arrow.StructOf(
			arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		), Nullable: true},
	}
	sc := arrow.NewSchema(fields, nil)
	value := func(name string, i int) string {
		switch name {
		case "k", "i8", "i64":
			return fmt.Sprint(i % 100)
		case "f32":
			return fmt.Sprintf("%d.5", i)
		case "b":
			return fmt.Sprint(i%2 == 0)
		case "s", "ls":
			return fmt.Sprintf("%q", fmt.Sprintf("v%d", i))
		case "bin":
			return fmt.Sprintf("%q", base64.StdEncoding.EncodeToString([]byte{byte(i), 1, 2}))
		case "fsb":
			return fmt.Sprintf("%q", base64.StdEncoding.EncodeToString([]byte{byte(i), 0, 0, 7}))
		case "d32":
			return fmt.Sprintf("%q", time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("2006-01-02"))
		case "ts":
			return fmt.Sprintf("%q", time.Date(2024, 1, 1, 0, 0, i, 0, time.UTC).Format(time.RFC3339))
		case "dec":
			return fmt.Sprintf("\"%d.%02d\"", i, i%100)
		case "tags":
			return fmt.Sprintf(`["t%d", null, "u"]`, i)
		case "pt":
			return fmt.Sprintf(`{"x": %d.25, "y": %d}`, i, -i)
		}
		panic(name)
	}
	const n = 120
	cols := make([]arrow.Array, len(fields))
	for c, f := range fields {
		var vals []string
		for i := range n {
			if f.Nullable && i%7 == 3 {
				vals = append(vals, "null")
			} else if f.Name == "k" {
				vals = append(vals, fmt.Sprint(i))
			} else {
				vals = append(vals, value(f.Name, i))
			}
		}
		arr, _, err := array.FromJSON(memory.DefaultAllocator, f.Type, strings.NewReader("["+strings.Join(vals, ",")+"]"))
		if err != nil {
			t.Fatalf("column %s: %v", f.Name, err)
		}
		defer arr.Release()
		cols[c] = arr
	}
	rec := array.NewRecordBatch(sc, cols, n)
	defer rec.Release()
	// rowStrings renders each row of a batch by its key.
	rowStrings := func(recs ...arrow.RecordBatch) map[int64]string {
		out := map[int64]string{}
		for _, r := range recs {
			for i := 0; i < int(r.NumRows()); i++ {
				var parts []string
				for c := range r.NumCols() {
					parts = append(parts, r.Column(int(c)).ValueStr(i))
				}
				out[r.Column(0).(*array.Int64).Value(i)] = strings.Join(parts, "|")
			}
		}
		return out
	}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl, err := Create(ctx, store, "types", sc, CreateOptions{PrimaryKey: []string{"k", "fsb", "dec"}}, &Options{TargetRowsPerFragment: 50})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		want := rowStrings(rec)
		// Scattered deletions: every third row, and rows with a null string.
		if _, err := tbl.Delete(ctx, expr.Or(expr.In("i8", 0, 3, 6, 9, 12, 15, 18, 21, 24, 27), expr.IsNull("s")), nil); err != nil {
			t.Fatal(err)
		}
		for k := range want {
			if k%100%3 == 0 && k%100 <= 27 || k%7 == 3 {
				delete(want, k)
			}
		}
		read := func(what string) {
			t.Helper()
			recs, err := tbl.ReadAll(ctx, ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := rowStrings(recs...)
			for _, r := range recs {
				r.Release()
			}
			if !maps.Equal(got, want) {
				t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
			}
		}
		read("after delete")
		if _, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 1000}); err != nil {
			t.Fatal(err)
		}
		read("after compaction")
		// Upsert by the composite key, including the fixed-size binary and decimal columns.
		up := rec.NewSlice(102, 108) // rows without nulls: key columns must be non-null
		defer up.Release()
		res, err := tbl.Upsert(ctx, []arrow.RecordBatch{up}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wantUpdated int64
		for k := int64(102); k < 108; k++ {
			if _, ok := want[k]; ok {
				wantUpdated++
			}
		}
		maps.Copy(want, rowStrings(up))
		if res.RowsUpdated+res.RowsInserted != 6 || res.RowsUpdated != wantUpdated {
			t.Fatalf("upsert %+v, want %d updated", res, wantUpdated)
		}
		read("after upsert")
	})
}

// TestDeleteOutOfRangeLiteral: a delete whose integer literal lies outside the column's range
// (-2^63-1 for an int64) is refused and removes nothing, where rounding through a float64 would
// have made it -2^63 and removed that row; 2^53+1 written as a decimal removes exactly that row.
func TestDeleteOutOfRangeLiteral(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl, err := Create(ctx, store, "lit", hSchema, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hAppend(t, tbl, []int64{math.MinInt64, 1 << 53, 1<<53 + 1, math.MaxInt64}, "a")
	before := hLatest(t, tbl).Version
	for _, lit := range []string{"-9223372036854775809", "9223372036854775808", "-9.3e18"} {
		p, err := expr.ParsePredicate([]byte(`{"op": "=", "column": "id", "value": ` + lit + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Delete(ctx, p, nil); !errors.Is(err, expr.ErrInvalidPredicate) {
			t.Errorf("delete id = %s: %v, want ErrInvalidPredicate", lit, err)
		}
	}
	if v := hLatest(t, tbl).Version; v != before {
		t.Fatalf("refused deletes moved the table from version %d to %d", before, v)
	}
	p, err := expr.ParseText("id = 9007199254740993.0")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := tbl.Delete(ctx, p, nil); err != nil || res.RowsDeleted != 1 {
		t.Fatalf("delete id = 9007199254740993.0: %+v, %v; want one row", res, err)
	}
	got := hRead(t, tbl, 0)
	if _, ok := got[1<<53+1]; ok || len(got) != 3 {
		t.Fatalf("rows after the delete: %v", got)
	}
}
