package expr

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// statsColumnCase is a column of the statistics tests: its field and the pool its values and the
// predicates' literals are drawn from (nil: null).
type statsColumnCase struct {
	field arrow.Field
	pool  []any
	lits  []any // literals that are no value of the column (they fall between two)
}

func statsCases() []statsColumnCase {
	long := strings.Repeat("x", maxStatBytes+10)
	return []statsColumnCase{
		{arrow.Field{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, []any{int64(math.MinInt64), int64(-3), int64(0), int64(7), int64(math.MaxInt64)}, nil},
		{arrow.Field{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true}, []any{int64(-128), int64(-1), int64(0), int64(5), int64(127)}, nil},
		{arrow.Field{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true}, []any{uint64(0), uint64(9), uint64(math.MaxUint64)}, nil},
		{arrow.Field{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, []any{math.NaN(), math.Inf(-1), -1.5, math.Copysign(0, -1), 0.0, 2.25, math.Inf(1)}, nil},
		{arrow.Field{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true}, []any{math.NaN(), -1e30, 0.5, 3.0, math.Inf(1)}, nil},
		{arrow.Field{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}, []any{"", "a", "ab", "b", long, long + "y", strings.Repeat("\U0010ffff", 20)}, nil},
		{arrow.Field{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true}, []any{"\x00", "\xff\xfe", string(make([]byte, 70)), strings.Repeat("\xff", 70), strings.Repeat("\xff", 70) + "\x01"}, nil},
		{arrow.Field{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true}, []any{false, true}, nil},
		{arrow.Field{Name: "dec", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true}, []any{json.Number("-99999999.99"), json.Number("-0.01"), json.Number("0"), json.Number("12.34"), json.Number("99999999.99")}, []any{json.Number("12.345"), json.Number("-0.005")}},
		{arrow.Field{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true}, []any{int64(-86_400_000_000), int64(0), int64(1_700_000_000_000_000), "2024-03-01T00:00:00Z"}, nil},
		{arrow.Field{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true}, []any{int64(1), int64(1_700_000_000_000_000_123), "2024-03-01T00:00:00Z"}, nil},
		{arrow.Field{Name: "ts_s", Type: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "Europe/Amsterdam"}, Nullable: true}, []any{int64(-1), int64(1_700_000_000)}, nil},
		{arrow.Field{Name: "t64", Type: arrow.FixedWidthTypes.Time64us, Nullable: true}, []any{int64(0), int64(3_600_000_000), int64(86_399_999_999)}, nil},
		{arrow.Field{Name: "t32", Type: arrow.FixedWidthTypes.Time32ms, Nullable: true}, []any{int64(0), int64(1000), int64(86_399_999)}, nil},
		{arrow.Field{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true}, []any{int64(-719162), int64(0), "2024-02-29", int64(2932896)}, nil},
	}
}

// statsBatch builds n rows of the cases, each value drawn from a random subset of its pool (so a
// batch spans part of the domain), nulls at rate nullRate.
func statsBatch(t *testing.T, rng *rand.Rand, cases []statsColumnCase, n int, nullRate float64) arrow.RecordBatch {
	t.Helper()
	fields := make([]arrow.Field, len(cases))
	for i, c := range cases {
		fields[i] = c.field
	}
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, c := range cases {
		lo := rng.IntN(len(c.pool))
		hi := lo + rng.IntN(len(c.pool)-lo)
		for range n {
			if rng.Float64() < nullRate {
				b.Field(i).AppendNull()
				continue
			}
			appendStatValue(t, b.Field(i), c.field, c.pool[lo+rng.IntN(hi-lo+1)])
		}
	}
	return b.NewRecordBatch()
}

func appendStatValue(t *testing.T, bld array.Builder, f arrow.Field, v any) {
	t.Helper()
	switch bb := bld.(type) {
	case *array.Float64Builder:
		bb.Append(v.(float64))
	case *array.Float32Builder:
		bb.Append(float32(v.(float64)))
	case *array.Uint64Builder:
		bb.Append(v.(uint64))
	case *array.StringBuilder:
		bb.Append(v.(string))
	case *array.BinaryBuilder:
		bb.AppendString(v.(string))
	case *array.BooleanBuilder:
		bb.Append(v.(bool))
	default: // integers, temporal types and decimals: the literal's own conversion
		arr, err := ConstantArray(memory.DefaultAllocator, f, v, 1)
		if err != nil {
			t.Fatalf("value %v for %s: %v", v, f.Type, err)
		}
		defer arr.Release()
		if err := bld.AppendValueFromString(arr.ValueStr(0)); err != nil {
			t.Fatalf("append %v to %s: %v", arr.ValueStr(0), f.Type, err)
		}
	}
}

// randomStatsPredicate draws a predicate over the cases' columns with literals from their pools.
func randomStatsPredicate(rng *rand.Rand, cases []statsColumnCase, depth int) *Predicate {
	if depth > 0 && rng.IntN(3) == 0 {
		switch rng.IntN(3) {
		case 0:
			return And(randomStatsPredicate(rng, cases, depth-1), randomStatsPredicate(rng, cases, depth-1))
		case 1:
			return Or(randomStatsPredicate(rng, cases, depth-1), randomStatsPredicate(rng, cases, depth-1))
		default:
			return Not(randomStatsPredicate(rng, cases, depth-1))
		}
	}
	c := cases[rng.IntN(len(cases))]
	lit := func() any {
		if n := rng.IntN(len(c.pool) + len(c.lits)); n >= len(c.pool) {
			return c.lits[n-len(c.pool)]
		}
		return c.pool[rng.IntN(len(c.pool))]
	}
	name := c.field.Name
	switch rng.IntN(9) {
	case 0:
		return Eq(name, lit())
	case 1:
		return Ne(name, lit())
	case 2:
		return Lt(name, lit())
	case 3:
		return Le(name, lit())
	case 4:
		return Gt(name, lit())
	case 5:
		return Ge(name, lit())
	case 6:
		return In(name, lit(), lit())
	case 7:
		return IsNull(name)
	}
	return IsNotNull(name)
}

// TestStatsNeverPruneAMatch: for random batches and predicates, whenever a row of a batch
// matches, the batch's recorded ranges (through their JSON form) say it may; and the ranges do
// prune (the test is not vacuous).
func TestStatsNeverPruneAMatch(t *testing.T) {
	cases := statsCases()
	rng := rand.New(rand.NewPCG(1, 2))
	pruned, matched := 0, 0
	for iter := range 400 {
		nullRate := []float64{0, 0.3, 1}[iter%3]
		rec := statsBatch(t, rng, cases, 1+rng.IntN(8), nullRate)
		sb := NewStatsBuilder(rec.Schema())
		half := rec.NumRows() / 2 // added in two parts, as a writer adds slices
		if err := sb.Add(rec.NewSlice(0, half)); err != nil {
			t.Fatal(err)
		}
		if err := sb.Add(rec.NewSlice(half, rec.NumRows())); err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(sb.Stats())
		if err != nil {
			t.Fatal(err)
		}
		var stats map[string]ColumnStats
		if err := json.Unmarshal(raw, &stats); err != nil {
			t.Fatal(err)
		}
		for range 50 {
			p := randomStatsPredicate(rng, cases, 2)
			if err := p.Validate(rec.Schema()); err != nil {
				continue // a literal that does not fit the column (e.g. 12.345 in a scale-2 decimal is fine; others may not be)
			}
			bound, err := p.Bind(rec.Schema())
			if err != nil {
				t.Fatalf("bind %s: %v", p, err)
			}
			match, err := bound.Match(rec)
			if err != nil {
				t.Fatalf("match %s: %v", p, err)
			}
			any := false
			for _, m := range match {
				any = any || m
			}
			may := MayMatchStats(p, rec.NumRows(), stats, rec.Schema())
			if any && !may {
				t.Fatalf("predicate %s matches a row of\n%v\nbut ranges %s prune it", p, rec, raw)
			}
			if any {
				matched++
			}
			if !may {
				pruned++
			}
		}
		rec.Release()
	}
	if pruned == 0 || matched == 0 {
		t.Fatalf("pruned %d, matched %d: the test exercised nothing", pruned, matched)
	}
	t.Logf("pruned %d predicates, %d matched", pruned, matched)
}

// TestStatsPruneEveryComparableType: a file of one value has an exact range, so for every column
// type and every comparison, the range keeps the file exactly when its row matches (strings past
// maxStatBytes aside: their cut upper bound keeps more).
func TestStatsPruneEveryComparableType(t *testing.T) {
	ops := map[string]func(string, any) *Predicate{"=": Eq, "<": Lt, "<=": Le, ">": Gt, ">=": Ge, "!=": Ne}
	for _, c := range statsCases() {
		t.Run(c.field.Name, func(t *testing.T) {
			sc := arrow.NewSchema([]arrow.Field{c.field}, nil)
			pruned := 0
			for _, value := range c.pool {
				b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
				appendStatValue(t, b.Field(0), c.field, value)
				rec := b.NewRecordBatch()
				b.Release()
				sb := NewStatsBuilder(sc)
				if err := sb.Add(rec); err != nil {
					t.Fatal(err)
				}
				stats := sb.Stats()
				if MayMatchStats(IsNull(c.field.Name), 1, stats, sc) || !MayMatchStats(IsNotNull(c.field.Name), 1, stats, sc) {
					t.Fatalf("null count of a file without nulls misjudged (stats %+v)", stats)
				}
				for _, v := range append(c.lits, c.pool...) {
					for name, op := range ops {
						p := op(c.field.Name, v)
						if p.Validate(sc) != nil {
							continue
						}
						bound, err := p.Bind(sc)
						if err != nil {
							t.Fatal(err)
						}
						m, err := bound.Match(rec)
						if err != nil {
							t.Fatal(err)
						}
						may := MayMatchStats(p, 1, stats, sc)
						if m[0] && !may {
							t.Fatalf("%v %s %v: the row matches, the range prunes it", value, name, v)
						}
						if !m[0] && may && !isLongString(value) {
							t.Fatalf("%v %s %v: no row matches, the exact range %+v keeps the file", value, name, v, stats)
						}
						if !may {
							pruned++
						}
					}
				}
				rec.Release()
			}
			if pruned == 0 {
				t.Fatal("nothing pruned")
			}
		})
	}
}

// isLongString: a string past maxStatBytes has a cut upper bound, which keeps more than it holds.
func isLongString(v any) bool { s, ok := v.(string); return ok && len(s) > maxStatBytes }

// TestStatsAcrossTypeChanges: a range written for one type is used for a widened column of the
// same order and ignored where the order or the unit may differ.
func TestStatsAcrossTypeChanges(t *testing.T) {
	i32 := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, i32)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{10, 20}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	sb := NewStatsBuilder(i32)
	if err := sb.Add(rec); err != nil {
		t.Fatal(err)
	}
	stats := sb.Stats()
	i64 := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	if MayMatchStats(Gt("x", 20), 2, stats, i64) {
		t.Fatal("widened int64 column: range not used")
	}
	ts := arrow.NewSchema([]arrow.Field{{Name: "x", Type: &arrow.TimestampType{Unit: arrow.Millisecond}}}, nil)
	if !MayMatchStats(Gt("x", 20), 2, stats, ts) {
		t.Fatal("a range of int32 values used for a timestamp column")
	}
	if !MayMatchStats(Gt("y", 20), 2, stats, i64) {
		t.Fatal("a column without a range pruned")
	}
}

