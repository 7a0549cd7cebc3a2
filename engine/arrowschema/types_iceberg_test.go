package arrowschema

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestStoreBatchKeepsValues converts the types the policy stores as plainer ones (so that every
// stored type has an Iceberg equivalent) and checks what is kept, value by value: unsigned
// extremes, half floats, whole days, seconds and milliseconds exactly, nanoseconds truncated
// toward the past, zones as UTC instants, decimal256 within 38 digits.
func TestStoreBatchKeepsValues(t *testing.T) {
	for _, c := range []struct {
		name     string
		from     arrow.DataType
		in, want string
		wantType arrow.DataType
	}{
		{"uint8", arrow.PrimitiveTypes.Uint8, `[0,null,255]`, `[0,null,255]`, arrow.PrimitiveTypes.Int32},
		{"uint16", arrow.PrimitiveTypes.Uint16, `[0,null,65535]`, `[0,null,65535]`, arrow.PrimitiveTypes.Int32},
		{"uint32", arrow.PrimitiveTypes.Uint32, `[0,null,4294967295]`, `[0,null,4294967295]`, arrow.PrimitiveTypes.Int64},
		{"float16", arrow.FixedWidthTypes.Float16, `[1.5,null,-65504,0.0009765625]`, `[1.5,null,-65504,0.0009765625]`, arrow.PrimitiveTypes.Float32},
		{"date64", arrow.FixedWidthTypes.Date64, `[-62135596800000,null,253402214400000]`, `[-719162,null,2932896]`, arrow.FixedWidthTypes.Date32},
		{"timestamp_s", &arrow.TimestampType{Unit: arrow.Second}, `[-62135596800,null,253402300799]`, `[-62135596800000000,null,253402300799000000]`, &arrow.TimestampType{Unit: arrow.Microsecond}},
		{"timestamp_ms_zone", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}, `[1,null,-1]`, `[1000,null,-1000]`, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{"timestamp_ns", &arrow.TimestampType{Unit: arrow.Nanosecond}, `[1999,null,-1,-1000,9223372036854775807]`, `[1,null,-1,-1,9223372036854775]`, &arrow.TimestampType{Unit: arrow.Microsecond}},
		{"timestamp_ns_utc", &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, `[-9223372036854775808]`, `[-9223372036854776]`, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{"time32_ms", arrow.FixedWidthTypes.Time32ms, `[0,null,86399999]`, `[0,null,86399999000]`, arrow.FixedWidthTypes.Time64us},
		{"time64_ns", arrow.FixedWidthTypes.Time64ns, `[999,null,86399999999999]`, `[0,null,86399999999]`, arrow.FixedWidthTypes.Time64us},
		{"decimal256", &arrow.Decimal256Type{Precision: 38, Scale: 10}, `["9999999999999999999999999999.9999999999",null,"-9999999999999999999999999999.9999999999"]`,
			`["9999999999999999999999999999.9999999999",null,"-9999999999999999999999999999.9999999999"]`, &arrow.Decimal128Type{Precision: 38, Scale: 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := StoredType("c", c.from)
			if err != nil || !arrow.TypeEqual(st, c.wantType) {
				t.Fatalf("StoredType(%s) = %v, %v; want %s", c.from, st, err, c.wantType)
			}
			got := convertOne(t, c.from, c.in, st)
			defer got.Release()
			want, _, err := array.FromJSON(memory.DefaultAllocator, st, strings.NewReader(c.want))
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			if !array.Equal(got, want) {
				t.Fatalf("%s %s as %s = %v; want %v", c.from, c.in, st, got, want)
			}
		})
	}
}

// TestStoreBatchRefusesLoss: values a conversion cannot keep are refused with an error naming
// the column, never stored changed.
func TestStoreBatchRefusesLoss(t *testing.T) {
	for _, c := range []struct {
		name string
		from arrow.DataType
		in   string
	}{
		{"timestamp_s_past_microseconds", &arrow.TimestampType{Unit: arrow.Second}, `[0,9223372036855]`},
		{"timestamp_ms_before_microseconds", &arrow.TimestampType{Unit: arrow.Millisecond}, `[-9223372036854776]`},
		{"date64_not_whole_day", arrow.FixedWidthTypes.Date64, `[86400001]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := StoredType("c", c.from)
			if err != nil {
				t.Fatal(err)
			}
			arr, _, err := array.FromJSON(memory.DefaultAllocator, c.from, strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			defer arr.Release()
			rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "c", Type: c.from, Nullable: true}}, nil), []arrow.Array{arr}, int64(arr.Len()))
			defer rec.Release()
			stored := arrow.NewSchema([]arrow.Field{{Name: "c", Type: st, Nullable: true}}, nil)
			out, err := StoreBatch(t.Context(), memory.DefaultAllocator, stored, rec, 0)
			if err == nil {
				out.Release()
				t.Fatalf("StoreBatch(%s %s) succeeded; want a refusal", c.from, c.in)
			}
			if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), `column "c"`) {
				t.Fatalf("StoreBatch(%s %s) = %v; want ErrSchemaMismatch naming the column", c.from, c.in, err)
			}
		})
	}
}

// TestStoredTypeRefusesWithoutIceberg: uint64 and decimal256 beyond 38 digits have no Iceberg
// type; they are refused naming the column, inside a struct too.
func TestStoredTypeRefusesWithoutIceberg(t *testing.T) {
	for _, dt := range []arrow.DataType{
		arrow.PrimitiveTypes.Uint64,
		&arrow.Decimal256Type{Precision: 39, Scale: 0},
	} {
		_, err := StoredType("c", arrow.StructOf(arrow.Field{Name: "x", Type: dt, Nullable: true}))
		if !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), `column "c.x"`) {
			t.Errorf("StoredType(struct<x: %s>) = %v; want ErrUnsupportedType naming c.x", dt, err)
		}
	}
	if IcebergType(arrow.UINT64) != "-" || IcebergType(arrow.Type(math.MaxInt8)) != "-" {
		t.Error("a refused or unknown id has an Iceberg type")
	}
}

// convertOne converts the JSON rows in of type from to stored type st with StoreBatch.
func convertOne(t *testing.T, from arrow.DataType, in string, st arrow.DataType) arrow.Array {
	t.Helper()
	arr, _, err := array.FromJSON(memory.DefaultAllocator, from, strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	defer arr.Release()
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "c", Type: from, Nullable: true}}, nil), []arrow.Array{arr}, int64(arr.Len()))
	defer rec.Release()
	out, err := StoreBatch(t.Context(), memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "c", Type: st, Nullable: true}}, nil), rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	col := out.Column(0)
	col.Retain()
	return col
}
