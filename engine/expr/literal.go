package expr

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// ConstantArray returns an array of n copies of literal v in column f's type, typed as a
// predicate literal is (see Predicate); a nil v is n nulls (refused for a non-nullable column).
func ConstantArray(mem memory.Allocator, f arrow.Field, v any, n int) (arrow.Array, error) {
	b := array.NewBuilder(mem, f.Type)
	defer b.Release()
	if v == nil {
		if !f.Nullable {
			return nil, fmt.Errorf("%w: column %q is not nullable, cannot set it to null", arrowschema.ErrSchemaMismatch, f.Name)
		}
		b.AppendNulls(n)
		return b.NewArray(), nil
	}
	k, err := kindOf(f)
	if err != nil {
		return nil, fmt.Errorf("cannot set column %q: its type %s takes no literal", f.Name, f.Type)
	}
	lit, err := convertLiteral(f, k, v)
	if err != nil {
		return nil, err
	}
	appendOne := func() error { return fmt.Errorf("cannot set column %q of type %s", f.Name, f.Type) }
	switch bb := b.(type) {
	case *array.Int8Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int8(lit.i), f) }
	case *array.Int16Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int16(lit.i), f) }
	case *array.Int32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int32(lit.i), f) }
	case *array.Int64Builder:
		appendOne = func() error { bb.Append(lit.i); return nil }
	case *array.Uint8Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint8(lit.i), f) }
	case *array.Uint16Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint16(lit.i), f) }
	case *array.Uint32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint32(lit.i), f) }
	case *array.Uint64Builder:
		appendOne = func() error { bb.Append(lit.u); return nil }
	case *array.Float32Builder:
		appendOne = func() error { bb.Append(float32(lit.f)); return nil }
	case *array.Float64Builder:
		appendOne = func() error { bb.Append(lit.f); return nil }
	case *array.StringBuilder:
		appendOne = func() error { bb.Append(lit.s); return nil }
	case *array.LargeStringBuilder:
		appendOne = func() error { bb.Append(lit.s); return nil }
	case *array.BinaryBuilder:
		appendOne = func() error { bb.AppendString(lit.s); return nil }
	case *array.BooleanBuilder:
		appendOne = func() error { bb.Append(lit.b); return nil }
	case *array.Decimal128Builder:
		appendOne = func() error {
			if lit.dec.between {
				return fmt.Errorf("literal %v has more fractional digits than column %q (%s) holds", v, f.Name, f.Type)
			}
			bb.Append(lit.dec.d)
			return nil
		}
	case *array.Date32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, arrow.Date32(lit.i), f) }
	case *array.Date64Builder:
		appendOne = func() error { bb.Append(arrow.Date64(lit.i)); return nil }
	case *array.TimestampBuilder:
		appendOne = func() error { bb.Append(arrow.Timestamp(lit.i)); return nil }
	case *array.Time32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, arrow.Time32(lit.i), f) }
	case *array.Time64Builder:
		appendOne = func() error { bb.Append(arrow.Time64(lit.i)); return nil }
	case *array.DurationBuilder:
		appendOne = func() error { bb.Append(arrow.Duration(lit.i)); return nil }
	}
	for range n {
		if err := appendOne(); err != nil {
			return nil, err
		}
	}
	return b.NewArray(), nil
}

// appendChecked appends narrow (wide converted to the column's type) if the conversion kept the
// value.
func appendChecked[T int8 | int16 | int32 | uint8 | uint16 | uint32 | arrow.Date32 | arrow.Time32](app func(T), wide int64, narrow T, f arrow.Field) error {
	if int64(narrow) != wide {
		return fmt.Errorf("literal %d does not fit column %q (%s)", wide, f.Name, f.Type)
	}
	app(narrow)
	return nil
}
