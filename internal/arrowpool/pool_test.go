package arrowpool

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func aligned(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%alignment == 0 }

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestPoolReusesZeroed: a freed buffer comes back from an allocation of its size class, zeroed and
// aligned; a reallocation keeps the contents and zeroes what it adds; sizes outside the classes
// work as Arrow's Go allocator's do.
func TestPoolReusesZeroed(t *testing.T) {
	p := New()
	for _, size := range []int{1, 63, 4095, 4096, 5000, 1 << 20, 3<<20 + 7} {
		b := p.Allocate(size)
		if len(b) != size || cap(b) != size || !aligned(b) || !allZero(b) {
			t.Fatalf("Allocate(%d): len %d, aligned %v, zeroed %v", size, len(b), aligned(b), allZero(b))
		}
		for i := range b {
			b[i] = 0xAB
		}
		p.Free(b)
		// sync.Pool may drop a buffer at any time: whether or not this one is reused, what comes
		// back is zeroed and aligned.
		c := p.Allocate(size)
		if len(c) != size || cap(c) != size || !aligned(c) || !allZero(c) {
			t.Fatalf("Allocate(%d) after a Free: len %d, cap %d, aligned %v, zeroed %v", size, len(c), cap(c), aligned(c), allZero(c))
		}
		for i := range c {
			c[i] = byte(i)
		}
		grown := p.Reallocate(2*size+1, c)
		if len(grown) != 2*size+1 || cap(grown) != len(grown) || !aligned(grown) || !allZero(grown[size:]) {
			t.Fatalf("Reallocate(%d): len %d, aligned %v, tail zeroed %v", 2*size+1, len(grown), aligned(grown), allZero(grown[size:]))
		}
		for i := range size {
			if grown[i] != byte(i) {
				t.Fatalf("Reallocate(%d) lost byte %d", 2*size+1, i)
			}
		}
		// Shrink, dirty, grow within the capacity: the regrown bytes are zeroed.
		small := p.Reallocate(size, grown)
		for i := range small {
			small[i] = 0xCD
		}
		regrown := p.Reallocate(size+1, small)
		if cap(small) != size || cap(regrown) != size+1 || regrown[size] != 0 {
			t.Fatalf("shrink to %d and regrow: capacities %d and %d, byte %d dirty %v", size, cap(small), cap(regrown), size, regrown[size] != 0)
		}
		p.Free(regrown)
	}
}

// TestPoolWithArrowBuilders: arrays built and released through the pool over and over hold exactly
// what was appended (a reused buffer carries nothing over), and the checked allocator around it
// sees every allocation freed.
func TestPoolWithArrowBuilders(t *testing.T) {
	mem := memory.NewCheckedAllocator(New())
	defer mem.AssertSize(t, 0)
	for round := range 20 {
		b := array.NewStringBuilder(mem)
		n := 10_000 + round*1000
		for i := range n {
			if i%7 == round%7 {
				b.AppendNull()
			} else {
				b.Append("v" + string(rune('a'+i%26)))
			}
		}
		arr := b.NewStringArray()
		b.Release()
		for i := range n {
			if null := i%7 == round%7; arr.IsNull(i) != null || (!null && arr.Value(i) != "v"+string(rune('a'+i%26))) {
				t.Fatalf("round %d: row %d reads %q (null %v)", round, i, arr.Value(i), arr.IsNull(i))
			}
		}
		arr.Release()
	}
}

// TestClasses: every size up to 256 MiB has a class that holds it with at most 25 % to spare,
// classes grow with size, and a class's capacity maps back to the class.
func TestClasses(t *testing.T) {
	prev := -1
	for _, n := range []int{1, 4096, 4097, 5120, 5121, 8192, 8193, 1 << 20, 1<<20 + 1, 5 << 20, 1 << 28} {
		c, size, ok := class(n)
		if !ok || size < n || (n > 4096 && size > n+n/4) || c < prev || c >= numClasses {
			t.Fatalf("class(%d) = %d, %d, %v", n, c, size, ok)
		}
		if c2, size2, _ := class(size); c2 != c || size2 != size {
			t.Fatalf("class(%d) = %d, %d; class of its capacity %d = %d, %d", n, c, size, size, c2, size2)
		}
		prev = c
	}
	if _, _, ok := class(1<<28 + 1); ok {
		t.Fatal("a class above 256 MiB")
	}
}

// TestPoolUnderArrowKernels: arrow-go's selection kernels size the buffers they build by a slice's
// capacity and write them by its length (kernels.VarBinaryImpl reserves by cap(data) and appends
// into data[len:]), so an allocator whose slices carry spare capacity makes Take write past a
// buffer's end: a panic in the goroutine the kernel runs in, which kills the process, or a value
// cut short. The case that shows it: Take the non-null rows of a string column with nulls (the
// kernel's size estimate, the column's mean value length, is short of what the taken rows hold).
// Through the pool, every taken value is the row it names.
func TestPoolUnderArrowKernels(t *testing.T) {
	mem := memory.NewCheckedAllocator(New())
	defer mem.AssertSize(t, 0)
	ctx := compute.WithAllocator(context.Background(), mem)
	for _, n := range []int{100, 1000, 5000, 20_000} {
		vb := array.NewStringBuilder(mem)
		ib := array.NewInt32Builder(mem)
		for i := range n {
			if i%5 == 0 {
				vb.AppendNull()
				continue
			}
			vb.Append(fmt.Sprintf("value-%d", i*i))
			ib.Append(int32(i))
		}
		values, indices := vb.NewStringArray(), ib.NewInt32Array()
		vb.Release()
		ib.Release()
		taken, err := compute.TakeArray(ctx, values, indices)
		if err != nil {
			t.Fatalf("%d rows: Take: %v", n, err)
		}
		got := taken.(*array.String)
		for j := range got.Len() {
			if want := values.Value(int(indices.Value(j))); got.IsNull(j) || got.Value(j) != want {
				t.Fatalf("%d rows: taken row %d reads %q, want %q", n, j, got.Value(j), want)
			}
		}
		taken.Release()
		values.Release()
		indices.Release()
	}
}
