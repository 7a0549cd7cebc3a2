package arrowschema

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrBatchTooLarge: a batch would take more memory once converted to stored types than the limit
// allows. A few bytes on the wire can describe gigabytes of values: a dictionary whose indices all
// name one large value, a run-end-encoded column of one run over billions of rows, string or list
// views that all point at one region. StoreBatch measures what a column expands to before it
// converts it, and refuses past the limit.
var ErrBatchTooLarge = errors.New("batch too large once converted")

// expansion measures, without allocating, how many bytes the values of an array take once stored
// as plain types (offsets and values; validity bitmaps aside). It stops counting once it passes
// limit, so a view or run that names the same huge region many times costs at most limit/8 steps.
type expansion struct {
	limit, total int64
}

func (e *expansion) over() bool { return e.total > e.limit }

// column adds every row of arr.
func (e *expansion) column(arr arrow.Array) {
	if ree, ok := arr.(*array.RunEndEncoded); ok {
		// By runs: a run of a billion rows is one step, not a billion.
		ends := ree.LogicalRunEndsArray(memory.DefaultAllocator)
		defer ends.Release()
		values := ree.LogicalValuesArray()
		defer values.Release()
		start := int64(0)
		for r := 0; r < values.Len() && !e.over(); r++ {
			var end int64
			switch a := ends.(type) {
			case *array.Int16:
				end = int64(a.Value(r))
			case *array.Int32:
				end = int64(a.Value(r))
			case *array.Int64:
				end = a.Value(r)
			}
			end = min(end, int64(arr.Len())) // the last run may reach past a slice's end
			if end <= start {
				continue
			}
			before := e.total
			e.element(values, r)
			e.total = before + (e.total-before)*(end-start)
			if e.total < before { // overflow
				e.total = e.limit + 1
			}
			start = end
		}
		return
	}
	for i := 0; i < arr.Len() && !e.over(); i++ {
		e.element(arr, i)
	}
}

// element adds row i of arr.
func (e *expansion) element(arr arrow.Array, i int) {
	if arr.IsNull(i) {
		e.total += 8
		return
	}
	switch a := arr.(type) {
	case *array.Dictionary:
		e.element(a.Dictionary(), a.GetValueIndex(i))
	case *array.RunEndEncoded:
		e.element(a.Values(), a.GetPhysicalIndex(i))
	case interface{ ValueLen(int) int }: // binary and string kinds, views included
		e.total += int64(a.ValueLen(i)) + 8 // the value and its offset
	case array.VarLenListLike: // list, large list, list view, map, fixed-size list (8 bytes each, as an offset)
		start, end := a.ValueOffsets(i)
		e.total += 8
		child := a.ListValues()
		for k := start; k < end && !e.over(); k++ {
			e.element(child, int(k))
		}
	case *array.Struct:
		for f := 0; f < a.NumField() && !e.over(); f++ {
			e.element(a.Field(f), i)
		}
	default:
		if fw, ok := arr.DataType().(arrow.FixedWidthDataType); ok {
			e.total += int64(max(fw.BitWidth()/8, 1))
		} else {
			e.total += 8
		}
	}
}

// checkExpansion refuses a column whose stored form would pass limit bytes.
func checkExpansion(name string, arr arrow.Array, limit int64) error {
	e := expansion{limit: limit}
	e.column(arr)
	if e.over() {
		return fmt.Errorf("%w: column %q would take more than %d bytes stored as plain values (the server's --max-decoded-message-bytes); send plain (not dictionary, run-end-encoded or view) columns or smaller batches", ErrBatchTooLarge, name, limit)
	}
	return nil
}
