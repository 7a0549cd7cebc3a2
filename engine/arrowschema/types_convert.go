package arrowschema

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/internal/panics"
)

// StoreBatch admits rec, a batch a client sent, as a batch of stored, the schema StoredSchema (or
// StoredSchemaFor) returned for rec's schema: every column of a converted type (view, dictionary,
// run-end-encoded, decimal32/64, or a nested type holding one) becomes its stored type with the
// same values, and a field stored's schema declares not null where rec's declares it nullable
// (StoredSchemaFor adopts the table's) is relabelled so. It is the one door of client data:
// rec's layout is checked before anything reads its values, and the result's values against
// what stored declares (CheckBatch: nullability at every level, decimal precision, UTF-8,
// offsets and lengths), so a batch whose data its schema does not describe is refused with an
// error wrapping ErrDataMismatch naming the column, before anything stores it. It returns rec
// itself, retained, when the schemas are the same. The caller releases the result. A batch that
// cannot be converted (invalid data) is an error wrapping ErrSchemaMismatch naming the column; a
// panic in the conversion kernels is an error too. The conversion holds at most limit bytes of
// new buffers (0: DefaultMaxIPCMessageBytes); past it the batch is refused with an error
// wrapping ErrBatchTooLarge, since a small batch of converted types can expand without bound.
func StoreBatch(ctx context.Context, mem memory.Allocator, stored *arrow.Schema, rec arrow.RecordBatch, limit int64) (out arrow.RecordBatch, err error) {
	if err := checkLayout(rec); err != nil {
		return nil, err
	}
	if rec.Schema() == stored || rec.Schema().Equal(stored) {
		if err := checkValues(rec); err != nil {
			return nil, err
		}
		rec.Retain()
		return rec, nil
	}
	if int(rec.NumCols()) != stored.NumFields() {
		return nil, fmt.Errorf("%w: batch has %d columns, its schema %d", ErrSchemaMismatch, rec.NumCols(), stored.NumFields())
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	if limit <= 0 {
		limit = DefaultMaxIPCMessageBytes
	}
	cols := make([]arrow.Array, 0, rec.NumCols())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	err = panics.Recover(nil, "convert batch to stored types", func() error {
		for i, col := range rec.Columns() {
			f := stored.Field(i)
			if !arrow.TypeEqual(col.DataType(), f.Type) {
				// Measured before converting: running out of memory is not an error anyone can
				// catch.
				if err := checkExpansion(f.Name, col, limit); err != nil {
					return err
				}
			}
			c, err := storeArray(ctx, mem, col, f.Type)
			if err == nil && !arrow.TypeEqual(c.DataType(), f.Type) {
				// A conversion kernel (a dictionary's take, ...) gives its own nested
				// nullability: relabel the result as stored declares it.
				var r arrow.Array
				r, err = storeArray(ctx, mem, c, f.Type)
				c.Release()
				c = r
			}
			if err == nil && !arrow.TypeEqual(c.DataType(), f.Type) {
				c.Release()
				err = fmt.Errorf("the result is %s", c.DataType())
			}
			if err != nil {
				return fmt.Errorf("%w: column %q: convert %s to %s: %v", ErrSchemaMismatch, f.Name, col.DataType(), f.Type, err)
			}
			cols = append(cols, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out = array.NewRecordBatch(stored, cols, rec.NumRows())
	if err := checkValues(out); err != nil {
		out.Release()
		return nil, err
	}
	return out, nil
}

// storeArray converts arr to type to (StoredType of arr's type). The result is a new reference.
func storeArray(ctx context.Context, mem memory.Allocator, arr arrow.Array, to arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(arr.DataType(), to) {
		arr.Retain()
		return arr, nil
	}
	switch a := arr.(type) {
	case *array.Dictionary:
		dict, err := storeArray(ctx, mem, a.Dictionary(), to)
		if err != nil {
			return nil, err
		}
		defer dict.Release()
		idx, err := dictionaryIndices(a)
		if err != nil {
			return nil, err
		}
		return Take(mem, dict, idx)
	case *array.RunEndEncoded:
		values, err := storeArray(ctx, mem, a.Values(), to)
		if err != nil {
			return nil, err
		}
		defer values.Release()
		idx := make([]int64, a.Len())
		for i := range idx {
			idx[i] = int64(a.GetPhysicalIndex(i))
		}
		return Take(mem, values, idx)
	case *array.StringView, *array.BinaryView:
		return castArray(mem, arr, to)
	case *array.Decimal32:
		return widenDecimal(mem, a, to, func(i int) int64 { return int64(a.Value(i)) })
	case *array.Decimal64:
		return widenDecimal(mem, a, to, func(i int) int64 { return int64(a.Value(i)) })
	case *array.Uint8, *array.Uint16, *array.Uint32:
		return castArray(mem, arr, to)
	case *array.Float16:
		b := array.NewFloat32Builder(mem)
		defer b.Release()
		b.Reserve(a.Len())
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.UnsafeAppendBoolToBitmap(false)
			} else {
				b.UnsafeAppend(a.Value(i).Float32())
			}
		}
		return b.NewArray(), nil
	case *array.Date64:
		return convertInt64s(mem, a, a.Len(), to, func(i int) (int64, error) {
			ms := int64(a.Value(i))
			if ms%msPerDay != 0 {
				return 0, fmt.Errorf("row %d: date64 value %d ms is not a whole day (a multiple of %d ms)", i, ms, msPerDay)
			}
			return ms / msPerDay, nil
		})
	case *array.Timestamp:
		mul, div := toMicros(a.DataType().(*arrow.TimestampType).Unit)
		return convertInt64s(mem, a, a.Len(), to, func(i int) (int64, error) {
			return scaleToMicros(i, int64(a.Value(i)), mul, div)
		})
	case *array.Time32:
		mul, div := toMicros(a.DataType().(*arrow.Time32Type).Unit)
		return convertInt64s(mem, a, a.Len(), to, func(i int) (int64, error) {
			return scaleToMicros(i, int64(a.Value(i)), mul, div)
		})
	case *array.Time64:
		mul, div := toMicros(a.DataType().(*arrow.Time64Type).Unit)
		return convertInt64s(mem, a, a.Len(), to, func(i int) (int64, error) {
			return scaleToMicros(i, int64(a.Value(i)), mul, div)
		})
	case *array.Decimal256:
		b := array.NewDecimal128Builder(mem, to.(*arrow.Decimal128Type))
		defer b.Release()
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
				continue
			}
			w := a.Value(i).Array() // little-endian 64-bit words
			hi := int64(w[1])
			ext := uint64(hi >> 63) // the sign extension of a value that fits 128 bits
			if w[2] != ext || w[3] != ext {
				return nil, fmt.Errorf("row %d: decimal256 value does not fit decimal128", i)
			}
			b.Append(decimal128.New(hi, w[0]))
		}
		return b.NewArray(), nil
	case array.ExtensionArray:
		if st, ok := a.Storage().(*array.Int8); ok && to.ID() == arrow.BOOL { // arrow.bool8
			b := array.NewBooleanBuilder(mem)
			defer b.Release()
			b.Reserve(st.Len())
			for i := 0; i < st.Len(); i++ {
				if st.IsNull(i) {
					b.UnsafeAppendBoolToBitmap(false)
				} else {
					b.UnsafeAppend(st.Value(i) != 0)
				}
			}
			return b.NewArray(), nil
		}
		if arrow.TypeEqual(a.Storage().DataType(), to) {
			st := a.Storage()
			st.Retain()
			return st, nil
		}
		return storeArray(ctx, mem, a.Storage(), to)
	case *array.ListView:
		return listViewToList(ctx, mem, a, to)
	case *array.LargeListView:
		return listViewToList(ctx, mem, a, to)
	}
	// A nested type stored with converted children: convert the children whole and keep the
	// parent's own buffers (validity, offsets) and offset, which still describe them.
	return WithChildren(arr, to, func(child arrow.Array, to arrow.DataType) (arrow.Array, error) {
		return storeArray(ctx, mem, child, to)
	})
}

// msPerDay is the number of milliseconds of a date64 day.
const msPerDay = 86400000

// toMicros returns the factor a value of unit u is multiplied (mul) or divided (div) by to become
// microseconds; the other is 1.
func toMicros(u arrow.TimeUnit) (mul, div int64) {
	switch u {
	case arrow.Second:
		return 1_000_000, 1
	case arrow.Millisecond:
		return 1_000, 1
	case arrow.Nanosecond:
		return 1, 1_000
	}
	return 1, 1
}

// scaleToMicros returns v*mul/div: a multiplication that overflows int64 is an error naming row
// i, a division truncates toward the past (floor), as Spark and Delta keep nanoseconds.
func scaleToMicros(i int, v, mul, div int64) (int64, error) {
	if mul != 1 {
		if v > math.MaxInt64/mul || v < math.MinInt64/mul {
			return 0, fmt.Errorf("row %d: value %d is out of the range of microseconds", i, v)
		}
		return v * mul, nil
	}
	q := v / div
	if v%div < 0 {
		q--
	}
	return q, nil
}

// convertInt64s builds the array to (a type of 32- or 64-bit integer storage: date32, time64,
// timestamp) from arr's rows, row i's value being value(i); nulls stay null.
func convertInt64s(mem memory.Allocator, arr arrow.Array, n int, to arrow.DataType, value func(int) (int64, error)) (arrow.Array, error) {
	b := array.NewBuilder(mem, to)
	defer b.Release()
	b.Reserve(n)
	for i := 0; i < n; i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		v, err := value(i)
		if err != nil {
			return nil, err
		}
		switch tb := b.(type) {
		case *array.Date32Builder:
			if v > math.MaxInt32 || v < math.MinInt32 {
				return nil, fmt.Errorf("row %d: %d days is out of the range of date32", i, v)
			}
			tb.UnsafeAppend(arrow.Date32(v))
		case *array.Time64Builder:
			tb.UnsafeAppend(arrow.Time64(v))
		case *array.TimestampBuilder:
			tb.UnsafeAppend(arrow.Timestamp(v))
		default:
			return nil, fmt.Errorf("no conversion from %s to %s", arr.DataType(), to)
		}
	}
	return b.NewArray(), nil
}

