package partition

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
)

func micros(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMicro()
}

// TestHashSpecValues checks the hash against the values the Iceberg spec lists (appendix B,
// "32-bit Hash Requirements").
func TestHashSpecValues(t *testing.T) {
	dec, _ := decimal128.FromString("14.20", 9, 2)
	date := time.Date(2017, 11, 16, 0, 0, 0, 0, time.UTC).Unix() / 86400
	u := uuid.MustParse("f79c3e09-677c-4bbd-a479-3f349cb785e7")
	for _, c := range []struct {
		name string
		src  sourceKind
		v    Value
		want int32
	}{
		{"int 34", srcInt, Value{Int: 34}, 2017239379},
		{"long 34", srcLong, Value{Int: 34}, 2017239379},
		{"decimal(9,2) 14.20", srcDecimal, Value{Decimal: dec}, -500754589},
		{"date 2017-11-16", srcDate, Value{Int: date}, -653330422},
		{"time 22:31:08", srcTime, Value{Int: (22*3600 + 31*60 + 8) * 1_000_000}, -662762989},
		{"timestamp 2017-11-16T22:31:08", srcTimestamp, Value{Int: micros("2017-11-16T22:31:08Z")}, -2047944441},
		{"timestamptz 2017-11-16T14:31:08-08:00", srcTimestamp, Value{Int: micros("2017-11-16T14:31:08-08:00")}, -2047944441},
		{"timestamp 2017-11-16T22:31:08.000001", srcTimestamp, Value{Int: micros("2017-11-16T22:31:08.000001Z")}, -1207196810},
		{"string iceberg", srcString, Value{Bytes: []byte("iceberg")}, 1210000089},
		{"uuid", srcUUID, Value{Bytes: u[:]}, 1488055340},
		{"fixed 00010203", srcFixed, Value{Bytes: []byte{0, 1, 2, 3}}, -188683207},
		{"binary 00010203", srcBinary, Value{Bytes: []byte{0, 1, 2, 3}}, -188683207},
	} {
		if got := hashValue(sourceType{kind: c.src}, c.v); got != c.want {
			t.Errorf("%s: hash %d, want %d", c.name, got, c.want)
		}
	}
}

