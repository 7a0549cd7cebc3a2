package expr

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestIntegerLiteralRange: an integer column takes exactly the whole numbers of its type's range,
// read from the literal's digits: one past either end is refused for every width, signed and
// unsigned, and a decimal or exponent spelling of a whole number is that number exactly.
func TestIntegerLiteralRange(t *testing.T) {
	types := []struct {
		dt     arrow.DataType
		lo, hi string
	}{
		{arrow.PrimitiveTypes.Int8, "-128", "127"},
		{arrow.PrimitiveTypes.Int16, "-32768", "32767"},
		{arrow.PrimitiveTypes.Int32, "-2147483648", "2147483647"},
		{arrow.PrimitiveTypes.Int64, "-9223372036854775808", "9223372036854775807"},
		{arrow.PrimitiveTypes.Uint8, "0", "255"},
		{arrow.PrimitiveTypes.Uint16, "0", "65535"},
		{arrow.PrimitiveTypes.Uint32, "0", "4294967295"},
		{arrow.PrimitiveTypes.Uint64, "0", "18446744073709551615"},
		{arrow.FixedWidthTypes.Date32, "-2147483648", "2147483647"},
		{arrow.FixedWidthTypes.Time32ms, "-2147483648", "2147483647"},
		{arrow.FixedWidthTypes.Duration_us, "-9223372036854775808", "9223372036854775807"},
	}
	for _, tc := range types {
		schema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: tc.dt}}, nil)
		check := func(lit string, ok bool) {
			t.Helper()
			for _, src := range []string{
				`{"op": "=", "column": "c", "value": ` + lit + `}`,
				`{"op": "in", "column": "c", "values": [0, ` + lit + `]}`,
			} {
				p, err := ParsePredicate([]byte(src))
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				err = p.Validate(schema)
				if ok && err != nil {
					t.Errorf("%s on %s: %v, want it taken", lit, tc.dt, err)
				}
				if !ok && (!errors.Is(err, ErrInvalidPredicate) || !strings.Contains(err.Error(), "range")) {
					t.Errorf("%s on %s: %v, want it refused as out of range", lit, tc.dt, err)
				}
			}
		}
		check(tc.lo, true)
		check(tc.hi, true)
		check(tc.hi+".000", true)
		check(plusOne(tc.hi), false)
		check(tc.hi+"0", false)
		check(tc.hi+"e1", false)
		check(minusOne(tc.lo), false)
		check("-1e400", false)
		check("1e999999999999", false)
	}
}

// plusOne and minusOne step a decimal integer's text by one (hi is never all nines, lo is 0 or
// negative).
func plusOne(s string) string {
	b := []byte(s)
	for i := len(b) - 1; ; i-- {
		if b[i] != '9' {
			b[i]++
			return string(b)
		}
		b[i] = '0'
	}
}

func minusOne(s string) string {
	if s == "0" {
		return "-1"
	}
	return "-" + plusOne(strings.TrimPrefix(s, "-"))
}

// TestIntegerLiteralExact: a literal compares with an integer column by its exact value, never
// rounded through a float64: 2^53+1 written as a decimal matches 2^53+1 and not 2^53, -2^63-1
// matches nothing (it is refused), and a fraction or an exponent beyond any range is refused
// rather than rounded.
func TestIntegerLiteralExact(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	vals := []int64{math.MinInt64, 1 << 53, 1<<53 + 1, 0, math.MaxInt64}
	b.AppendValues(vals, nil)
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(vals)))
	defer rec.Release()

	for _, tc := range []struct {
		lit  string
		want []int64 // the ids "=" matches; nil: refused
	}{
		{"9007199254740993.0", []int64{1<<53 + 1}},
		{"9007199254740993", []int64{1<<53 + 1}},
		{"9.007199254740993e15", []int64{1<<53 + 1}},
		{"90071992547409930e-1", []int64{1<<53 + 1}},
		{"9007199254740992.0", []int64{1 << 53}},
		{"-9223372036854775808", []int64{math.MinInt64}},
		{"-9223372036854775808.0", []int64{math.MinInt64}},
		{"9223372036854775807.0", []int64{math.MaxInt64}},
		{"0e999999999", []int64{0}},
		{"-0.0", []int64{0}},
		{"-9223372036854775809", nil},
		{"9223372036854775808", nil},
		{"-9.223372036854775809e18", nil},
		{"9007199254740992.5", nil},
		{"1e-999999999", nil},
	} {
		p, err := ParsePredicate([]byte(`{"op": "=", "column": "id", "value": ` + tc.lit + `}`))
		if err != nil {
			t.Fatal(err)
		}
		match, err := p.Match(rec)
		if tc.want == nil {
			if err == nil {
				t.Errorf("id = %s: matched %v, want it refused", tc.lit, match)
			}
			continue
		}
		if err != nil {
			t.Errorf("id = %s: %v", tc.lit, err)
			continue
		}
		var got []int64
		for i, ok := range match {
			if ok {
				got = append(got, vals[i])
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("id = %s matched %v, want %v", tc.lit, got, tc.want)
		}
	}
	// Go literals are exact too: a float64 holding 2^63 is out of range, not MaxInt64 or MinInt64.
	if err := Eq("id", float64(1<<63)).Validate(schema); err == nil {
		t.Error("id = 2^63 as a float64: taken, want it refused")
	}
	if err := Eq("id", uint64(math.MaxUint64)).Validate(schema); err == nil {
		t.Error("id = MaxUint64: taken, want it refused")
	}
}

