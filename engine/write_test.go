package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// fillBatch builds n rows of sc with values derived from the row number. It knows the flat types
// the schema tests use.
func fillBatch(t testing.TB, sc *arrow.Schema, n int) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range n {
		for c, f := range sc.Fields() {
			switch fb := b.Field(c).(type) {
			case *array.Int64Builder:
				fb.Append(int64(i))
			case *array.Int32Builder:
				fb.Append(int32(i))
			case *array.Int16Builder:
				fb.Append(int16(i))
			case *array.Float64Builder:
				fb.Append(float64(i) / 2)
			case *array.StringBuilder:
				fb.Append(rowName(int64(i)))
			default:
				t.Fatalf("fillBatch: no filler for column %s %s", f.Name, f.Type)
			}
		}
	}
	return b.NewRecordBatch()
}

func TestAppendSchemaMismatch(t *testing.T) {
	field := func(name string, typ arrow.DataType, nullable bool) arrow.Field {
		return arrow.Field{Name: name, Type: typ, Nullable: nullable}
	}
	id := field("id", arrow.PrimitiveTypes.Int64, false)
	name := field("name", arrow.BinaryTypes.String, true)
	score := field("score", arrow.PrimitiveTypes.Float64, true)
	cases := []struct {
		name   string
		fields []arrow.Field
		want   []string // substrings the error must contain
	}{
		{"wrong-type", []arrow.Field{id, name, field("score", arrow.PrimitiveTypes.Int32, true)}, []string{`"score"`, "float64", "int32"}},
		// A missing nullable column is an older schema of the table and lands (schema_evolve_test.go).
		{"missing-required-column", []arrow.Field{name, score}, []string{`"id"`, "int64"}},
		{"extra-column", []arrow.Field{id, name, score, field("extra", arrow.PrimitiveTypes.Int16, true)}, []string{`"extra"`, "int16"}},
		{"renamed-column", []arrow.Field{id, name, field("points", arrow.PrimitiveTypes.Float64, true)}, []string{`"score"`, "float64"}},
		{"case-differs", []arrow.Field{field("ID", arrow.PrimitiveTypes.Int64, false), name, score}, []string{`"id"`, "int64"}},
		{"nullable-into-not-null", []arrow.Field{field("id", arrow.PrimitiveTypes.Int64, true), name, score}, []string{`"id"`, "int64", "nullable"}},
		{"duplicate-column", []arrow.Field{id, id, name, score}, []string{`"id"`}},
	}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "schema", &Options{TargetRowsPerFragment: 4})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				rec := fillBatch(t, arrow.NewSchema(tc.fields, nil), 3)
				defer rec.Release()
				_, appendErr := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
				_, overwriteErr := tbl.Overwrite(ctx, rec.Schema(), []arrow.RecordBatch{rec}, nil)
				for what, err := range map[string]error{"append": appendErr, "overwrite": overwriteErr} {
					if !errors.Is(err, arrowschema.ErrSchemaMismatch) {
						t.Fatalf("%s: got %v, want arrowschema.ErrSchemaMismatch", what, err)
					}
					for _, s := range tc.want {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("%s: error %q does not mention %s", what, err, s)
						}
					}
				}
			})
		}

		// A later batch of one append with another schema aborts the whole append, including the
		// files its earlier batches already wrote.
		t.Run("schema-changes-mid-append", func(t *testing.T) {
			good := makeRows(idRange(0, 10)) // more rows than a fragment: files get written
			defer good.Release()
			bad := fillBatch(t, arrow.NewSchema([]arrow.Field{id, name}, nil), 3)
			defer bad.Release()
			_, err := tbl.Append(ctx, []arrow.RecordBatch{good, bad}, nil)
			if !errors.Is(err, arrowschema.ErrSchemaMismatch) || !strings.Contains(err.Error(), `"score"`) {
				t.Fatalf("append with a changed schema: got %v, want arrowschema.ErrSchemaMismatch naming score", err)
			}
		})

		requireDenseVersions(t, tbl, 1)
		if keys := listKeys(t, tbl, dataDir); len(keys) != 0 {
			t.Fatalf("refused appends left %d data files: %v", len(keys), keys)
		}
		if keys := listKeys(t, tbl, transactionsDir); len(keys) != 1 {
			t.Fatalf("refused appends left transaction files: %v", keys)
		}
	})
}

