package model

// Random column types and values: what a stream sends (send), what a read returns (stored, by the
// type policy of docs/protocol.md "Arrow types"), and one value as Arrow JSON, which builds both
// the sent column and the model's expectation (a converted type holds the same values).

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// colType is one column type of a generated schema.
type colType struct {
	label  string         // for the op log
	send   arrow.DataType // the type a batch carries
	stored arrow.DataType // the type the table stores and reads return
	// value returns one non-null value as Arrow JSON.
	value func(r *rand.Rand) string
	// stringy reports whether a predicate may compare the column with a JSON string.
	stringy bool
	// integer reports whether a predicate may compare the column with a JSON integer.
	integer bool
}

// leafTypes are the scalar types a schema draws from: every stored scalar type, and the converted
// ones with their stored types.
func leafTypes() []colType {
	i64 := arrow.PrimitiveTypes.Int64
	intIn := func(lo, hi int64) func(r *rand.Rand) string {
		return func(r *rand.Rand) string { return fmt.Sprint(lo + r.Int64N(hi-lo+1)) }
	}
	same := func(label string, dt arrow.DataType, v func(*rand.Rand) string) colType {
		return colType{label: label, send: dt, stored: dt, value: v}
	}
	conv := func(label string, send, stored arrow.DataType, v func(*rand.Rand) string) colType {
		return colType{label: label, send: send, stored: stored, value: v}
	}
	floatV := func(r *rand.Rand) string {
		return []string{"0", "-0.5", "1.5", "1e10", "-3.25", "123456.75"}[r.IntN(6)]
	}
	decV := func(r *rand.Rand) string {
		return fmt.Sprintf(`"%d.%02d"`, r.Int64N(2_000_000)-1_000_000, r.IntN(100))
	}
	tsUTC := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	tsV := func(r *rand.Rand) string { return fmt.Sprint(r.Int64N(4_000_000_000_000_000)) }
	// Converted units take text, which reads the same in the sent and the stored unit.
	tsMs := func(zone string) func(r *rand.Rand) string {
		return func(r *rand.Rand) string {
			return `"` + time.UnixMilli(r.Int64N(4_000_000_000_000)).UTC().Format("2006-01-02T15:04:05.000") + zone + `"`
		}
	}
	dayMs := func(r *rand.Rand) string {
		return `"` + time.Unix(int64(r.IntN(40000))*86400, 0).UTC().Format("2006-01-02") + `"`
	}
	b64 := func(n int) func(r *rand.Rand) string {
		return func(r *rand.Rand) string {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return `"` + base64.StdEncoding.EncodeToString(b) + `"`
		}
	}
	varB64 := func(r *rand.Rand) string { return b64(r.IntN(20))(r) }
	uuidV := func(r *rand.Rand) string {
		return fmt.Sprintf(`"%08x-%04x-%04x-%04x-%012x"`, r.Uint32(), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16), r.Int64N(1<<48))
	}
	out := []colType{
		same("bool", arrow.FixedWidthTypes.Boolean, func(r *rand.Rand) string { return fmt.Sprint(r.IntN(2) == 1) }),
		same("int8", arrow.PrimitiveTypes.Int8, intIn(-128, 127)),
		same("int16", arrow.PrimitiveTypes.Int16, intIn(-32768, 32767)),
		same("int32", arrow.PrimitiveTypes.Int32, intIn(-50, 50)),
		same("int64", i64, intIn(-1<<61, 1<<61)),
		same("float32", arrow.PrimitiveTypes.Float32, floatV),
		same("float64", arrow.PrimitiveTypes.Float64, floatV),
		same("utf8", arrow.BinaryTypes.String, stringValue),
		same("large_utf8", arrow.BinaryTypes.LargeString, stringValue),
		same("binary", arrow.BinaryTypes.Binary, varB64),
		same("large_binary", arrow.BinaryTypes.LargeBinary, varB64),
		same("fixed_size_binary3", &arrow.FixedSizeBinaryType{ByteWidth: 3}, b64(3)),
		same("date32", arrow.FixedWidthTypes.Date32, intIn(-1000, 30000)),
		same("timestamp_us", &arrow.TimestampType{Unit: arrow.Microsecond}, tsV),
		same("timestamp_us_utc", tsUTC, tsV),
		same("time64_us", arrow.FixedWidthTypes.Time64us, intIn(0, 86_400_000_000-1)),
		same("decimal128", &arrow.Decimal128Type{Precision: 30, Scale: 2}, decV),
		same("uuid", extensions.NewUUIDType(), uuidV),
		conv("uint8", arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Int32, intIn(0, 255)),
		conv("uint16", arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int32, intIn(0, 65535)),
		conv("uint32", arrow.PrimitiveTypes.Uint32, i64, intIn(0, 4294967295)),
		conv("float16", arrow.FixedWidthTypes.Float16, arrow.PrimitiveTypes.Float32, func(r *rand.Rand) string {
			return []string{"0", "1.5", "-2", "0.25", "1024"}[r.IntN(5)]
		}),
		conv("dictionary", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
			arrow.BinaryTypes.String, func(r *rand.Rand) string { return fmt.Sprintf(`"d%d"`, r.IntN(4)) }),
		conv("utf8_view", arrow.BinaryTypes.StringView, arrow.BinaryTypes.String, stringValue),
		conv("binary_view", arrow.BinaryTypes.BinaryView, arrow.BinaryTypes.Binary, varB64),
		conv("decimal256", &arrow.Decimal256Type{Precision: 38, Scale: 2}, &arrow.Decimal128Type{Precision: 38, Scale: 2}, decV),
		conv("decimal64", &arrow.Decimal64Type{Precision: 15, Scale: 2}, &arrow.Decimal128Type{Precision: 15, Scale: 2}, decV),
		conv("timestamp_ms", &arrow.TimestampType{Unit: arrow.Millisecond}, &arrow.TimestampType{Unit: arrow.Microsecond}, tsMs("")),
		conv("timestamp_ms_paris", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}, tsUTC, tsMs("Z")),
		conv("date64", arrow.FixedWidthTypes.Date64, arrow.FixedWidthTypes.Date32, dayMs),
		conv("bool8", extensions.NewBool8Type(), arrow.FixedWidthTypes.Boolean, func(r *rand.Rand) string { return fmt.Sprint(r.IntN(2) == 1) }),
	}
	for i := range out {
		switch out[i].stored.ID() {
		case arrow.INT32, arrow.INT64:
			out[i].integer = true
		case arrow.STRING:
			out[i].stringy = true
		}
	}
	return out
}

