package partition

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/twmb/murmur3"
)

// Bound is a Spec checked against a schema (Spec.Bind): it computes the partition values of
// batches of that schema. It is immutable and safe for concurrent use.
type Bound struct {
	spec   Spec
	fields []boundField
}

type boundField struct {
	Field
	col int // the source column's index in the schema
	src sourceType
}

// Spec returns the bound spec.
func (b *Bound) Spec() Spec { return b.spec }

// Len returns the number of fields.
func (b *Bound) Len() int { return len(b.fields) }

// Column returns the index, in the bound schema, of field i's source column.
func (b *Bound) Column(i int) int { return b.fields[i].col }

// SourceType returns the Iceberg type name of field i's source column ("int", "timestamptz",
// "decimal(9, 2)", ...).
func (b *Bound) SourceType(i int) string { return b.fields[i].src.iceberg }

// ResultType returns the Iceberg type name of field i's partition values.
func (b *Bound) ResultType(i int) string {
	return b.fields[i].Transform.ResultType(b.fields[i].src.iceberg)
}

// FieldValue returns field i's partition value of row `row` of arr, an array of the field's
// source column type (the column itself, or a literal made into an array of that type).
func (b *Bound) FieldValue(i int, arr arrow.Array, row int) (Value, error) {
	return b.fields[i].value(arr, row)
}

// Tuple returns the partition tuple of row `row` of rec, a batch of the bound schema.
func (b *Bound) Tuple(rec arrow.RecordBatch, row int) (Tuple, error) {
	t := make(Tuple, len(b.fields))
	for i, f := range b.fields {
		v, err := f.value(rec.Column(f.col), row)
		if err != nil {
			return nil, err
		}
		t[i] = v
	}
	return t, nil
}

// Group is the rows of a batch that share one partition tuple.
type Group struct {
	Tuple Tuple
	Rows  []int32 // ascending
}

// Group returns rec's rows grouped by partition tuple, the groups ordered by tuple
// (CompareTuples). rec is a batch of the bound schema. The batch is read once; memory is one
// key per distinct tuple and one index per row, whatever the number of partitions.
func (b *Bound) Group(rec arrow.RecordBatch) ([]Group, error) {
	index := make(map[string]int)
	var groups []Group
	key := make([]byte, 0, 64) // Tuple.Key of t, built as t is
	t := make(Tuple, len(b.fields))
	for row := range int(rec.NumRows()) {
		key = key[:0]
		for i, f := range b.fields {
			v, err := f.value(rec.Column(f.col), row)
			if err != nil {
				return nil, err
			}
			t[i] = v
			key = v.appendKey(key)
		}
		g, ok := index[string(key)]
		if !ok {
			g = len(groups)
			index[string(key)] = g
			groups = append(groups, Group{Tuple: slices.Clone(t)})
		}
		groups[g].Rows = append(groups[g].Rows, int32(row))
	}
	slices.SortFunc(groups, func(x, y Group) int { return CompareTuples(x.Tuple, y.Tuple) })
	return groups, nil
}

// value computes the field's partition value of row `row` of arr.
func (f boundField) value(arr arrow.Array, row int) (Value, error) {
	if ext, ok := arr.(array.ExtensionArray); ok {
		arr = ext.Storage()
	}
	if arr.IsNull(row) {
		return Value{}, nil
	}
	src, err := sourceValue(f.src, arr, row)
	if err != nil {
		return Value{}, fmt.Errorf("partition column %q: %w", f.Column, err)
	}
	return apply(f.Transform, f.src, src)
}

// sourceValue reads row `row` of arr as an identity Value of source type src.
func sourceValue(src sourceType, arr arrow.Array, row int) (Value, error) {
	v := Value{Type: src.iceberg}
	switch a := arr.(type) {
	case *array.Boolean:
		v.Bool = a.Value(row)
	case *array.Int8:
		v.Int = int64(a.Value(row))
	case *array.Int16:
		v.Int = int64(a.Value(row))
	case *array.Int32:
		v.Int = int64(a.Value(row))
	case *array.Int64:
		v.Int = a.Value(row)
	case *array.Date32:
		v.Int = int64(a.Value(row))
	case *array.Time32:
		v.Int = toMicros(int64(a.Value(row)), a.DataType().(*arrow.Time32Type).Unit)
	case *array.Time64:
		v.Int = toMicros(int64(a.Value(row)), a.DataType().(*arrow.Time64Type).Unit)
	case *array.Timestamp:
		v.Int = toMicros(int64(a.Value(row)), a.DataType().(*arrow.TimestampType).Unit)
	case *array.String:
		v.Bytes = []byte(a.Value(row))
	case *array.LargeString:
		v.Bytes = []byte(a.Value(row))
	case *array.Binary:
		v.Bytes = slices.Clone(a.Value(row))
	case *array.LargeBinary:
		v.Bytes = slices.Clone(a.Value(row))
	case *array.FixedSizeBinary:
		v.Bytes = slices.Clone(a.Value(row))
	case *array.Decimal128:
		v.Decimal = a.Value(row)
	default:
		return Value{}, fmt.Errorf("an array of type %s is not a %s column", arr.DataType(), src.iceberg)
	}
	return v, nil
}