// TestAppendColumnOrder appends batches whose columns come in another order than the table's:
// they are matched by name. Data that is non-nullable where the table allows nulls fits too.
func TestAppendColumnOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := createRowsTable(t, store, "order", nil)
		reordered := arrow.NewSchema([]arrow.Field{
			{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			{Name: "name", Type: arrow.BinaryTypes.String}, // narrower than the table: fine
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, reordered)
		defer b.Release()
		ids := idRange(500, 20)
		for _, id := range ids {
			if rowScoreNull(id) {
				b.Field(0).AppendNull()
			} else {
				b.Field(0).(*array.Float64Builder).Append(rowScore(id))
			}
			b.Field(1).(*array.StringBuilder).Append(rowName(id))
			b.Field(2).(*array.Int64Builder).Append(id)
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		normal := makeRows(idRange(0, 5))
		defer normal.Release()
		if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatalf("append of reordered columns: %v", err)
		}
		if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{normal}, nil); err != nil {
			t.Fatal(err)
		}
		// scanRows checks the schema is the table's and every value sits in its own column.
		got := scanRows(t, tbl, 0)
		requireSameIDs(t, "reordered append", got, append(ids, idRange(0, 5)...))
		if !arrowschema.EqualIgnoringFieldIDs(mustLatest(t, tbl).ArrowSchema(), rowsSchema) {
			t.Fatal("a reordered append changed the table schema")
		}
	})
}

// TestFragmentsAndProjection checks that appends split into fragments of TargetRowsPerFragment
// rows (files carrying row groups of MaxRowGroupRows), keep row order, and that a scan projects
// the asked columns in the asked order.
func TestFragmentsAndProjection(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "frags", &Options{TargetRowsPerFragment: 100, MaxRowGroupRows: 30})
		a := makeRows(idRange(0, 250))
		defer a.Release()
		b := makeRows(idRange(250, 60))
		defer b.Release()
		m, err := tbl.Append(ctx, []arrow.RecordBatch{a, b}, nil)
		if err != nil {
			t.Fatal(err)
		}
		requireFragments(t, tbl, m.Fragments, []int64{100, 100, 100, 10}, 1)
		m = appendIDs(t, tbl, idRange(310, 100), nil) // exactly one full fragment
		requireFragments(t, tbl, m.Fragments[4:], []int64{100}, 5)
		if m.Rows() != 410 || m.NextFragmentID != 6 {
			t.Fatalf("latest: %d rows, next fragment id %d", m.Rows(), m.NextFragmentID)
		}
		// Fragments are read in order, so rows come back in insertion order.
		if got := scanRows(t, tbl, 0); !equalInt64s(got, idRange(0, 410)) {
			t.Fatalf("scan order: %s", firstDiff(got, idRange(0, 410)))
		}

		// Projection, in the asked order, with a small batch size.
		proj := []string{"score", "id"}
		s, err := tbl.Scan(ctx, ScanOptions{Columns: proj, BatchSize: 7})
		if err != nil {
			t.Fatal(err)
		}
		wantSchema := arrow.NewSchema([]arrow.Field{rowsSchema.Field(2), rowsSchema.Field(0)}, nil)
		if !arrowschema.EqualIgnoringFieldIDs(s.Schema(), wantSchema) {
			t.Fatalf("projected schema %s, want %s", s.Schema(), wantSchema)
		}
		var n int64
		for s.Next() {
			r := s.RecordBatch()
			if !arrowschema.EqualIgnoringFieldIDs(r.Schema(), wantSchema) || r.NumCols() != 2 || r.NumRows() > 7 {
				t.Fatalf("projected batch: %d columns, %d rows, schema %s", r.NumCols(), r.NumRows(), r.Schema())
			}
			scores, ids := r.Column(0).(*array.Float64), r.Column(1).(*array.Int64)
			for i := 0; i < int(r.NumRows()); i++ {
				id := ids.Value(i)
				if id != n || scores.IsNull(i) != rowScoreNull(id) || (!scores.IsNull(i) && scores.Value(i) != rowScore(id)) {
					t.Fatalf("projected row %d: id %d score %v", n, id, scores.Value(i))
				}
				n++
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Release()
		if n != 410 {
			t.Fatalf("projected scan returned %d rows, want 410", n)
		}

		recs, err := tbl.ReadAll(ctx, ScanOptions{Columns: []string{"name"}, Version: 2})
		if err != nil {
			t.Fatal(err)
		}
		n = 0
		for _, r := range recs {
			if r.NumCols() != 1 || r.Schema().Field(0).Name != "name" {
				t.Fatalf("scan of name only: schema %s", r.Schema())
			}
			names := r.Column(0).(*array.String)
			for i := 0; i < names.Len(); i++ {
				if names.Value(i) != rowName(n) {
					t.Fatalf("name of row %d: %q", n, names.Value(i))
				}
				n++
			}
			r.Release()
		}
		if n != 310 {
			t.Fatalf("scan of version 2 returned %d rows, want 310", n)
		}

		if _, err := tbl.Scan(ctx, ScanOptions{Columns: []string{"id", "nope"}}); !errors.Is(err, arrowschema.ErrSchemaMismatch) ||
			!strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("scan of an unknown column: got %v, want arrowschema.ErrSchemaMismatch naming it", err)
		}
	})
}

