package iceberg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/internal/pythontest"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestIcebergRustReadsNestedColumns: iceberg-rust (pyiceberg-core's DataFusion provider) reads
// a table's struct and list columns exactly: the files carry field ids and the table publishes
// no name mapping, which iceberg-rust would apply over the ids and read them as null.
func TestIcebergRustReadsNestedColumns(t *testing.T) {
	py := pythontest.Interpreter(t, "pyiceberg_core.datafusion", "datafusion")
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true})
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: st, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	}, nil)
	tb, err := engine.Create(ctx, store, "t", sc, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, bytes.NewReader([]byte(
		`[{"id": 1, "s": {"a": 10, "b": "x"}, "l": [1, 2]}, {"id": 2, "s": {"a": 20, "b": null}, "l": []}, {"id": 3, "s": null, "l": null}]`)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	rep := mustPublish(t, ctx, tb)
	out, err := exec.CommandContext(ctx, py, "testdata/read_iceberg_rust.py", rep.MetadataFile).CombinedOutput()
	if err != nil {
		t.Fatalf("read_iceberg_rust.py: %v\n%s", err, out)
	}
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_iceberg_rust.py printed %q: %v", out, err)
	}
	want := []map[string]any{
		{"id": 1.0, "s": map[string]any{"a": 10.0, "b": "x"}, "l": []any{1.0, 2.0}},
		{"id": 2.0, "s": map[string]any{"a": 20.0, "b": nil}, "l": []any{}},
		{"id": 3.0, "s": nil, "l": nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("iceberg-rust reads %v; want %v", got, want)
	}
}

// TestIcebergRustReadsFilesLackingColumns: iceberg-rust matches a data file's columns to the
// table's by field id when a file holds only some of the table's columns (an append that left a
// nullable column out). Its Parquet reader takes each field's metadata from the Arrow schema
// stored in the file (ARROW:schema), so that schema carries the field ids: without them
// iceberg-rust falls back to matching by position (field id N is column N) and reads the
// list as the struct.
func TestIcebergRustReadsFilesLackingColumns(t *testing.T) {
	py := pythontest.Interpreter(t, "pyiceberg_core.datafusion", "datafusion")
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true})
	full := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: st, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	}, nil)
	tb, err := engine.Create(ctx, store, "t", full, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
	if err != nil {
		t.Fatal(err)
	}
	lacking := arrow.NewSchema([]arrow.Field{full.Field(0), full.Field(2)}, nil)
	for _, b := range []struct {
		sc   *arrow.Schema
		rows string
	}{
		{full, `[{"id": 1, "s": {"a": 10}, "l": [1, 2]}]`},
		{lacking, `[{"id": 2, "l": [3]}, {"id": 3, "l": null}]`},
	} {
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, b.sc, bytes.NewReader([]byte(b.rows)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	rep := mustPublish(t, ctx, tb)
	out, err := exec.CommandContext(ctx, py, "testdata/read_iceberg_rust.py", rep.MetadataFile).CombinedOutput()
	if err != nil {
		t.Fatalf("read_iceberg_rust.py: %v\n%s", err, out)
	}
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_iceberg_rust.py printed %q: %v", out, err)
	}
	want := []map[string]any{
		{"id": 1.0, "s": map[string]any{"a": 10.0}, "l": []any{1.0, 2.0}},
		{"id": 2.0, "s": nil, "l": []any{3.0}},
		{"id": 3.0, "s": nil, "l": nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("iceberg-rust reads %v; want %v", got, want)
	}
}
