package wal

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestOpenIPCRefusesImpossibleDecimal: a stored stream whose schema holds a decimal no table can
// hold (decimal256 precision 77, decimal128 scale above its precision) is ErrCorrupt at replay,
// before any row of it is read; a valid decimal opens.
func TestOpenIPCRefusesImpossibleDecimal(t *testing.T) {
	for _, tc := range []struct {
		dt   arrow.DataType
		fail bool
	}{
		{&arrow.Decimal256Type{Precision: 77}, true},
		{&arrow.Decimal128Type{Precision: 5, Scale: 6}, true},
		{&arrow.Decimal128Type{Precision: 5, Scale: -1}, true},
		{&arrow.Decimal128Type{Precision: 38, Scale: 10}, false},
	} {
		sc := arrow.NewSchema([]arrow.Field{{Name: "d", Type: tc.dt, Nullable: true}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		b.Field(0).AppendNull()
		rec := b.NewRecordBatch()
		b.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := OpenIPC("entry", buf.Bytes(), memory.DefaultAllocator)
		if !tc.fail {
			if err != nil {
				t.Fatalf("%s: %v", tc.dt, err)
			}
			r.Release()
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: OpenIPC: %v, want ErrCorrupt", tc.dt, err)
		}
	}
}

// TestReplayRefusesDataTheSchemaDoesNotDescribe: a WAL entry whose batch holds a null in a
// column (or a struct's field) it declares not null is ErrCorrupt at replay, naming the column,
// instead of handing the fold a batch it would store as another value (0 for the null) or could
// not read back; the same entry without the null replays.
func TestReplayRefusesDataTheSchemaDoesNotDescribe(t *testing.T) {
	i64 := arrow.PrimitiveTypes.Int64
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: i64},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "child", Type: i64}), Nullable: true},
	}, nil)
	for _, tc := range []struct {
		name, rows, path string
	}{
		{"fits", `[{"id": 1, "s": {"child": 1}}, {"id": 2, "s": null}]`, ""},
		{"null in a required column", `[{"id": 1, "s": null}, {"id": null, "s": null}]`, `"id"`},
		{"null in a required struct field", `[{"id": 1, "s": {"child": null}}]`, `"s.child"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, bytes.NewReader([]byte(tc.rows)))
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			b, err := EncodeEntry(7, 1, sc, []Put{{Batches: []arrow.RecordBatch{rec}, Rows: rec.NumRows()}}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			e, err := DecodeEntry("wal/7", b, sc, memory.DefaultAllocator)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("an entry that fits its schema: %v", err)
				}
				e.Release()
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("DecodeEntry: %v, want ErrCorrupt naming %s", err, tc.path)
			}
		})
	}
}