func TestStatsStringBounds(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantMax bool
	}{
		{strings.Repeat("a", 200), true},
		{strings.Repeat("\xff", 200), false},
		{strings.Repeat("a", 63) + strings.Repeat("\xff", 10), true},
	} {
		hi, ok := upperStat(kindString, literal{s: tc.in})
		if ok != tc.wantMax {
			t.Fatalf("upper bound of %q: ok %v", tc.in[:8], ok)
		}
		if !ok {
			continue
		}
		lit, err := decodeStat(kindString, hi)
		if err != nil || lit.s <= tc.in || len(lit.s) > maxStatBytes {
			t.Fatalf("upper bound %q of %q: not above it or too long (%v)", lit.s, tc.in, err)
		}
	}
	if n := decimal128.FromI64(-5); encodeStat(kindDecimal, literal{dec: decimalLiteral{d: n}}) != "-5" {
		t.Fatal("decimal encoding")
	}
}

// BenchmarkStatsBuilder: the cost of recording ranges, per value (a row of each column type).
func BenchmarkStatsBuilder(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := statsCases()
	rec := statsBatch(&testing.T{}, rng, cases, 65536, 0.1)
	defer rec.Release()
	sb := NewStatsBuilder(rec.Schema())
	values := float64(rec.NumRows() * rec.NumCols())
	b.Cleanup(func() { b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/values, "ns/value") })
	for b.Loop() {
		if err := sb.Add(rec); err != nil {
			b.Fatal(err)
		}
		sb.Stats()
	}
}
