package flightsvc_test

// Decimal types that cannot exist (a precision outside its width's range, a negative scale, a
// scale above the precision) are refused with UNSUPPORTED_TYPE at every entry: a schema-only
// create, a create with rows, an append with merge_schema, on the direct route and on MemWAL.
// Nothing is created or committed, and the server keeps serving.

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// impossibleDecimals are decimal types no table may hold.
func impossibleDecimals() []arrow.DataType {
	return []arrow.DataType{
		&arrow.Decimal128Type{Precision: 0, Scale: 0},
		&arrow.Decimal128Type{Precision: 39, Scale: 2},
		&arrow.Decimal128Type{Precision: 10, Scale: 11},
		&arrow.Decimal128Type{Precision: 10, Scale: -2},
		&arrow.Decimal256Type{Precision: 0, Scale: 0},
		&arrow.Decimal256Type{Precision: 77, Scale: 0},
		&arrow.Decimal256Type{Precision: 40, Scale: 41},
		&arrow.Decimal256Type{Precision: 40, Scale: -1},
		&arrow.Decimal32Type{Precision: 10, Scale: 0},
		&arrow.Decimal64Type{Precision: 19, Scale: 0},
	}
}

// decimalBatch is one row: id, and d (of type dt) holding the unscaled value 1.
func decimalBatch(dt arrow.DataType, id int64) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "d", Type: dt, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(id)
	b.Field(1).AppendNull()
	return b.NewRecordBatch()
}

func TestImpossibleDecimalsRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	valid := &arrow.Decimal128Type{Precision: 38, Scale: 38}
	for _, route := range []string{"direct", "memwal"} {
		create := any(true)
		if route == "memwal" {
			create = cmd{"memwal": cmd{"shards": 1}}
		}
		// The table the merge_schema appends go to: id and a valid decimal.
		base := "base_" + route
		rec := decimalBatch(valid, 1)
		a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": base, "query_id": "q", "epoch_id": 0, "create": create}), rec.Schema(), rec)
		rec.Release()
		if err != nil {
			t.Fatalf("%s: a decimal128(38, 38) table: %v", route, err)
		}
		wantAck(t, a, "committed", 0)
		for i, dt := range impossibleDecimals() {
			name := fmt.Sprintf("%s %s", route, dt)
			table := fmt.Sprintf("dec_%s_%d", route, i)
			rec := decimalBatch(dt, 2)
			// A schema-only create, then a create with a row.
			_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 0, "create": create}), rec.Schema())
			wantReason(t, err, codes.InvalidArgument, "UNSUPPORTED_TYPE")
			wantCode(t, err, codes.InvalidArgument, `"d"`, "precision")
			_, err = s.put(testCtx(t), cmdDesc(t, cmd{"table": table, "query_id": "q", "epoch_id": 1, "create": create}), rec.Schema(), rec)
			wantReason(t, err, codes.InvalidArgument, "UNSUPPORTED_TYPE")
			if _, err := s.action(testCtx(t), "table_stats", cmd{"table": table}); codeOf(err) != codes.NotFound {
				t.Fatalf("%s: table %s after the refusals: %v, want NotFound", name, table, err)
			}
			// An append that would change d's type (merge_schema).
			_, err = s.put(testCtx(t), cmdDesc(t, cmd{"table": base, "query_id": "m", "epoch_id": int64(i), "merge_schema": true}), rec.Schema(), rec)
			wantReason(t, err, codes.InvalidArgument, "UNSUPPORTED_TYPE")
			rec.Release()
		}
		// Nothing of the refused appends landed, and the table still takes writes.
		rec = decimalBatch(valid, 3)
		_, err = s.put(testCtx(t), cmdDesc(t, cmd{"table": base, "query_id": "q", "epoch_id": 1}), rec.Schema(), rec)
		rec.Release()
		if err != nil {
			t.Fatalf("%s: a good append after the refusals: %v", route, err)
		}
		if st := s.stats(t, base); st.Rows != 2 {
			t.Fatalf("%s: table %s holds %d rows, want 2", route, base, st.Rows)
		}
	}
}