func equalInt64s(a, b []int64) bool {
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

// requireFragments checks fragment ids, row counts, file sizes and row-group sizes.
func requireFragments(t testing.TB, tbl *Table, frags []Fragment, rows []int64, firstID uint64) {
	t.Helper()
	if len(frags) != len(rows) {
		t.Fatalf("%d fragments, want %d", len(frags), len(rows))
	}
	for i, f := range frags {
		if f.ID != firstID+uint64(i) || f.PhysicalRows != rows[i] || len(f.Files) != 1 {
			t.Fatalf("fragment %d: %+v, want id %d with %d rows in one file", i, f, firstID+uint64(i), rows[i])
		}
		df := f.Files[0]
		if !strings.HasPrefix(df.Path, dataDir) || !strings.HasSuffix(df.Path, ".parquet") {
			t.Fatalf("data file path %q is not data/<uuid>.parquet", df.Path)
		}
		data, err := tbl.Store().Get(t.Context(), tbl.key(df.Path))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) != df.SizeBytes {
			t.Fatalf("data file %s is %d bytes, manifest says %d", df.Path, len(data), df.SizeBytes)
		}
		pr, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if pr.NumRows() != rows[i] {
			t.Fatalf("data file %s holds %d rows, want %d", df.Path, pr.NumRows(), rows[i])
		}
		for g := 0; g < pr.NumRowGroups(); g++ {
			if n := pr.MetaData().RowGroup(g).NumRows(); n > tbl.opts.MaxRowGroupRows {
				t.Fatalf("row group %d of %s has %d rows, more than %d", g, df.Path, n, tbl.opts.MaxRowGroupRows)
			}
		}
		pr.Close()
	}
}

// TestScanDuplicateColumn asks for one column twice. Either answer is fine (an error naming the
// column, or the column twice); a panic or a batch that does not match its schema is not.
func TestScanDuplicateColumn(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := createRowsTable(t, store, "dup", nil)
		appendIDs(t, tbl, idRange(0, 10), nil)
		recs, err := readAllNoPanic(t, tbl, ScanOptions{Columns: []string{"id", "id"}})
		if err != nil {
			if !strings.Contains(err.Error(), `"id"`) {
				t.Fatalf("scan of id twice: error %q does not name the column", err)
			}
			return
		}
		for _, r := range recs {
			if r.NumCols() != 2 {
				t.Fatalf("scan of id twice returned %d columns", r.NumCols())
			}
			r.Release()
		}
	})
}

func readAllNoPanic(t testing.TB, tbl *Table, o ScanOptions) (recs []arrow.RecordBatch, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			err = nil
			t.Fatalf("scan %+v panicked: %v", o, p)
		}
	}()
	return tbl.ReadAll(t.Context(), o)
}

