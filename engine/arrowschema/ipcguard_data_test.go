package arrowschema

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/bench/benchdata"
)

// TestCheckBatch: the cases the data check decides, each a batch built loose (every field
// nullable) and declared as the case's schema: refused with ErrDataMismatch naming the path, or
// accepted.
func TestCheckBatch(t *testing.T) {
	i64 := arrow.PrimitiveTypes.Int64
	req := func(name string, dt arrow.DataType) arrow.Field { return arrow.Field{Name: name, Type: dt} }
	opt := func(name string, dt arrow.DataType) arrow.Field {
		return arrow.Field{Name: name, Type: dt, Nullable: true}
	}
	for _, tc := range []struct {
		name  string
		field arrow.Field
		rows  string
		path  string // "": accepted
	}{
		{"required column, no null", req("a", i64), `[{"a": 1}]`, ""},
		{"required column, a null", req("a", i64), `[{"a": 1}, {"a": null}]`, `"a"`},
		{"required field of a null struct", opt("s", arrow.StructOf(req("c", i64))), `[{"s": null}, {"s": {"c": 2}}]`, ""},
		{"required field of a valid struct", opt("s", arrow.StructOf(req("c", i64))), `[{"s": {"c": null}}]`, `"s.c"`},
		{"required struct, a null", req("s", arrow.StructOf(opt("c", i64))), `[{"s": null}]`, `"s"`},
		{"required item of a null list", opt("l", arrow.ListOfField(req("item", i64))), `[{"l": null}, {"l": [1]}]`, ""},
		{"required item, a null", opt("l", arrow.ListOfField(req("item", i64))), `[{"l": [1, null]}]`, `"l.item"`},
		{"required item of a fixed-size list under a null", opt("l", arrow.FixedSizeListOfField(2, req("item", i64))), `[{"l": null}]`, ""},
		{"required item of a fixed-size list", opt("l", arrow.FixedSizeListOfField(2, req("item", i64))), `[{"l": [1, null]}]`, `"l.item"`},
		{"nested: a list of structs", opt("l", arrow.ListOf(arrow.StructOf(req("x", i64)))), `[{"l": [{"x": 1}, null]}, {"l": [{"x": null}]}]`, `"l.item.x"`},
		{"map value", opt("m", arrow.MapOfFields(req("key", arrow.BinaryTypes.String), req("value", i64))), `[{"m": [{"key": "k", "value": null}]}]`, `"m.entries.value"`},
		{"decimal within its precision", opt("d", &arrow.Decimal128Type{Precision: 4, Scale: 2}), `[{"d": "99.99"}, {"d": "-99.99"}, {"d": null}]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := arrow.NewSchema([]arrow.Field{tc.field}, nil)
			looseSc := arrow.NewSchema([]arrow.Field{{Name: tc.field.Name, Type: loose(tc.field.Type), Nullable: true}}, nil)
			built, _, err := array.RecordFromJSON(memory.DefaultAllocator, looseSc, strings.NewReader(tc.rows))
			if err != nil {
				t.Fatal(err)
			}
			defer built.Release()
			d := declare(built.Column(0).Data(), tc.field.Type)
			col := array.MakeFromData(d)
			d.Release()
			defer col.Release()
			rec := array.NewRecordBatch(sc, []arrow.Array{col}, built.NumRows())
			defer rec.Release()
			err = CheckBatch(rec)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDataMismatch) || !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("CheckBatch = %v, want ErrDataMismatch naming %s", err, tc.path)
			}
		})
	}
}

// TestStoreBatchAdoptsRequired: a batch declared nullable, admitted as a schema that requires
// the field (StoredSchemaFor adopted the table's), comes out declared so when it holds no null,
// and is refused naming the field when it holds one; converted types (a dictionary) too.
func TestStoreBatchAdoptsRequired(t *testing.T) {
	i64 := arrow.PrimitiveTypes.Int64
	table := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: i64},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "c", Type: arrow.BinaryTypes.String}), Nullable: true},
	}, nil)
	dict := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	in := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "c", Type: dict, Nullable: true}), Nullable: true},
		{Name: "id", Type: i64, Nullable: true},
	}, nil)
	stored, err := StoredSchemaFor(table, in)
	if err != nil {
		t.Fatal(err)
	}
	want := arrow.NewSchema([]arrow.Field{table.Field(1), table.Field(0)}, nil)
	if !stored.Equal(want) {
		t.Fatalf("StoredSchemaFor = %s, want %s", stored, want)
	}
	for _, tc := range []struct {
		rows, path string
	}{
		{`[{"s": {"c": "a"}, "id": 1}, {"s": null, "id": 2}]`, ""},
		{`[{"s": {"c": null}, "id": 1}]`, `"s.c"`},
		{`[{"s": null, "id": null}]`, `"id"`},
	} {
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, in, strings.NewReader(tc.rows))
		if err != nil {
			t.Fatal(err)
		}
		out, err := StoreBatch(context.Background(), nil, stored, rec, 0)
		rec.Release()
		if tc.path != "" {
			if !errors.Is(err, ErrDataMismatch) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("%s: StoreBatch = %v, want ErrDataMismatch naming %s", tc.rows, err, tc.path)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.rows, err)
		}
		if !out.Schema().Equal(stored) {
			t.Fatalf("admitted as %s, want %s", out.Schema(), stored)
		}
		out.Release()
	}
}

// BenchmarkCheckBatch: the data check of one 64K-row batch of the benchmarks' mixed schema (what
// every DoPut batch and every stored batch read back costs); bytes/s is the batch's size.
func BenchmarkCheckBatch(b *testing.B) {
	rec := benchdata.Batch(memory.DefaultAllocator, 0, 1<<16, 1)
	defer rec.Release()
	b.SetBytes(RecordBytes(rec))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckBatch(rec); err != nil {
			b.Fatal(err)
		}
	}
}
