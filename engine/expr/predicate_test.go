package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// predSchema covers every comparison domain, with nulls in each nullable column.
var predSchema = arrow.NewSchema([]arrow.Field{
	{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
	{Name: "d", Type: arrow.FixedWidthTypes.Date32},
}, nil)

// predRows: row r has i=r (null for r=2), u8=r, u64=r, f=r/2 (null for r=3), s="s<r>" (null for
// r=4), b=r odd (null for r=0), ts=2024-01-01 + r hours, d=2024-01-01 + r days. Rows 0..5.
func predRows(t *testing.T) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, predSchema)
	defer b.Release()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for r := int64(0); r < 6; r++ {
		if r == 2 {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(r)
		}
		b.Field(1).(*array.Uint8Builder).Append(uint8(r))
		b.Field(2).(*array.Uint64Builder).Append(uint64(r))
		if r == 3 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Float64Builder).Append(float64(r) / 2)
		}
		if r == 4 {
			b.Field(4).AppendNull()
		} else {
			b.Field(4).(*array.StringBuilder).Append(fmt.Sprintf("s%d", r))
		}
		if r == 0 {
			b.Field(5).AppendNull()
		} else {
			b.Field(5).(*array.BooleanBuilder).Append(r%2 == 1)
		}
		ts, _ := arrow.TimestampFromTime(base.Add(time.Duration(r)*time.Hour), arrow.Millisecond)
		b.Field(6).(*array.TimestampBuilder).Append(ts)
		b.Field(7).(*array.Date32Builder).Append(arrow.Date32FromTime(base.AddDate(0, 0, int(r))))
	}
	return b.NewRecordBatch()
}

func TestPredicateEvaluation(t *testing.T) {
	rec := predRows(t)
	defer rec.Release()
	cases := []struct {
		name string
		p    *Predicate
		want []int // rows for which the predicate is true
	}{
		{"eq", Eq("i", 3), []int{3}},
		{"eq null row never matches", Eq("i", 2), nil},
		{"ne skips null", Ne("i", 3), []int{0, 1, 4, 5}},
		{"lt", Lt("i", 2), []int{0, 1}},
		{"le", Le("i", 2), []int{0, 1}},
		{"gt", Gt("i", 3), []int{4, 5}},
		{"ge", Ge("i", 3), []int{3, 4, 5}},
		{"uint8 widened", Ge("u8", 4), []int{4, 5}},
		{"uint64", Lt("u64", uint64(2)), []int{0, 1}},
		{"float with int literal", Ge("f", 2), []int{4, 5}},
		{"float with float literal", Eq("f", 0.5), []int{1}},
		{"string eq", Eq("s", "s1"), []int{1}},
		{"string lt", Lt("s", "s2"), []int{0, 1}},
		{"bool", Eq("b", true), []int{1, 3, 5}},
		{"bool false", Eq("b", false), []int{2, 4}},
		{"timestamp rfc3339", Ge("ts", "2024-01-01T04:00:00Z"), []int{4, 5}},
		{"timestamp time.Time", Lt("ts", time.Date(2024, 1, 1, 1, 0, 0, 0, time.UTC)), []int{0}},
		{"date", Eq("d", "2024-01-03"), []int{2}},
		{"in", In("i", 1, 3, 99), []int{1, 3}},
		{"in strings", In("s", "s0", "s4", "zz"), []int{0}},
		{"in with null: only true matches", In("i", 1, nil), []int{1}},
		{"not in with null is never true", Not(In("i", 1, nil)), nil},
		{"not in", Not(In("i", 1, 3)), []int{0, 4, 5}},
		{"is null", IsNull("i"), []int{2}},
		{"is not null", IsNotNull("s"), []int{0, 1, 2, 3, 5}},
		{"and", And(Ge("i", 1), Lt("i", 4)), []int{1, 3}},
		{"and false beats null", And(Eq("i", 2), IsNull("i")), nil},
		{"or true beats null", Or(Gt("i", 100), IsNull("i")), []int{2}},
		{"or of unknowns", Or(Eq("i", 9), Eq("f", 9)), nil},
		{"not unknown stays unknown", Not(Eq("i", 0)), []int{1, 3, 4, 5}},
		{"not not", Not(Not(Eq("i", 0))), []int{0}},
		{"nested", Or(And(IsNotNull("f"), Lt("f", 1)), Eq("s", "s5")), []int{0, 1, 5}},
		{"not of and with null", Not(And(Gt("i", 0), Gt("f", 0))), []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			match, err := c.p.Match(rec)
			if err != nil {
				t.Fatalf("%s: %v", c.p, err)
			}
			var got []int
			for i, ok := range match {
				if ok {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("%s: rows %v, want %v", c.p, got, c.want)
			}
			// The JSON encoding round-trips to a predicate that evaluates the same.
			b, err := json.Marshal(c.p)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParsePredicate(b)
			if err != nil {
				t.Fatalf("parse %s: %v", b, err)
			}
			match2, err := back.Match(rec)
			if err != nil {
				t.Fatalf("round-tripped %s: %v", b, err)
			}
			if !slices.Equal(match, match2) {
				t.Fatalf("round trip of %s changed the result", b)
			}
		})
	}
}