func bind(t *testing.T, sc *arrow.Schema, spec string) *Bound {
	t.Helper()
	s, err := ParseSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Bind(sc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTransformValues checks each transform against values computed by PyIceberg's transforms
// (pyiceberg.transforms), nulls and values before 1970 included.
func TestTransformValues(t *testing.T) {
	mem := memory.NewGoAllocator()
	dec := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "l", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "m", Type: dec, Nullable: true},
		{Name: "u", Type: extensions.NewUUIDType(), Nullable: true},
	}, nil)
	bld := array.NewRecordBuilder(mem, sc)
	defer bld.Release()
	bld.Field(0).(*array.Int32Builder).AppendValues([]int32{34, -1, 0}, []bool{true, true, false})
	bld.Field(1).(*array.Int64Builder).AppendValues([]int64{34, -123456789012, 0}, []bool{true, true, false})
	bld.Field(2).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{arrow.Timestamp(micros("2017-11-16T22:31:08.000001Z")), -1, 0}, []bool{true, true, false})
	bld.Field(3).(*array.Date32Builder).AppendValues([]arrow.Date32{17486, -1, 0}, []bool{true, true, false})
	bld.Field(4).(*array.StringBuilder).AppendValues([]string{"iceberg", "NL", ""}, []bool{true, true, false})
	bld.Field(5).(*array.BinaryBuilder).AppendValues([][]byte{{1, 2, 3, 4}, {}, nil}, []bool{true, true, false})
	d1, _ := decimal128.FromString("14.20", 9, 2)
	d2, _ := decimal128.FromString("10.65", 9, 2)
	bld.Field(6).(*array.Decimal128Builder).AppendValues([]decimal128.Num{d1, d2, {}}, []bool{true, true, false})
	ub := bld.Field(7).(*extensions.UUIDBuilder)
	ub.Append(uuid.MustParse("f79c3e09-677c-4bbd-a479-3f349cb785e7"))
	ub.Append(uuid.Nil)
	ub.AppendNull()
	rec := bld.NewRecordBatch()
	defer rec.Release()

	for _, c := range []struct {
		spec string
		want []string // per row, Value.String
	}{
		{`[{"column":"i","transform":"bucket[100]"}]`, []string{"79", "", "null"}},
		{`[{"column":"l","transform":"bucket[100]"}]`, []string{"79", "", "null"}},
		{`[{"column":"l","transform":"bucket[7]"}]`, []string{"", "0", "null"}},
		{`[{"column":"m","transform":"bucket[100]"}]`, []string{"59", "", "null"}},
		{`[{"column":"ts","transform":"bucket[100]"}]`, []string{"38", "", "null"}},
		{`[{"column":"s","transform":"bucket[16]"}]`, []string{"", "2", "null"}},
		{`[{"column":"ts","transform":"year"}]`, []string{"47", "-1", "null"}},
		{`[{"column":"ts","transform":"month"}]`, []string{"574", "-1", "null"}},
		{`[{"column":"ts","transform":"day"}]`, []string{"17486", "-1", "null"}},
		{`[{"column":"ts","transform":"hour"}]`, []string{"419686", "-1", "null"}},
		{`[{"column":"d","transform":"year"}]`, []string{"47", "-1", "null"}},
		{`[{"column":"d","transform":"month"}]`, []string{"574", "-1", "null"}},
		{`[{"column":"d","transform":"day"}]`, []string{"17486", "-1", "null"}},
		{`[{"column":"i","transform":"truncate[10]"}]`, []string{"30", "-10", "null"}},
		{`[{"column":"l","transform":"truncate[10]"}]`, []string{"30", "-123456789020", "null"}},
		{`[{"column":"m","transform":"truncate[50]"}]`, []string{"14.00", "10.50", "null"}},
		{`[{"column":"s","transform":"truncate[3]"}]`, []string{"ice", "NL", "null"}},
		{`[{"column":"b","transform":"truncate[3]"}]`, []string{"010203", "", "null"}},
		{`[{"column":"s"}]`, []string{"iceberg", "NL", "null"}},
		{`[{"column":"u","transform":"identity"}]`, []string{"f79c3e09677c4bbda4793f349cb785e7", "00000000000000000000000000000000", "null"}},
	} {
		b := bind(t, sc, c.spec)
		for row, want := range c.want {
			tu, err := b.Tuple(rec, row)
			if err != nil {
				t.Fatal(err)
			}
			if want != "" && tu[0].String() != want {
				t.Errorf("%s row %d: %s, want %s", c.spec, row, tu[0], want)
			}
		}
	}
}