// toMicros converts n units to microseconds, rounding toward the past (Iceberg's timestamp_ns
// values hash and transform by their microsecond).
func toMicros(n int64, unit arrow.TimeUnit) int64 {
	switch unit {
	case arrow.Second:
		return n * 1_000_000
	case arrow.Millisecond:
		return n * 1_000
	case arrow.Nanosecond:
		return floorDiv(n, 1_000)
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

const (
	microsPerHour = int64(time.Hour / time.Microsecond)
	microsPerDay  = 24 * microsPerHour
)

// apply computes transform t of the non-null identity value v of source type src.
func apply(t Transform, src sourceType, v Value) (Value, error) {
	switch t.Kind {
	case Identity, "":
		return v, nil
	case Year, Month, Day:
		days := v.Int
		if src.kind == srcTimestamp {
			days = floorDiv(v.Int, microsPerDay)
		}
		if t.Kind == Day {
			return intValue(days), nil
		}
		d := time.Unix(days*86400, 0).UTC()
		years := int64(d.Year() - 1970)
		if t.Kind == Year {
			return intValue(years), nil
		}
		return intValue(years*12 + int64(d.Month()) - 1), nil
	case Hour:
		return intValue(floorDiv(v.Int, microsPerHour)), nil
	case Bucket:
		return intValue(int64((hashValue(src, v) & math.MaxInt32) % int32(t.Param))), nil
	case Truncate:
		return truncate(t.Param, src, v), nil
	}
	return Value{}, fmt.Errorf("unknown transform %q", t.Kind)
}

func intValue(n int64) Value { return Value{Type: "int", Int: n} }

// hashValue is Iceberg's 32-bit hash of a value (the spec's appendix B): murmur3_x86_32 with seed
// 0 of the value's serialization. int, long, date, time and timestamp values hash as 8-byte
// little-endian longs (times and timestamps in microseconds); a decimal as the minimal big-endian
// two's-complement bytes of its unscaled value; strings as their UTF-8 bytes; binary, fixed and
// uuid as their bytes.
func hashValue(src sourceType, v Value) int32 {
	switch src.kind {
	case srcString, srcBinary, srcFixed, srcUUID:
		return int32(murmur3.Sum32(v.Bytes))
	case srcDecimal:
		return int32(murmur3.Sum32(minimalBigEndian(v.Decimal)))
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v.Int))
	return int32(murmur3.Sum32(b[:]))
}

// minimalBigEndian returns n's two's-complement big-endian bytes without the redundant leading
// sign bytes (Java's BigInteger.toByteArray).
func minimalBigEndian(n decimal128.Num) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(n.HighBits()))
	binary.BigEndian.PutUint64(b[8:], n.LowBits())
	out := b[:]
	for len(out) > 1 && ((out[0] == 0x00 && out[1]&0x80 == 0) || (out[0] == 0xff && out[1]&0x80 != 0)) {
		out = out[1:]
	}
	return out
}

// truncate is Iceberg's truncate[w]: integers and decimals (by unscaled value) to the multiple
// of w at or below them, v - (((v % w) + w) % w), in the source type's width; strings to their
// first w code points; binary to its first w bytes.
func truncate(w int, src sourceType, v Value) Value {
	switch src.kind {
	case srcInt:
		x, w32 := int32(v.Int), int32(w)
		v.Int = int64(x - (((x % w32) + w32) % w32))
	case srcLong:
		w64 := int64(w)
		v.Int = v.Int - (((v.Int % w64) + w64) % w64)
	case srcDecimal:
		u, bw := v.Decimal.BigInt(), big.NewInt(int64(w))
		r := new(big.Int).Rem(u, bw)
		r.Add(r, bw).Rem(r, bw)
		v.Decimal = decimal128.FromBigInt(u.Sub(u, r))
	case srcString:
		n, i := 0, 0
		for i < len(v.Bytes) && n < w {
			_, size := utf8.DecodeRune(v.Bytes[i:])
			i += size
			n++
		}
		v.Bytes = v.Bytes[:i]
	case srcBinary:
		if len(v.Bytes) > w {
			v.Bytes = v.Bytes[:w]
		}
	}
	return v
}