// TestDecimalLiteralExact: a decimal128 column compares a literal exactly at its scale. A literal
// with more fractional digits than the scale equals no value and orders between its two
// neighbours; one past the precision is refused; and nothing rounds through a float64.
func TestDecimalLiteralExact(t *testing.T) {
	dt := &arrow.Decimal128Type{Precision: 20, Scale: 2}
	schema := arrow.NewSchema([]arrow.Field{{Name: "d", Type: dt}}, nil)
	b := array.NewDecimal128Builder(memory.DefaultAllocator, dt)
	defer b.Release()
	unscaled := []int64{-150, 0, 125, 900719925474099200, 900719925474099300} // -1.50 0 1.25 2^53 2^53+1
	for _, u := range unscaled {
		b.Append(decimal128.FromI64(u))
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(unscaled)))
	defer rec.Release()
	matches := func(op, lit string) ([]int64, error) {
		p, err := ParsePredicate([]byte(`{"op": "` + op + `", "column": "d", "value": ` + lit + `}`))
		if err != nil {
			t.Fatal(err)
		}
		m, err := p.Match(rec)
		var got []int64
		for i, ok := range m {
			if ok {
				got = append(got, unscaled[i])
			}
		}
		return got, err
	}
	for _, tc := range []struct {
		op, lit string
		want    []int64
	}{
		{"=", "9007199254740993.0", []int64{900719925474099300}},
		{"=", "9007199254740993", []int64{900719925474099300}},
		{"=", "9007199254740992.00", []int64{900719925474099200}},
		{"=", "1.25", []int64{125}},
		{"=", "125e-2", []int64{125}},
		{"=", "1.251", nil},
		{"!=", "1.251", unscaled},
		{"<", "1.251", []int64{-150, 0, 125}},
		{"<=", "1.249", []int64{-150, 0}},
		{">", "1.249", []int64{125, 900719925474099200, 900719925474099300}},
		{">=", "-1.501", unscaled},
		{"<", "-1.499", []int64{-150}},
		{"=", "-1.5", []int64{-150}},
		{"<", "1e-999999999", []int64{-150, 0}},
		{">", "-1e-999999999", []int64{0, 125, 900719925474099200, 900719925474099300}},
	} {
		got, err := matches(tc.op, tc.lit)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("d %s %s matched %v, %v; want %v", tc.op, tc.lit, got, err, tc.want)
		}
	}
	for _, lit := range []string{"1e18", "-1e18", "999999999999999999.995", "1e999999999", `"1.25"`, "true"} {
		if got, err := matches("=", lit); err == nil {
			t.Errorf("d = %s matched %v, want it refused", lit, got)
		}
	}
	p, err := ParsePredicate([]byte(`{"op": "in", "column": "d", "values": [1.25, 1.251, -1.50]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := p.Match(rec); err != nil || !slices.Equal(m, []bool{true, false, true, false, false}) {
		t.Errorf("d in (1.25, 1.251, -1.50): %v, %v", m, err)
	}
}