func TestGroupAndJSON(t *testing.T) {
	mem := memory.NewGoAllocator()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	bld := array.NewRecordBuilder(mem, sc)
	defer bld.Release()
	bld.Field(0).(*array.StringBuilder).AppendValues([]string{"NL", "", "DE", "NL", "NL"}, []bool{true, false, true, true, true})
	day := micros("2024-03-01T00:00:00Z")
	bld.Field(1).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{
		arrow.Timestamp(day), arrow.Timestamp(day), arrow.Timestamp(day + 1), arrow.Timestamp(day + microsPerDay), arrow.Timestamp(day + 5),
	}, nil)
	rec := bld.NewRecordBatch()
	defer rec.Release()
	b := bind(t, sc, `[{"column":"country"},{"column":"ts","transform":"day"}]`)
	groups, err := b.Group(rec)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range groups {
		got = append(got, g.Tuple.String()+":"+strings.Trim(toJSON(g.Rows), "[]"))
	}
	want := []string{"[null, 19783]:1", "[DE, 19783]:2", "[NL, 19783]:0,4", "[NL, 19784]:3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if b.ResultType(0) != "string" || b.ResultType(1) != "int" || b.SourceType(1) != "timestamptz" {
		t.Fatalf("types %s %s %s", b.ResultType(0), b.ResultType(1), b.SourceType(1))
	}

	// A tuple round-trips through JSON with its types.
	dec, _ := decimal128.FromString("-10.50", 9, 2)
	tu := Tuple{groups[2].Tuple[0], groups[2].Tuple[1], {}, {Type: "decimal(9, 2)", Decimal: dec}, {Type: "binary", Bytes: []byte{0xff, 0}}, {Type: "boolean", Bool: true}, {Type: "long", Int: -1 << 62}}
	data := toJSON(tu)
	if data != `[{"type":"string","value":"NL"},{"type":"int","value":19783},null,{"type":"decimal(9, 2)","value":"-10.50"},{"type":"binary","value":"ff00"},{"type":"boolean","value":true},{"type":"long","value":-4611686018427387904}]` {
		t.Fatalf("json %s", data)
	}
	var back Tuple
	if err := json.Unmarshal([]byte(data), &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(tu) {
		t.Fatalf("round trip %s, want %s", back, tu)
	}
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestSpecRefusals(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "s", Type: arrow.BinaryTypes.String},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32})},
	}, nil)
	for _, c := range []struct{ spec, column, want string }{
		{`[{"column":"nope"}]`, "nope", "not in the table"},
		{`[{"column":"st.x"}]`, "st.x", "top-level"},
		{`[{"column":"st"}]`, "st", "primitive"},
		{`[{"column":"f"}]`, "f", "cannot be a partition source"},
		{`[{"column":"id","transform":"day"}]`, "id", "day does not apply to long"},
		{`[{"column":"d","transform":"hour"}]`, "d", "hour does not apply to date"},
		{`[{"column":"flag","transform":"bucket[4]"}]`, "flag", "bucket[4] does not apply to boolean"},
		{`[{"column":"d","transform":"truncate[4]"}]`, "d", "truncate[4] does not apply to date"},
		{`[{"column":"id","transform":"bucket[0]"}]`, "id", "from 1 to"},
		{`[{"column":"id","transform":"bucket[-3]"}]`, "id", "from 1 to"},
		{`[{"column":"id","transform":"truncate[x]"}]`, "id", "unknown transform"},
		{`[{"column":"id","transform":"days"}]`, "id", "unknown transform"},
		{`[{"column":"s"},{"column":"s","transform":"identity"}]`, "s", "appears twice"},
		{`[{"column":"s","extra":1}]`, "", "unknown field"},
		{`[{"transform":"day"}]`, "", "needs a \"column\""},
	} {
		s, err := ParseSpec([]byte(c.spec))
		if err == nil {
			err = s.Validate(sc)
		}
		if err == nil || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err %v, want ErrInvalidSpec", c.spec, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || (c.column != "" && !strings.Contains(err.Error(), `"`+c.column+`"`)) {
			t.Errorf("%s: err %q, want it to name %q and say %q", c.spec, err, c.column, c.want)
		}
	}
	// Two transforms of one column are two fields.
	s, err := ParseSpec([]byte(`[{"column":"id","transform":"bucket[8]"},{"column":"id","transform":"truncate[1000]"}]`))
	if err != nil || s.Validate(sc) != nil {
		t.Fatalf("two transforms of one column refused: %v", err)
	}
	if s.String() != `[{"column":"id","transform":"bucket[8]"},{"column":"id","transform":"truncate[1000]"}]` {
		t.Fatalf("spec json %s", s)
	}
	// A schema change keeps the source columns.
	next := arrow.NewSchema(sc.Fields()[1:], nil)
	if err := s.CheckSchemaChange(next); err == nil || !strings.Contains(err.Error(), `"id"`) {
		t.Fatalf("dropping a partition column: %v", err)
	}
}
