package arrowschema

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/internal/panics"
)

// castArray converts arr to type to, for the value conversions the type policy and schema
// evolution make: integers to a wider integer (unsigned ones to a wider signed one), float32 to
// float64, decimal128 to a larger precision of its scale, string and binary views to utf8 and
// binary, and temporal values to another unit of their kind (date32 to date64). A conversion that
// would change a value (one past the target unit's range, or a fraction of it) is an error. Like
// Take it runs in the calling goroutine, a panic its error, where arrow-go's compute.CastArray
// runs its kernel in a goroutine no recover reaches. The result is a new reference.
func castArray(mem memory.Allocator, arr arrow.Array, to arrow.DataType) (arrow.Array, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	var out arrow.Array
	err := panics.Recover(nil, "cast", func() error {
		var err error
		out, err = castValues(mem, arr, to)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cast %s to %s: %w", arr.DataType(), to, err)
	}
	return out, nil
}

func castValues(mem memory.Allocator, arr arrow.Array, to arrow.DataType) (arrow.Array, error) {
	from := arr.DataType()
	switch a := arr.(type) {
	case *array.StringView:
		if to.ID() != arrow.STRING {
			break
		}
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.Reserve(a.Len())
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
			} else {
				b.Append(a.Value(i))
			}
		}
		return b.NewArray(), nil
	case *array.BinaryView:
		if to.ID() != arrow.BINARY {
			break
		}
		b := array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)
		defer b.Release()
		b.Reserve(a.Len())
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
			} else {
				b.Append(a.Value(i))
			}
		}
		return b.NewArray(), nil
	case *array.Float32:
		if to.ID() != arrow.FLOAT64 {
			break
		}
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		b.Reserve(a.Len())
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
			} else {
				b.UnsafeAppend(float64(a.Value(i)))
			}
		}
		return b.NewArray(), nil
	case *array.Decimal128:
		w, ok := to.(*arrow.Decimal128Type)
		f := from.(*arrow.Decimal128Type)
		if !ok || w.Scale != f.Scale || w.Precision < f.Precision {
			break
		}
		// The same unscaled values: a larger precision holds them as they are.
		d := arr.Data()
		nd := array.NewData(to, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
		defer nd.Release()
		return array.MakeFromData(nd), nil
	}
	value, err := integerValues(arr, to)
	if err != nil {
		return nil, err
	}
	return buildIntegers(mem, arr, to, value)
}

// integerValues returns how row i of arr (an integer or temporal array) reads as a value of type
// to, or an error when to is no conversion castArray makes.
func integerValues(arr arrow.Array, to arrow.DataType) (func(i int) (int64, error), error) {
	from := arr.DataType()
	refuse := fmt.Errorf("no conversion from %s to %s", from, to)
	raw := rawIntegers(arr)
	if raw == nil {
		return nil, refuse
	}
	if fw, tw := integerWidth(from), integerWidth(to); fw > 0 && tw > 0 {
		// Widening: every value of the narrower type is one of the wider.
		if tw <= fw || (isSigned(from) && !isSigned(to)) {
			return nil, refuse
		}
		return func(i int) (int64, error) { return raw(i), nil }, nil
	}
	mul, div, ok := unitScale(from, to)
	if !ok {
		return nil, refuse
	}
	return func(i int) (int64, error) { return rescale(raw(i), mul, div) }, nil
}

// unitScale returns the factors of a temporal conversion castArray makes: a value in to's unit is
// one in from's times mul, divided by div.
func unitScale(from, to arrow.DataType) (mul, div int64, ok bool) {
	if from.ID() == arrow.DATE32 && to.ID() == arrow.DATE64 {
		return msPerDay, 1, true
	}
	f, fok := temporalUnit(from)
	t, tok := temporalUnit(to)
	if !fok || !tok || from.ID() == arrow.DATE32 || (from.ID() == arrow.TIMESTAMP) != (to.ID() == arrow.TIMESTAMP) {
		return 0, 0, false
	}
	mul, div = 1, 1
	for u := f; u < t; u++ {
		mul *= 1000
	}
	for u := t; u < f; u++ {
		div *= 1000
	}
	return mul, div, true
}

// temporalUnit returns the unit of a timestamp or time type (0 seconds to 3 nanoseconds).
func temporalUnit(dt arrow.DataType) (arrow.TimeUnit, bool) {
	switch t := dt.(type) {
	case *arrow.TimestampType:
		return t.Unit, true
	case *arrow.Time32Type:
		return t.Unit, true
	case *arrow.Time64Type:
		return t.Unit, true
	}
	return 0, false
}

// rescale returns v*mul/div: an error when the value overflows or is not whole in the target
// unit.
func rescale(v, mul, div int64) (int64, error) {
	if div > 1 {
		if v%div != 0 {
			return 0, fmt.Errorf("value %d is not whole in the target unit", v)
		}
		return v / div, nil
	}
	if v > math.MaxInt64/mul || v < math.MinInt64/mul {
		return 0, fmt.Errorf("value %d overflows the target unit", v)
	}
	return v * mul, nil
}

// rawIntegers returns the integer reading of row i of arr, an integer, date32 or time/timestamp
// array; nil for another type.
func rawIntegers(arr arrow.Array) func(i int) int64 {
	switch a := arr.(type) {
	case *array.Int8:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Int16:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Int32:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Uint8:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Uint16:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Uint32:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Date32:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Timestamp:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Time32:
		return func(i int) int64 { return int64(a.Value(i)) }
	case *array.Time64:
		return func(i int) int64 { return int64(a.Value(i)) }
	}
	return nil
}

// integerWidth is the width in bits of an integer type, 0 for another type.
func integerWidth(dt arrow.DataType) int {
	switch dt.ID() {
	case arrow.INT8, arrow.UINT8:
		return 8
	case arrow.INT16, arrow.UINT16:
		return 16
	case arrow.INT32, arrow.UINT32:
		return 32
	case arrow.INT64, arrow.UINT64:
		return 64
	}
	return 0
}

func isSigned(dt arrow.DataType) bool {
	switch dt.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return true
	}
	return false
}

// buildIntegers builds the array of type to whose row i is value(i), null where arr is.
func buildIntegers(mem memory.Allocator, arr arrow.Array, to arrow.DataType, value func(int) (int64, error)) (arrow.Array, error) {
	b := array.NewBuilder(mem, to)
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		v, err := value(i)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		switch b := b.(type) {
		case *array.Int16Builder:
			b.UnsafeAppend(int16(v))
		case *array.Int32Builder:
			b.UnsafeAppend(int32(v))
		case *array.Int64Builder:
			b.UnsafeAppend(v)
		case *array.Uint16Builder:
			b.UnsafeAppend(uint16(v))
		case *array.Uint32Builder:
			b.UnsafeAppend(uint32(v))
		case *array.Uint64Builder:
			b.UnsafeAppend(uint64(v))
		case *array.Date64Builder:
			b.UnsafeAppend(arrow.Date64(v))
		case *array.TimestampBuilder:
			b.UnsafeAppend(arrow.Timestamp(v))
		case *array.Time32Builder:
			if v > math.MaxInt32 || v < math.MinInt32 {
				return nil, fmt.Errorf("row %d: value %d overflows %s", i, v, to)
			}
			b.UnsafeAppend(arrow.Time32(v))
		case *array.Time64Builder:
			b.UnsafeAppend(arrow.Time64(v))
		default:
			return nil, fmt.Errorf("no conversion from %s to %s", arr.DataType(), to)
		}
	}
	return b.NewArray(), nil
}
