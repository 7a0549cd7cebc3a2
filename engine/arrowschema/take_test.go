package arrowschema

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/arrowpool"
)

// takeUnsupported are the type ids Take refuses: the type policy stores none of them (a batch
// holding one is converted or refused before any row is selected).
var takeUnsupported = map[arrow.Type]bool{
	arrow.SPARSE_UNION: true, arrow.DENSE_UNION: true, arrow.RUN_END_ENCODED: true,
	arrow.STRING_VIEW: true, arrow.BINARY_VIEW: true, arrow.LIST_VIEW: true, arrow.LARGE_LIST_VIEW: true,
}

// unsupportedForTake reports whether dt holds a type Take refuses, at any depth.
func unsupportedForTake(dt arrow.DataType) bool {
	if takeUnsupported[dt.ID()] {
		return true
	}
	if n, ok := dt.(arrow.NestedType); ok {
		for _, f := range n.Fields() {
			if unsupportedForTake(f.Type) {
				return true
			}
		}
	}
	return false
}

// TestTakeEveryType: for a sample of every Arrow type and of types nested in types, each with
// nulls, Take of a sliced array (an offset into its buffers) by ascending, descending, gapped and
// null indices returns exactly the rows named (compared value by value with arrow's own
// comparison) and frees everything it allocated; a type Take does not select is an error, never a
// panic.
func TestTakeEveryType(t *testing.T) {
	samples := typetest.Nested()
	for _, s := range typetest.ByID() {
		samples = append(samples, s)
	}
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			one, err := s.Rows(s.Type)
			if err != nil {
				t.Skip(err) // arrow-go builds no array of this type from JSON
			}
			defer one.Release()
			copies := make([]arrow.Array, 40)
			for i := range copies {
				copies[i] = one
			}
			whole, err := array.Concatenate(copies, memory.DefaultAllocator)
			if err != nil {
				t.Skip(err)
			}
			defer whole.Release()
			src := array.NewSlice(whole, 1, int64(whole.Len()-1))
			defer src.Release()
			n := int32(src.Len())
			var live, gapped, reversed, withNulls []int32
			for i := int32(0); i < n; i++ {
				if src.IsValid(int(i)) {
					live = append(live, i)
				}
				if i%3 != 1 {
					gapped = append(gapped, i)
				}
				reversed = append(reversed, n-1-i)
				withNulls = append(withNulls, i, -1)
			}
			for name, idx := range map[string][]int32{"live": live, "gapped": gapped, "reversed": reversed, "with null rows": withNulls, "none": {}} {
				got, err := Take(mem, src, idx)
				if unsupportedForTake(s.Type) {
					if err == nil {
						got.Release()
						t.Fatalf("%s: Take of %s returned no error", name, s.Type)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				defer got.Release()
				if got.Len() != len(idx) || !arrow.TypeEqual(got.DataType(), src.DataType()) {
					t.Fatalf("%s: %d rows of %s, want %d of %s", name, got.Len(), got.DataType(), len(idx), src.DataType())
				}
				for j, i := range idx {
					if i < 0 {
						if got.IsValid(j) && got.DataType().ID() != arrow.NULL { // arrow-go's null type has no bitmap to read
							t.Fatalf("%s: row %d (a null index) is not null", name, j)
						}
						continue
					}
					if !array.SliceEqual(got, int64(j), int64(j+1), src, int64(i), int64(i+1)) {
						t.Fatalf("%s: row %d is %v, want row %d: %v", name, j, got, i, src)
					}
				}
			}
		})
	}
}