// leaf returns the scalar type labelled label.
func leaf(label string) colType {
	for _, t := range leafTypes() {
		if t.label == label {
			return t
		}
	}
	panic("no leaf type " + label)
}

// stringValue is a utf8 value: mostly short (a few distinct ones, so predicates match), sometimes
// multi-byte or empty, sometimes wide (kilobytes).
func stringValue(r *rand.Rand) string {
	var s string
	switch n := r.IntN(20); {
	case n < 12:
		s = fmt.Sprintf("s%d", r.IntN(6))
	case n < 14:
		s = ""
	case n < 17:
		s = fmt.Sprintf("ünïcødé-%d-✓", r.IntN(100))
	default:
		s = strings.Repeat(fmt.Sprintf("wide%d-", r.IntN(10)), 200+r.IntN(800))
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// nullShare is how often a nullable slot (a column, a list element, a struct field, a map value)
// holds null.
const nullShare = 5 // one in nullShare

// nullable returns v, or null one time in nullShare.
func nullable(r *rand.Rand, v func(*rand.Rand) string) string {
	if r.IntN(nullShare) == 0 {
		return "null"
	}
	return v(r)
}

// randomType draws a column type: a scalar, or (depth permitting) a list, large list, fixed-size
// list, list view, struct or map of random children, each child nullable.
func randomType(r *rand.Rand, depth int) colType {
	leaves := leafTypes()
	if depth <= 0 || r.IntN(3) != 0 {
		return leaves[r.IntN(len(leaves))]
	}
	el := randomType(r, depth-1)
	elems := func(r *rand.Rand, n int) string {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = nullable(r, el.value)
		}
		return "[" + strings.Join(vs, ",") + "]"
	}
	listV := func(r *rand.Rand) string { return elems(r, r.IntN(4)) }
	switch r.IntN(6) {
	case 0:
		return colType{label: "list<" + el.label + ">", send: arrow.ListOf(el.send), stored: arrow.ListOf(el.stored), value: listV}
	case 1:
		return colType{label: "large_list<" + el.label + ">", send: arrow.LargeListOf(el.send), stored: arrow.LargeListOf(el.stored), value: listV}
	case 2:
		return colType{label: "fixed_size_list2<" + el.label + ">", send: arrow.FixedSizeListOf(2, el.send), stored: arrow.FixedSizeListOf(2, el.stored),
			value: func(r *rand.Rand) string { return elems(r, 2) }}
	case 3:
		return colType{label: "list_view<" + el.label + ">", send: arrow.ListViewOf(el.send), stored: arrow.ListOf(el.stored), value: listV}
	case 4:
		other := randomType(r, depth-1)
		return colType{label: "struct<a:" + el.label + ",b:" + other.label + ">",
			send:   arrow.StructOf(arrow.Field{Name: "a", Type: el.send, Nullable: true}, arrow.Field{Name: "b", Type: other.send, Nullable: true}),
			stored: arrow.StructOf(arrow.Field{Name: "a", Type: el.stored, Nullable: true}, arrow.Field{Name: "b", Type: other.stored, Nullable: true}),
			value: func(r *rand.Rand) string {
				return fmt.Sprintf(`{"a":%s,"b":%s}`, nullable(r, el.value), nullable(r, other.value))
			}}
	default:
		return colType{label: "map<utf8," + el.label + ">", send: arrow.MapOf(arrow.BinaryTypes.String, el.send), stored: arrow.MapOf(arrow.BinaryTypes.String, el.stored),
			value: func(r *rand.Rand) string {
				n := r.IntN(4)
				kv := make([]string, n)
				for i := range kv {
					kv[i] = fmt.Sprintf(`{"key":"k%d","value":%s}`, i, nullable(r, el.value))
				}
				return "[" + strings.Join(kv, ",") + "]"
			}}
	}
}

// buildColumn builds a column of type dt from one JSON value per row.
func buildColumn(dt arrow.DataType, values []string) (arrow.Array, error) {
	arr, _, err := array.FromJSON(memory.DefaultAllocator, dt, strings.NewReader("["+strings.Join(values, ",")+"]"))
	if err != nil {
		return nil, fmt.Errorf("build %s from %d values: %w", dt, len(values), err)
	}
	return arr, nil
}

// canonical is the model's form of row i of a column: its value as JSON. Two arrays of one
// stored type hold the same value at two rows exactly when these are equal.
func canonical(a arrow.Array, i int) string {
	b, err := json.Marshal(plain(a, i))
	if err != nil {
		return fmt.Sprintf("<unmarshalable %s: %v>", a.DataType(), err)
	}
	return string(b)
}

// plain returns row i of a as a value encoding/json marshals: nested types child by child, and
// binary values as base64 text (arrow-go's own marshalling turns an empty value of a column
// whose values are all empty into null).
func plain(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Binary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.LargeBinary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.BinaryView:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.FixedSizeBinary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.Struct:
		out := map[string]any{}
		for j, f := range a.DataType().(*arrow.StructType).Fields() {
			out[f.Name] = plain(a.Field(j), i)
		}
		return out
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			out = append(out, plain(a.ListValues(), int(j)))
		}
		return out
	}
	return a.GetOneForMarshal(i)
}

