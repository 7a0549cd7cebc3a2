package iceberg_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
)

// TestPublishOmittedColumns: a data file of a batch that omitted a nullable column holds only
// the columns it carried; PyIceberg and Polars read the column as nulls in its rows, as
// flight-sink does.
func TestPublishOmittedColumns(t *testing.T) {
	py := python(t)
	for _, se := range storeKinds(t) {
		t.Run(se.name, func(t *testing.T) {
			ctx := context.Background()
			tb, err := engine.Create(ctx, se.store, "omitted", testSchema, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("a", 1, 2)}, nil); err != nil {
				t.Fatal(err)
			}
			in := arrow.NewSchema([]arrow.Field{testSchema.Field(0), testSchema.Field(2)}, nil) // no "name"
			b := array.NewRecordBuilder(memory.DefaultAllocator, in)
			b.Field(0).(*array.Int64Builder).AppendValues([]int64{3, 4}, nil)
			b.Field(1).(*array.Float64Builder).AppendValues([]float64{1.5, 2}, nil)
			rec := b.NewRecordBatch()
			b.Release()
			_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
			mustPublish(t, ctx, tb)
			verify(t, ctx, py, se, tb)
		})
	}
}

// TestPublishOmittedNestedColumns: a data file that lacks an optional map or list column (a
// batch that omitted it, or a file written before a schema merge added it) is published,
// though the column holds required fields (the map's keys, the list's elements); readers read
// the column as nulls in its rows.
func TestPublishOmittedNestedColumns(t *testing.T) {
	py := python(t)
	sc := arrow.NewSchema([]arrow.Field{
		testSchema.Field(0),
		{Name: "tags", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "points", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64), Nullable: true},
	}, nil)
	for _, se := range storeKinds(t) {
		t.Run(se.name, func(t *testing.T) {
			ctx := context.Background()
			tb, err := engine.Create(ctx, se.store, "omitted_nested", sc, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
			if err != nil {
				t.Fatal(err)
			}
			in := arrow.NewSchema([]arrow.Field{sc.Field(0)}, nil) // only "id"
			b := array.NewRecordBuilder(memory.DefaultAllocator, in)
			b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
			rec := b.NewRecordBatch()
			b.Release()
			_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
			mustPublish(t, ctx, tb)
			verify(t, ctx, py, se, tb)
		})
	}
}