func TestPredicateErrors(t *testing.T) {
	cases := []struct {
		name string
		p    *Predicate
		want string
	}{
		{"unknown column", Eq("nope", 1), "no column"},
		{"null comparison", Eq("i", nil), "is_null"},
		{"fraction for int", Eq("i", 2.5), "integer"},
		{"string for int", Eq("i", "3"), "integer"},
		{"int for string", Eq("s", 3), "string"},
		{"negative for uint64", Eq("u64", -1), "out of the range of uint64"},
		{"bad timestamp", Eq("ts", "yesterday"), "RFC 3339"},
		{"bad date", Eq("d", "01/02/2024"), "date"},
		{"empty in", In("i"), "at least one value"},
		{"empty and", And(), "at least one"},
		{"not arity", &Predicate{Op: PredNot}, "exactly one"},
		{"unknown op", &Predicate{Op: "like", Column: "s", Value: "x%"}, "unknown op"},
		{"missing op", &Predicate{Column: "s"}, "missing"},
		{"no column", &Predicate{Op: PredEq, Value: 1}, "needs a column"},
		{"nil arg", And(Eq("i", 1), nil), "missing expression"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate(predSchema)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate(%s) = %v, want an error containing %q", c.p, err, c.want)
			}
		})
	}
}

func TestPredicateJSON(t *testing.T) {
	src := `{"op":"and","args":[
		{"op":">=","column":"i","value":9007199254740993},
		{"op":"or","args":[{"op":"in","column":"s","values":["a",null]},{"op":"is_null","column":"s"}]},
		{"op":"not","args":[{"op":"=","column":"b","value":false}]}]}`
	p, err := ParsePredicate([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	// 2^53+1 must survive as an exact integer.
	if ev, err := p.bind(predSchema); err != nil {
		t.Fatal(err)
	} else if got := ev.(*logicalEval).args[0].(*compareEval).lit.i; got != 9007199254740993 {
		t.Fatalf("int literal decoded as %d", got)
	}
	if got, want := p.String(), "i >= 9007199254740993 AND (s IN ('a', NULL) OR s IS NULL) AND NOT (b = false)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := p.Columns(); !slices.Equal(got, []string{"b", "i", "s"}) {
		t.Fatalf("Columns() = %v", got)
	}
	if _, err := ParsePredicate([]byte(`{"op":`)); err == nil {
		t.Fatal("truncated JSON parsed")
	}
}

// TestPredicateBounds: a predicate over its depth, node or size bound is refused with
// ErrInvalidPredicate when parsed, validated or bound; one at the bounds is accepted.
func TestPredicateBounds(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	nots := func(n int) string {
		return strings.Repeat(`{"op":"not","args":[`, n) + `{"op":"=","column":"x","value":1}` + strings.Repeat(`]}`, n)
	}
	in := func(n int) string {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = strconv.Itoa(i)
		}
		return `{"op":"in","column":"x","values":[` + strings.Join(vals, ",") + `]}`
	}
	for _, tc := range []struct {
		name string
		json string
		ok   bool
	}{
		{"99 nots (depth 100)", nots(MaxPredicateDepth - 1), true},
		{"100 nots (depth 101)", nots(MaxPredicateDepth), false},
		{"4,990 nots", nots(4990), false},
		{"in of 9,999 values", in(MaxPredicateNodes - 1), true},
		{"in of 10,000 values", in(MaxPredicateNodes), false},
		{"JSON over 1 MiB", `{"op":"=","column":"x","value":"` + strings.Repeat("a", MaxPredicateJSONBytes) + `"}`, false},
		{"trailing data", `{"op":"=","column":"x","value":1} {}`, false},
		{"unknown field nested", `{"op":"not","args":[{"op":"=","colum":"x","value":1}]}`, false},
	} {
		p, err := ParsePredicate([]byte(tc.json))
		if tc.ok {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := p.Validate(sc); err != nil {
				t.Fatalf("%s: Validate: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidPredicate) {
			t.Fatalf("%s: got %v, want ErrInvalidPredicate", tc.name, err)
		}
	}
	// Built in Go, not parsed: Validate and Bind check the same bounds.
	p := Eq("x", 1)
	for range MaxPredicateDepth {
		p = Not(p)
	}
	if err := p.Validate(sc); !errors.Is(err, ErrInvalidPredicate) {
		t.Fatalf("Validate of %d levels: %v", MaxPredicateDepth+1, err)
	}
	if _, err := p.Bind(sc); !errors.Is(err, ErrInvalidPredicate) {
		t.Fatalf("Bind of %d levels: %v", MaxPredicateDepth+1, err)
	}
}
