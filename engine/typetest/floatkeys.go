package typetest

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// FloatKey is one floating-point primary-key value, given by its bit pattern so that NaN
// payloads and the sign of zero survive, and the key class it belongs to: values of one class are
// one primary key (expr.KeyEncoder), values of different classes are different keys.
type FloatKey struct {
	Class string
	Bits  uint64 // a float64's bits, or a float32's in the low 32 bits
}

// FloatKeys returns the sample keys of a FLOAT32 or FLOAT64 column: -0.0 and 0.0 (class "0"), NaNs
// of several signs and payloads, quiet and signaling (class "NaN"), and 1, -1 and +Inf, one class
// each.
func FloatKeys(id arrow.Type) []FloatKey {
	if id == arrow.FLOAT32 {
		return []FloatKey{
			{"0", uint64(math.Float32bits(0))},
			{"NaN", 0x7fc00000},
			{"1", uint64(math.Float32bits(1))},
			{"0", uint64(math.Float32bits(float32(math.Copysign(0, -1))))},
			{"NaN", 0x7fc00001},
			{"-1", uint64(math.Float32bits(-1))},
			{"NaN", 0xffc00000},
			{"+Inf", uint64(math.Float32bits(float32(math.Inf(1))))},
			{"NaN", 0x7f800001}, // signaling
		}
	}
	return []FloatKey{
		{"0", math.Float64bits(0)},
		{"NaN", 0x7ff8000000000000},
		{"1", math.Float64bits(1)},
		{"0", math.Float64bits(math.Copysign(0, -1))},
		{"NaN", math.Float64bits(math.NaN())}, // Go's NaN: 0x7ff8000000000001
		{"-1", math.Float64bits(-1)},
		{"NaN", 0xfff8000000000000},
		{"+Inf", math.Float64bits(math.Inf(1))},
		{"NaN", 0x7ff0000000000001}, // signaling
	}
}

// Append appends k to b, a Float32Builder or Float64Builder.
func (k FloatKey) Append(b array.Builder) {
	switch b := b.(type) {
	case *array.Float32Builder:
		b.Append(math.Float32frombits(uint32(k.Bits)))
	case *array.Float64Builder:
		b.Append(math.Float64frombits(k.Bits))
	default:
		panic(fmt.Sprintf("typetest: FloatKey.Append to a %T", b))
	}
}

// FloatKeyClass returns the class of row i of a float column, as FloatKeys names it.
func FloatKeyClass(a arrow.Array, i int) string {
	var f float64
	switch a := a.(type) {
	case *array.Float32:
		f = float64(a.Value(i))
	case *array.Float64:
		f = a.Value(i)
	default:
		panic(fmt.Sprintf("typetest: FloatKeyClass of a %T", a))
	}
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case f == 0:
		return "0" // either sign
	}
	return fmt.Sprint(f)
}
