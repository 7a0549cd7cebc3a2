package arrowschema

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestCastMatchesArrow: every conversion castArray makes gives what arrow-go's safe cast gives,
// value for value and null for null, and a value the target cannot hold exactly is an error in
// both; a conversion castArray does not make is an error.
func TestCastMatchesArrow(t *testing.T) {
	ts := func(u arrow.TimeUnit) arrow.DataType { return &arrow.TimestampType{Unit: u, TimeZone: "UTC"} }
	for _, tc := range []struct {
		from arrow.DataType
		json string
		to   arrow.DataType
		bad  bool // arrow-go's safe cast refuses a value
	}{
		{arrow.PrimitiveTypes.Int8, `[-128,null,127]`, arrow.PrimitiveTypes.Int64, false},
		{arrow.PrimitiveTypes.Int16, `[-32768,null,32767]`, arrow.PrimitiveTypes.Int32, false},
		{arrow.PrimitiveTypes.Int32, `[-2147483648,null,2147483647]`, arrow.PrimitiveTypes.Int64, false},
		{arrow.PrimitiveTypes.Uint8, `[0,null,255]`, arrow.PrimitiveTypes.Int32, false},
		{arrow.PrimitiveTypes.Uint16, `[0,null,65535]`, arrow.PrimitiveTypes.Int32, false},
		{arrow.PrimitiveTypes.Uint32, `[0,null,4294967295]`, arrow.PrimitiveTypes.Int64, false},
		{arrow.PrimitiveTypes.Uint32, `[0,null,4294967295]`, arrow.PrimitiveTypes.Uint64, false},
		{arrow.PrimitiveTypes.Uint8, `[0,null,255]`, arrow.PrimitiveTypes.Uint16, false},
		{arrow.PrimitiveTypes.Float32, `[1.5,null,-2.25]`, arrow.PrimitiveTypes.Float64, false},
		{&arrow.Decimal128Type{Precision: 5, Scale: 2}, `["1.23",null,"-4.56"]`, &arrow.Decimal128Type{Precision: 20, Scale: 2}, false},
		{arrow.BinaryTypes.StringView, `["a",null,"a string longer than twelve bytes"]`, arrow.BinaryTypes.String, false},
		{arrow.BinaryTypes.BinaryView, `["YWJj",null,"bG9uZ2VyIHRoYW4gdHdlbHZlIGJ5dGVz"]`, arrow.BinaryTypes.Binary, false},
		{arrow.FixedWidthTypes.Date32, `[19000,null,-1]`, arrow.FixedWidthTypes.Date64, false},
		{ts(arrow.Second), `[1,null,-2]`, ts(arrow.Microsecond), false},
		{ts(arrow.Millisecond), `[1,null,-2]`, ts(arrow.Nanosecond), false},
		{ts(arrow.Nanosecond), `[1000,null,-2000]`, ts(arrow.Microsecond), false},
		{ts(arrow.Nanosecond), `[1000,null,1001]`, ts(arrow.Microsecond), true},
		{ts(arrow.Second), `[1,null,9223372036854775]`, ts(arrow.Nanosecond), true},
		{arrow.FixedWidthTypes.Time32s, `[1,null,86399]`, arrow.FixedWidthTypes.Time64us, false},
		{arrow.FixedWidthTypes.Time32ms, `[1,null,86399999]`, arrow.FixedWidthTypes.Time64ns, false},
		{arrow.FixedWidthTypes.Time32s, `[1,null,86399]`, arrow.FixedWidthTypes.Time32ms, false},
		{arrow.FixedWidthTypes.Time64ns, `[1000,null,2000]`, arrow.FixedWidthTypes.Time64us, false},
		{arrow.FixedWidthTypes.Time64ns, `[1000,null,2001]`, arrow.FixedWidthTypes.Time64us, true},
	} {
		name := tc.from.String() + " to " + tc.to.String() + " " + tc.json
		arr, _, err := array.FromJSON(memory.DefaultAllocator, tc.from, strings.NewReader(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		src := array.NewSlice(arr, 0, int64(arr.Len())) // an offset of 0 through a slice
		arr.Release()
		want, wantErr := compute.CastArray(context.Background(), src, compute.SafeCastOptions(tc.to))
		got, err := castArray(nil, src, tc.to)
		src.Release()
		if (wantErr != nil) != tc.bad || (err != nil) != tc.bad {
			t.Fatalf("%s: arrow-go's error %v, ours %v; want an error: %v", name, wantErr, err, tc.bad)
		}
		if tc.bad {
			continue
		}
		if !array.Equal(got, want) {
			t.Fatalf("%s: got %v, arrow-go's cast %v", name, got, want)
		}
		got.Release()
		want.Release()
	}
	arr, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64, strings.NewReader(`[1]`))
	defer arr.Release()
	if got, err := castArray(nil, arr, arrow.PrimitiveTypes.Int32); err == nil {
		got.Release()
		t.Fatal("a narrowing cast returned no error")
	}
}