// TestTypesRoundTrip appends a batch of many Arrow types, nested ones included, and reads it
// back whole and projected: every value and type must survive the trip through Parquet.
func TestTypesRoundTrip(t *testing.T) {
	mem := memory.DefaultAllocator
	utc := "UTC"
	fields := []arrow.Field{
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 4}, Nullable: true},
		{Name: "d32", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts_ms", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: utc}, Nullable: true},
		{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: utc}, Nullable: true},
		{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true},
		{Name: "t64", Type: arrow.FixedWidthTypes.Time64us, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "pt", Type: arrow.StructOf(
			arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		), Nullable: true},
		{Name: "last", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}
	sc := arrow.NewSchema(fields, nil)
	const n = 50
	// Build every column from JSON, the least ambiguous way to spell values of each type.
	cols := make([]arrow.Array, len(fields))
	for c, f := range fields {
		var vals []string
		for i := range n {
			if f.Nullable && i%5 == 4 {
				vals = append(vals, "null")
				continue
			}
			vals = append(vals, jsonValue(f.Name, i))
		}
		arr, _, err := array.FromJSON(mem, f.Type, strings.NewReader("["+strings.Join(vals, ",")+"]"))
		if err != nil {
			t.Fatalf("build column %s: %v", f.Name, err)
		}
		defer arr.Release()
		cols[c] = arr
	}
	rec := array.NewRecordBatch(sc, cols, n)
	defer rec.Release()

	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl, err := Create(ctx, store, "types", sc, CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !arrowschema.EqualIgnoringFieldIDs(mustLatest(t, tbl).ArrowSchema(), sc) {
			t.Fatal("the manifest does not keep the schema as created")
		}
		if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		for _, proj := range [][]string{nil, {"last"}, {"pt", "i64"}, {"last", "tags", "s"}} {
			t.Run(fmt.Sprintf("columns=%v", proj), func(t *testing.T) {
				recs, err := readAllNoPanic(t, tbl, ScanOptions{Columns: proj})
				if err != nil {
					t.Fatal(err)
				}
				want := proj
				if want == nil {
					for _, f := range fields {
						want = append(want, f.Name)
					}
				}
				var rows int64
				for _, r := range recs {
					if int(r.NumCols()) != len(want) {
						t.Fatalf("got %d columns, want %d", r.NumCols(), len(want))
					}
					for c, name := range want {
						orig := rec.Column(sc.FieldIndices(name)[0])
						exp := array.NewSlice(orig, rows, rows+r.NumRows())
						if r.Schema().Field(c).Name != name || !array.Equal(exp, r.Column(c)) {
							t.Errorf("column %d (%s %s): got %s %v", c, name, orig.DataType(), r.Schema().Field(c).Type, r.Column(c))
						}
						exp.Release()
					}
					rows += r.NumRows()
					r.Release()
				}
				if rows != n {
					t.Fatalf("read %d rows, want %d", rows, n)
				}
			})
		}
	})
}

// jsonValue is row i of column name, spelled as array.FromJSON reads it.
func jsonValue(name string, i int) string {
	switch name {
	case "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "last":
		return fmt.Sprint(i)
	case "f32", "f64":
		return fmt.Sprint(float64(i) + 0.25)
	case "b":
		return fmt.Sprint(i%2 == 0)
	case "s", "ls":
		return fmt.Sprintf("%q", fmt.Sprintf("v%d", i))
	case "bin":
		return `"AQID"` // base64 of 1,2,3
	case "fsb":
		return `"AQIDBA=="` // base64 of 1,2,3,4
	case "d32":
		return fmt.Sprint(19000 + i)
	case "ts_ms", "ts_us":
		return fmt.Sprintf("%q", fmt.Sprintf("2024-05-06T07:08:%02d.123Z", i%60))
	case "ts_ns": // no time zone
		return fmt.Sprintf("%q", fmt.Sprintf("2024-05-06 07:08:%02d.123456789", i%60))
	case "t64":
		return fmt.Sprintf("%q", fmt.Sprintf("12:34:%02d.5", i%60))
	case "dec":
		return fmt.Sprintf("%q", fmt.Sprintf("%d.25", i))
	case "tags":
		return fmt.Sprintf(`["a%d","b"]`, i)
	case "pt":
		return fmt.Sprintf(`{"x": %d, "y": 1.5}`, i)
	}
	panic("no value for column " + name)
}
