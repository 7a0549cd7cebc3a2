package arrowschema

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/internal/panics"
)

// Row selection (take and filter) of every type the type policy stores, nested ones included, for
// each path that selects rows: deletions and filters on a scan, MemWAL routing and reads, the
// expansion of dictionaries and runs on the way in. It runs in the calling goroutine: arrow-go's
// compute functions run their kernels in goroutines they start (compute.CallFunction, and the
// errgroups of FilterRecordBatch and of struct Take), where a panic cannot be recovered and ends
// the process; here a panic is the operation's error (panics.Recover).

// Index is the type of the row indices Take reads.
type Index interface{ ~int32 | ~int64 }

// Take returns the rows of arr that indices name, in that order; a negative index is a null row.
// An index past arr's end is an error. The result is a new reference, its buffers allocated from
// mem (memory.DefaultAllocator when nil).
func Take[I Index](mem memory.Allocator, arr arrow.Array, indices []I) (arrow.Array, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	var out arrow.Array
	err := panics.Recover(nil, "take rows", func() error {
		d, err := takeData(mem, arr.Data(), indices)
		if err != nil {
			return err
		}
		defer d.Release()
		out = array.MakeFromData(d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("take %d rows of %s: %w", len(indices), arr.DataType(), err)
	}
	return out, nil
}

// TakeRecord returns the rows keep (non-negative, ascending) of rec. A keep that is one run of
// rows is a slice of rec, without a copy. The caller releases the result.
func TakeRecord(mem memory.Allocator, rec arrow.RecordBatch, keep []int32) (arrow.RecordBatch, error) {
	if len(keep) > 0 && int(keep[len(keep)-1]-keep[0]) == len(keep)-1 && keep[0] >= 0 {
		return rec.NewSlice(int64(keep[0]), int64(keep[len(keep)-1])+1), nil // one run: no copy
	}
	cols := make([]arrow.Array, 0, rec.NumCols())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i, c := range rec.Columns() {
		out, err := Take(mem, c, keep)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", rec.Schema().Field(i).Name, err)
		}
		cols = append(cols, out)
	}
	return array.NewRecordBatch(rec.Schema(), cols, int64(len(keep))), nil
}

// FilterRecord returns the rows of rec whose mask entry is true, or nil when there is none; rec
// itself (retained) when every row is. The caller releases the result.
func FilterRecord(mem memory.Allocator, rec arrow.RecordBatch, mask []bool) (arrow.RecordBatch, error) {
	if len(mask) != int(rec.NumRows()) {
		return nil, fmt.Errorf("filter of %d rows for a batch of %d", len(mask), rec.NumRows())
	}
	keep := make([]int32, 0, len(mask))
	for i, ok := range mask {
		if ok {
			keep = append(keep, int32(i))
		}
	}
	switch len(keep) {
	case 0:
		return nil, nil
	case len(mask):
		rec.Retain()
		return rec, nil
	}
	return TakeRecord(mem, rec, keep)
}

// takeData returns the rows indices of d (relative to d's offset; negative is null).
func takeData[I Index](mem memory.Allocator, d arrow.ArrayData, indices []I) (arrow.ArrayData, error) {
	n, off, length := len(indices), d.Offset(), d.Len()
	for _, i := range indices {
		if int64(i) >= int64(length) {
			return nil, fmt.Errorf("row %d of an array of %d", i, length)
		}
	}
	dt := d.DataType()
	if dt.ID() == arrow.NULL {
		return array.NewData(dt, n, []*memory.Buffer{nil}, nil, n, 0), nil
	}
	valid, nulls := takeValidity(mem, d, indices)
	defer func() {
		if valid != nil {
			valid.Release()
		}
	}()
	maybeNull := hasNulls(d)
	isNull := func(i I) bool { return i < 0 || (maybeNull && bitutil.BitIsNotSet(validBits(d), off+int(i))) }
	switch t := dt.(type) {
	case arrow.ExtensionType:
		storage := array.NewData(t.StorageType(), length, d.Buffers(), d.Children(), d.NullN(), off)
		defer storage.Release()
		sd, err := takeData(mem, storage, indices)
		if err != nil {
			return nil, err
		}
		defer sd.Release()
		return array.NewData(dt, n, sd.Buffers(), sd.Children(), sd.NullN(), 0), nil
	case *arrow.DictionaryType:
		idx := array.NewData(t.IndexType, length, d.Buffers(), nil, d.NullN(), off)
		defer idx.Release()
		id, err := takeData(mem, idx, indices)
		if err != nil {
			return nil, err
		}
		defer id.Release()
		nd := array.NewData(dt, n, id.Buffers(), nil, id.NullN(), 0)
		nd.SetDictionary(d.Dictionary())
		return nd, nil
	case *arrow.BooleanType:
		vals := newBuffer(mem, int(bitutil.BytesForBits(int64(n))))
		defer vals.Release()
		src, dst := bufferBytes(d, 1), vals.Bytes()
		for j, i := range indices {
			if i >= 0 && bitutil.BitIsSet(src, off+int(i)) {
				bitutil.SetBit(dst, j)
			}
		}
		return array.NewData(dt, n, []*memory.Buffer{valid, vals}, nil, nulls, 0), nil
	case arrow.FixedWidthDataType:
		w := t.BitWidth() / 8
		if t.BitWidth()%8 != 0 || w == 0 {
			return nil, fmt.Errorf("unsupported type %s", dt)
		}
		vals := newBuffer(mem, n*w)
		defer vals.Release()
		src, dst := bufferBytes(d, 1), vals.Bytes()
		for j, i := range indices {
			if i >= 0 {
				s := (off + int(i)) * w
				copy(dst[j*w:(j+1)*w], src[s:s+w])
			}
		}
		return array.NewData(dt, n, []*memory.Buffer{valid, vals}, nil, nulls, 0), nil
	case *arrow.StringType, *arrow.BinaryType:
		return takeVarBinary[int32](mem, d, indices, isNull, valid, nulls)
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		return takeVarBinary[int64](mem, d, indices, isNull, valid, nulls)
	case *arrow.ListType, *arrow.MapType:
		return takeList[int32](mem, d, indices, isNull, valid, nulls)
	case *arrow.LargeListType:
		return takeList[int64](mem, d, indices, isNull, valid, nulls)
	case *arrow.FixedSizeListType:
		size := int64(t.Len())
		child := make([]int64, 0, int64(n)*size)
		for _, i := range indices {
			for k := int64(0); k < size; k++ {
				if i < 0 {
					child = append(child, -1)
				} else {
					child = append(child, (int64(off)+int64(i))*size+k)
				}
			}
		}
		cd, err := takeData(mem, d.Children()[0], child)
		if err != nil {
			return nil, err
		}
		defer cd.Release()
		return array.NewData(dt, n, []*memory.Buffer{valid}, []arrow.ArrayData{cd}, nulls, 0), nil
	case *arrow.StructType:
		// A struct's children are indexed by the struct's offset plus the row.
		abs := make([]int64, n)
		for j, i := range indices {
			abs[j] = -1
			if i >= 0 {
				abs[j] = int64(off) + int64(i)
			}
		}
		children := make([]arrow.ArrayData, 0, len(d.Children()))
		defer func() {
			for _, c := range children {
				c.Release()
			}
		}()
		for _, c := range d.Children() {
			cd, err := takeData(mem, c, abs)
			if err != nil {
				return nil, err
			}
			children = append(children, cd)
		}
		return array.NewData(dt, n, []*memory.Buffer{valid}, children, nulls, 0), nil
	}
	return nil, fmt.Errorf("unsupported type %s", dt)
}

// takeVarBinary takes the rows of a binary or string array with offsets of type O.
func takeVarBinary[O int32 | int64, I Index](mem memory.Allocator, d arrow.ArrayData, indices []I, isNull func(I) bool, valid *memory.Buffer, nulls int) (arrow.ArrayData, error) {
	n, off := len(indices), d.Offset()
	srcOff := arrow.GetData[O](bufferBytes(d, 1))
	src := bufferBytes(d, 2)
	total := 0
	for _, i := range indices {
		if !isNull(i) {
			total += int(srcOff[off+int(i)+1] - srcOff[off+int(i)])
		}
	}
	if int64(total) > math.MaxInt32 && isInt32[O]() {
		return nil, fmt.Errorf("%d bytes of values overflow 32-bit offsets", total)
	}
	offsets := newBuffer(mem, (n+1)*sizeOf[O]())
	defer offsets.Release()
	data := newBuffer(mem, total)
	defer data.Release()
	dstOff, dst := arrow.GetData[O](offsets.Bytes()), data.Bytes()
	pos := 0
	for j, i := range indices {
		dstOff[j] = O(pos)
		if isNull(i) {
			continue // a null row holds no bytes, whatever its source offsets say
		}
		pos += copy(dst[pos:], src[srcOff[off+int(i)]:srcOff[off+int(i)+1]])
	}
	dstOff[n] = O(pos)
	return array.NewData(d.DataType(), n, []*memory.Buffer{valid, offsets, data}, nil, nulls, 0), nil
}

// takeList takes the rows of a list or map array with offsets of type O: new offsets, and the
// child's rows the taken lists hold.
func takeList[O int32 | int64, I Index](mem memory.Allocator, d arrow.ArrayData, indices []I, isNull func(I) bool, valid *memory.Buffer, nulls int) (arrow.ArrayData, error) {
	n, off := len(indices), d.Offset()
	srcOff := arrow.GetData[O](bufferBytes(d, 1))
	total := 0
	for _, i := range indices {
		if !isNull(i) {
			total += int(srcOff[off+int(i)+1] - srcOff[off+int(i)])
		}
	}
	if int64(total) > math.MaxInt32 && isInt32[O]() {
		return nil, fmt.Errorf("%d list elements overflow 32-bit offsets", total)
	}
	offsets := newBuffer(mem, (n+1)*sizeOf[O]())
	defer offsets.Release()
	dstOff := arrow.GetData[O](offsets.Bytes())
	child := make([]int64, 0, total)
	for j, i := range indices {
		dstOff[j] = O(len(child))
		if isNull(i) {
			continue // a null list holds no elements, whatever its source offsets say
		}
		for k := int64(srcOff[off+int(i)]); k < int64(srcOff[off+int(i)+1]); k++ {
			child = append(child, k)
		}
	}
	dstOff[n] = O(len(child))
	cd, err := takeData(mem, d.Children()[0], child)
	if err != nil {
		return nil, err
	}
	defer cd.Release()
	return array.NewData(d.DataType(), n, []*memory.Buffer{valid, offsets}, []arrow.ArrayData{cd}, nulls, 0), nil
}

// takeValidity returns the validity bitmap of the rows indices of d and their null count; a nil
// bitmap when no row is null.
func takeValidity[I Index](mem memory.Allocator, d arrow.ArrayData, indices []I) (*memory.Buffer, int) {
	n, off := len(indices), d.Offset()
	var src []byte
	if hasNulls(d) {
		src = validBits(d)
	}
	nulls := 0
	for _, i := range indices {
		if i < 0 || (src != nil && bitutil.BitIsNotSet(src, off+int(i))) {
			nulls++
		}
	}
	if nulls == 0 {
		return nil, 0
	}
	buf := newBuffer(mem, int(bitutil.BytesForBits(int64(n))))
	dst := buf.Bytes()
	for j, i := range indices {
		if i >= 0 && (src == nil || bitutil.BitIsSet(src, off+int(i))) {
			bitutil.SetBit(dst, j)
		}
	}
	return buf, nulls
}

// hasNulls reports whether d may hold a null row: it has a validity bitmap and its null count is
// not 0 (a slice's count is unknown, -1, until an array counts it). Every type Take reads keeps
// its nulls in the bitmap.
func hasNulls(d arrow.ArrayData) bool {
	b := d.Buffers()
	return len(b) > 0 && b[0] != nil && d.NullN() != 0
}

// bufferBytes returns the bytes of d's buffer i; nil when d has no such buffer (an empty array
// may carry none).
func bufferBytes(d arrow.ArrayData, i int) []byte {
	if b := d.Buffers(); i < len(b) && b[i] != nil {
		return b[i].Bytes()
	}
	return nil
}

// validBits returns the validity bitmap of d, which hasNulls.
func validBits(d arrow.ArrayData) []byte { return d.Buffers()[0].Bytes() }

// newBuffer returns a zeroed buffer of n bytes from mem.
func newBuffer(mem memory.Allocator, n int) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	return b
}

// sizeOf is the width of an offset of type O in bytes.
func sizeOf[O int32 | int64]() int {
	var o O
	return int(unsafe.Sizeof(o))
}

func isInt32[O int32 | int64]() bool { return sizeOf[O]() == 4 }