// widenDecimal builds the decimal128 array to (same precision and scale) from a decimal32 or
// decimal64 array whose unscaled value i is value(i).
func widenDecimal(mem memory.Allocator, arr arrow.Array, to arrow.DataType, value func(int) int64) (arrow.Array, error) {
	b := array.NewDecimal128Builder(mem, to.(*arrow.Decimal128Type))
	defer b.Release()
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
		} else {
			b.Append(decimal128.FromI64(value(i)))
		}
	}
	return b.NewArray(), nil
}

// WithChildren returns arr as type to, a nested type of the same layout, with each child replaced
// by convert(child, to's child type); the parent's own buffers (validity, offsets) and offset are
// kept, since they still describe the converted children. The result is a new reference.
func WithChildren(arr arrow.Array, to arrow.DataType, convert func(arrow.Array, arrow.DataType) (arrow.Array, error)) (arrow.Array, error) {
	d := arr.Data()
	var childTypes []arrow.DataType
	switch t := to.(type) {
	case arrow.ListLikeType: // list, large_list, fixed_size_list, map
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.StructType:
		for _, f := range t.Fields() {
			childTypes = append(childTypes, f.Type)
		}
	default:
		return nil, fmt.Errorf("no conversion from %s to %s", arr.DataType(), to)
	}
	if len(d.Children()) != len(childTypes) {
		return nil, fmt.Errorf("%s has %d children, %s %d", arr.DataType(), len(d.Children()), to, len(childTypes))
	}
	children := make([]arrow.ArrayData, 0, len(childTypes))
	defer func() {
		for _, c := range children {
			c.Release()
		}
	}()
	for i, cd := range d.Children() {
		ca := array.MakeFromData(cd)
		c, err := convert(ca, childTypes[i])
		ca.Release()
		if err != nil {
			return nil, err
		}
		cdata := c.Data()
		cdata.Retain()
		c.Release()
		children = append(children, cdata)
	}
	nd := array.NewData(to, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	defer nd.Release()
	return array.MakeFromData(nd), nil
}

// listViewToList converts a list view into the list (or large list) to: the elements of each
// view, in row order, become the new child, and null rows become empty.
func listViewToList(ctx context.Context, mem memory.Allocator, a array.VarLenListLike, to arrow.DataType) (arrow.Array, error) {
	var elem arrow.DataType
	large := false
	switch t := to.(type) {
	case *arrow.ListType:
		elem = t.Elem()
	case *arrow.LargeListType:
		elem, large = t.Elem(), true
	default:
		return nil, fmt.Errorf("no conversion from %s to %s", a.DataType(), to)
	}
	n := a.Len()
	var idx []int64
	offsets := make([]int64, n+1)
	for i := 0; i < n; i++ {
		if a.IsValid(i) {
			start, end := a.ValueOffsets(i)
			for j := start; j < end; j++ {
				idx = append(idx, j)
			}
		}
		offsets[i+1] = int64(len(idx))
	}
	var values arrow.Array
	switch lv := a.(type) {
	case *array.ListView:
		values = lv.ListValues()
	case *array.LargeListView:
		values = lv.ListValues()
	default:
		return nil, fmt.Errorf("no conversion from %s to %s", a.DataType(), to)
	}
	child, err := storeArray(ctx, mem, values, elem)
	if err != nil {
		return nil, err
	}
	defer child.Release()
	taken, err := Take(mem, child, idx)
	if err != nil {
		return nil, err
	}
	defer taken.Release()
	var offBuf *memory.Buffer
	if large {
		offBuf = memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(offsets))
	} else {
		if offsets[n] > int64(^uint32(0)>>1) {
			return nil, fmt.Errorf("%d list elements do not fit the 32-bit offsets of %s; send large_list_view", offsets[n], to)
		}
		off32 := make([]int32, n+1)
		for i, o := range offsets {
			off32[i] = int32(o)
		}
		offBuf = memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(off32))
	}
	var valid *memory.Buffer
	nulls := a.NullN()
	if nulls > 0 {
		bm := make([]byte, bitutil.BytesForBits(int64(n)))
		for i := 0; i < n; i++ {
			if a.IsValid(i) {
				bitutil.SetBit(bm, i)
			}
		}
		valid = memory.NewBufferBytes(bm)
	}
	d := array.NewData(to, n, []*memory.Buffer{valid, offBuf}, []arrow.ArrayData{taken.Data()}, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

// dictionaryIndices returns the indices of a dictionary array as row numbers of its dictionary,
// -1 for a null row.
func dictionaryIndices(a *array.Dictionary) ([]int64, error) {
	idx := make([]int64, a.Len())
	for i := range idx {
		idx[i] = -1
		if a.IsValid(i) {
			j := a.GetValueIndex(i)
			if j < 0 {
				return nil, fmt.Errorf("dictionary index %d of row %d", j, i)
			}
			idx[i] = int64(j)
		}
	}
	return idx, nil
}
