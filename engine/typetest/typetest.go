// Package typetest builds sample columns of every Arrow type for the type-policy tests of engine,
// streaming and flightsvc. Only tests import it.
package typetest

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Sample is one nullable column type and its rows as Arrow JSON, with at least one null row.
type Sample struct {
	Name string
	Type arrow.DataType
	JSON string
}

// Rows returns the sample's rows as an array of type dt (the sample's type, or the type it is
// stored as: converted types hold the same values, so the same JSON builds both).
func (s Sample) Rows(dt arrow.DataType) (arrow.Array, error) {
	arr, _, err := array.FromJSON(memory.DefaultAllocator, dt, strings.NewReader(s.JSON))
	if err != nil {
		return nil, fmt.Errorf("sample %s as %s: %w", s.Name, dt, err)
	}
	return arr, nil
}

// Len is the number of rows of every sample.
const Len = 3

var i64 = arrow.PrimitiveTypes.Int64

// ByID returns a sample of every Arrow type id, one for each; an id arrow-go adds later is
// missing, which the tests that range over ids report.
func ByID() map[arrow.Type]Sample {
	out := map[arrow.Type]Sample{}
	for _, s := range []Sample{
		{"null", arrow.Null, `[null,null,null]`},
		{"bool", arrow.FixedWidthTypes.Boolean, `[true,null,false]`},
		{"uint8", arrow.PrimitiveTypes.Uint8, `[1,null,255]`},
		{"int8", arrow.PrimitiveTypes.Int8, `[-1,null,127]`},
		{"uint16", arrow.PrimitiveTypes.Uint16, `[1,null,65535]`},
		{"int16", arrow.PrimitiveTypes.Int16, `[-1,null,32767]`},
		{"uint32", arrow.PrimitiveTypes.Uint32, `[1,null,4294967295]`},
		{"int32", arrow.PrimitiveTypes.Int32, `[-1,null,2147483647]`},
		{"uint64", arrow.PrimitiveTypes.Uint64, `[1,null,18446744073709551615]`},
		{"int64", i64, `[-1,null,9223372036854775807]`},
		{"float16", arrow.FixedWidthTypes.Float16, `[1.5,null,-2]`},
		{"float32", arrow.PrimitiveTypes.Float32, `[1.5,null,-2]`},
		{"float64", arrow.PrimitiveTypes.Float64, `[1.5,null,-2]`},
		{"utf8", arrow.BinaryTypes.String, `["a",null,"ünïcode"]`},
		{"binary", arrow.BinaryTypes.Binary, `["YWJj",null,""]`},
		{"fixed_size_binary", &arrow.FixedSizeBinaryType{ByteWidth: 3}, `["YWJj",null,"ZGVm"]`},
		{"date32", arrow.FixedWidthTypes.Date32, `[19000,null,0]`},
		{"date64", arrow.FixedWidthTypes.Date64, `["1970-01-02",null,"1970-01-01"]`},
		{"timestamp_s", &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, `["1970-01-01T00:00:01Z",null,"2023-11-14T22:13:20Z"]`},
		{"time32_s", arrow.FixedWidthTypes.Time32s, `["00:00:01",null,"23:59:59"]`},
		{"time64_ns", arrow.FixedWidthTypes.Time64ns, `["00:00:00.000001",null,"23:59:59.999999"]`},
		{"interval_months", arrow.FixedWidthTypes.MonthInterval, `[{"months":1},null,{"months":-2}]`},
		{"interval_day_time", arrow.FixedWidthTypes.DayTimeInterval, `[{"days":1,"milliseconds":2},null,{"days":3,"milliseconds":4}]`},
		{"decimal128", &arrow.Decimal128Type{Precision: 30, Scale: 2}, `["1.23",null,"-4.56"]`},
		{"decimal256", &arrow.Decimal256Type{Precision: 38, Scale: 2}, `["1.23",null,"-4.56"]`},
		{"list", arrow.ListOf(i64), `[[1,null],null,[]]`},
		{"struct", arrow.StructOf(arrow.Field{Name: "a", Type: i64, Nullable: true}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}), `[{"a":1,"b":"x"},null,{"a":null,"b":null}]`},
		{"sparse_union", arrow.SparseUnionOf([]arrow.Field{{Name: "i", Type: i64, Nullable: true}}, []arrow.UnionTypeCode{0}), `[[0,1],[0,null],[0,3]]`},
		{"dense_union", arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: i64, Nullable: true}}, []arrow.UnionTypeCode{0}), `[[0,1],[0,null],[0,3]]`},
		{"dictionary", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, `["a",null,"a"]`},
		{"map", arrow.MapOf(arrow.BinaryTypes.String, i64), `[[{"key":"a","value":1},{"key":"b","value":null}],null,[]]`},
		{"extension_uuid", extensions.NewUUIDType(), `["00000000-0000-0000-0000-000000000001",null,"00000000-0000-0000-0000-000000000002"]`},
		{"fixed_size_list", arrow.FixedSizeListOf(2, i64), `[[1,2],null,[3,null]]`},
		{"duration", arrow.FixedWidthTypes.Duration_ms, `[1,null,2]`},
		{"large_utf8", arrow.BinaryTypes.LargeString, `["a",null,"b"]`},
		{"large_binary", arrow.BinaryTypes.LargeBinary, `["YWJj",null,""]`},
		{"large_list", arrow.LargeListOf(i64), `[[1,null],null,[]]`},
		{"interval_month_day_nano", arrow.FixedWidthTypes.MonthDayNanoInterval, `[{"months":1,"days":2,"nanoseconds":3},null,{"months":4,"days":5,"nanoseconds":6}]`},
		{"run_end_encoded", arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), `["a",null,"a"]`},
		{"utf8_view", arrow.BinaryTypes.StringView, `["a",null,"a string longer than twelve bytes"]`},
		{"binary_view", arrow.BinaryTypes.BinaryView, `["YWJj",null,"bG9uZ2VyIHRoYW4gdHdlbHZlIGJ5dGVz"]`},
		{"list_view", arrow.ListViewOf(i64), `[[1,null],null,[]]`},
		{"large_list_view", arrow.LargeListViewOf(i64), `[[1,null],null,[]]`},
		{"decimal32", &arrow.Decimal32Type{Precision: 7, Scale: 2}, `["1.23",null,"-4.56"]`},
		{"decimal64", &arrow.Decimal64Type{Precision: 15, Scale: 2}, `["1.23",null,"-4.56"]`},
	} {
		out[s.Type.ID()] = s
	}
	return out
}

