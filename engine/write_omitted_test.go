package engine

import (
	"bytes"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

// A batch that omits nullable columns is written as a file of its own columns only: the columns
// it omits are not in the file, and read as nulls, with and without a filter on them, in a
// projection that names them, and through a compaction that merges the file with full ones.
func TestOmittedColumnsAreNotWritten(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "omit", nil)
		appendIDs(t, tbl, idRange(0, 10), nil) // every column
		// Only "score" and "id", in another order than the table's.
		in := arrow.NewSchema([]arrow.Field{{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, {Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, in)
		for id := int64(10); id < 15; id++ {
			b.Field(0).(*array.Float64Builder).Append(float64(id))
			b.Field(1).(*array.Int64Builder).Append(id)
		}
		rec := b.NewRecordBatch()
		b.Release()
		m, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		frag := m.Fragments[len(m.Fragments)-1]
		body, err := store.Get(ctx, tbl.key(frag.Files[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		pr, err := file.NewParquetReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var cols []string
		for i := 0; i < pr.MetaData().Schema.NumColumns(); i++ {
			cols = append(cols, pr.MetaData().Schema.Column(i).Name())
		}
		pr.Close()
		if !slices.Equal(cols, []string{"id", "score"}) {
			t.Fatalf("the file of a batch of id and score holds columns %v", cols)
		}

		check := func(when string, o ScanOptions, wantIDs []int64) {
			t.Helper()
			recs, err := tbl.ReadAll(ctx, o)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			var ids []int64
			for _, r := range recs {
				id := r.Column(r.Schema().FieldIndices("id")[0]).(*array.Int64)
				var names *array.String
				if js := r.Schema().FieldIndices("name"); len(js) > 0 {
					names = r.Column(js[0]).(*array.String)
				}
				for i := 0; i < int(r.NumRows()); i++ {
					ids = append(ids, id.Value(i))
					if names != nil && (id.Value(i) >= 10) != names.IsNull(i) {
						t.Fatalf("%s: row %d name null %v", when, id.Value(i), names.IsNull(i))
					}
				}
				r.Release()
			}
			slices.Sort(ids)
			requireSameIDs(t, when, ids, wantIDs)
		}
		all := idRange(0, 15)
		check("full scan", ScanOptions{}, all)
		check("projection of the omitted column", ScanOptions{Columns: []string{"name", "id"}}, all)
		check("filter on the omitted column", ScanOptions{Filter: expr.IsNull("name")}, idRange(10, 5))
		check("filter on a written column", ScanOptions{Filter: expr.Ge("score", 12.0)}, idRange(12, 3))
		if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
			t.Fatal(err)
		}
		if n := len(mustLatest(t, tbl).Fragments); n != 1 {
			t.Fatalf("%d fragments after compaction, want 1", n)
		}
		check("after compaction", ScanOptions{}, all)
	})
}