// canonicalValues returns the canonical form of each JSON value, as the stored type holds it.
func canonicalValues(dt arrow.DataType, values []string) ([]string, error) {
	arr, err := buildColumn(dt, values)
	if err != nil {
		return nil, err
	}
	defer arr.Release()
	out := make([]string, len(values))
	for i := range out {
		out[i] = canonical(arr, i)
	}
	return out, nil
}

// typeSig is a type's identity for the schema check: its structure, widths, units and zones,
// without the names of list elements and map entries (Parquet renames them).
func typeSig(dt arrow.DataType) string {
	switch t := dt.(type) {
	case *arrow.ListType:
		return "list<" + typeSig(t.Elem()) + ">"
	case *arrow.LargeListType:
		return "large_list<" + typeSig(t.Elem()) + ">"
	case *arrow.FixedSizeListType:
		return fmt.Sprintf("fixed_size_list<%s,%d>", typeSig(t.Elem()), t.Len())
	case *arrow.MapType:
		return "map<" + typeSig(t.KeyType()) + "," + typeSig(t.ItemType()) + ">"
	case *arrow.StructType:
		parts := make([]string, t.NumFields())
		for i, f := range t.Fields() {
			parts[i] = f.Name + ":" + typeSig(f.Type)
		}
		return "struct<" + strings.Join(parts, ",") + ">"
	}
	return dt.String()
}