// TestTakeStringsWithNulls: the shape that crashed a DoGet after a delete (the rows of a string
// column whose null rows were deleted, from a pooled allocator) and a null row that holds bytes
// (which Arrow allows; they are not copied): every value comes back whole.
func TestTakeStringsWithNulls(t *testing.T) {
	mem := memory.NewCheckedAllocator(arrowpool.New())
	defer mem.AssertSize(t, 0)
	for _, n := range []int{1000, 5000, 20_000} {
		b := array.NewStringBuilder(mem)
		var live []int32
		for i := range n {
			if i%5 == 0 {
				b.AppendNull()
				continue
			}
			b.Append(fmt.Sprintf("country-%d", i*i))
			live = append(live, int32(i))
		}
		arr := b.NewStringArray()
		b.Release()
		got, err := Take(mem, arr, live)
		if err != nil {
			t.Fatal(err)
		}
		for j, i := range live {
			if s := got.(*array.String); s.IsNull(j) || s.Value(j) != arr.Value(int(i)) {
				t.Fatalf("%d rows: row %d reads %q, want %q", n, j, s.Value(j), arr.Value(int(i)))
			}
		}
		got.Release()
		arr.Release()
	}

	// ["ab", null (holding the byte "X"), "c"]
	offsets := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 2, 3, 4}))
	data := memory.NewBufferBytes([]byte("abXc"))
	valid := memory.NewBufferBytes([]byte{0b101})
	d := array.NewData(arrow.BinaryTypes.String, 3, []*memory.Buffer{valid, offsets, data}, nil, 1, 0)
	defer d.Release()
	arr := array.NewStringData(d)
	defer arr.Release()
	got, err := Take(mem, arr, []int32{2, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if s := got.(*array.String); s.Value(0) != "c" || s.IsValid(1) || s.ValueLen(1) != 0 || s.Value(2) != "ab" {
		t.Fatalf("got %v (row 1 of %d bytes), want [c (null) ab], the null row empty", got, s.ValueLen(1))
	}
}

// TestTakeRefusesBadIndex: an index past the array's end is an error.
func TestTakeRefusesBadIndex(t *testing.T) {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues([]int64{1, 2, 3}, nil)
	arr := b.NewArray()
	b.Release()
	defer arr.Release()
	if got, err := Take(nil, arr, []int32{0, 3}); err == nil {
		got.Release()
		t.Fatal("Take of row 3 of 3 returned no error")
	}
}

// BenchmarkTake selects the rows a 20 % scattered deletion leaves of a 65,536-row batch of an
// int64 and a string column, with Take and with arrow-go's compute.Take for comparison.
func BenchmarkTake(b *testing.B) {
	mem := memory.NewGoAllocator()
	ib := array.NewInt64Builder(mem)
	sb := array.NewStringBuilder(mem)
	var keep []int32
	for i := range 65_536 {
		ib.Append(int64(i))
		if i%5 == 0 {
			sb.AppendNull()
		} else {
			sb.Append(fmt.Sprintf("name-%d", i*i))
		}
		if i%5 != 2 {
			keep = append(keep, int32(i))
		}
	}
	cols := []arrow.Array{ib.NewArray(), sb.NewArray()}
	ib.Release()
	sb.Release()
	kb := array.NewInt32Builder(mem)
	kb.AppendValues(keep, nil)
	idx := kb.NewArray()
	kb.Release()
	b.Run("arrowschema.Take", func(b *testing.B) {
		for b.Loop() {
			for _, c := range cols {
				out, err := Take(mem, c, keep)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		}
	})
	b.Run("compute.TakeArray", func(b *testing.B) {
		ctx := compute.WithAllocator(context.Background(), mem)
		for b.Loop() {
			for _, c := range cols {
				out, err := compute.TakeArray(ctx, c, idx)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		}
	})
}

// TestTakeEmptyArraysWithoutBuffers: an empty array may carry no data buffers at all (an empty
// list's child, as IPC readers and converters make them); taking no rows of it, or of a list
// whose every row is empty, is an empty array, not a panic.
func TestTakeEmptyArraysWithoutBuffers(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for _, dt := range []arrow.DataType{
		arrow.FixedWidthTypes.Date32, arrow.FixedWidthTypes.Boolean, arrow.BinaryTypes.String,
		arrow.BinaryTypes.LargeBinary, arrow.PrimitiveTypes.Int64,
	} {
		bufs := []*memory.Buffer{nil, nil}
		if arrow.IsBaseBinary(dt.ID()) {
			bufs = append(bufs, nil)
		}
		empty := array.NewData(dt, 0, bufs, nil, 0, 0)
		arr := array.MakeFromData(empty)
		got, err := Take(mem, arr, []int32{})
		if err != nil {
			t.Fatalf("%s: take no rows of an empty array: %v", dt, err)
		}
		if got.Len() != 0 {
			t.Fatalf("%s: %d rows", dt, got.Len())
		}
		got.Release()

		// Two empty lists over that child: their offsets say 0 elements each.
		offs := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 0, 0}))
		list := array.MakeFromData(array.NewData(arrow.ListOf(dt), 2, []*memory.Buffer{nil, offs}, []arrow.ArrayData{empty}, 0, 0))
		got, err = Take(mem, list, []int32{1, 0})
		if err != nil {
			t.Fatalf("list<%s>: take the empty lists: %v", dt, err)
		}
		if got.Len() != 2 || got.(*array.List).ListValues().Len() != 0 {
			t.Fatalf("list<%s>: got %v", dt, got)
		}
		got.Release()
		list.Release()
		arr.Release()
		empty.Release()
	}
}