// Nested returns samples of types inside types, which the policy decides child by child.
func Nested() []Sample {
	return []Sample{
		{"struct_empty", arrow.StructOf(), `[{},null,{}]`},
		{"list_of_utf8_view", arrow.ListOf(arrow.BinaryTypes.StringView), `[["a",null],null,[]]`},
		{"large_list_of_large_list", arrow.LargeListOf(arrow.LargeListOf(i64)), `[[[1],null],null,[]]`},
		{"list_of_list", arrow.ListOf(arrow.ListOf(i64)), `[[[1],null],null,[]]`},
		{"struct_of_large_list_and_dictionary", arrow.StructOf(
			arrow.Field{Name: "l", Type: arrow.LargeListOf(i64), Nullable: true},
			arrow.Field{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}, Nullable: true}),
			`[{"l":[1],"d":"x"},null,{"l":null,"d":null}]`},
		{"list_of_fixed_size_list", arrow.ListOf(arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32)), `[[[1,2],null],null,[]]`},
		{"map_of_list_view", arrow.MapOf(arrow.BinaryTypes.String, arrow.ListViewOf(i64)), `[[{"key":"a","value":[1]}],null,[]]`},
		{"list_of_union", arrow.ListOf(arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: i64, Nullable: true}}, []arrow.UnionTypeCode{0})), `[[[0,1]],null,[]]`},
		{"extension_bool8", extensions.NewBool8Type(), `[true,null,false]`},
		{"timestamp_ms_tz", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}, `["1970-01-01T00:00:00.001Z",null,"1970-01-01T00:00:00.002Z"]`},
	}
}
