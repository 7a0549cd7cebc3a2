package engine

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/objstore"
)

// faultAllocator panics on its allocation number fault (counting from 1) and after.
type faultAllocator struct {
	memory.Allocator
	fault int64
	count atomic.Int64
}

func (a *faultAllocator) Allocate(size int) []byte {
	if a.count.Add(1) >= a.fault {
		panic("allocation fault")
	}
	return a.Allocator.Allocate(size)
}

// TestScanPanicsAreErrors: a panic anywhere in a read of a table with deleted rows - opening a
// data file, decoding its columns (in parallel), selecting the rows the deletions leave, the
// filter's selection - fails that scan with an error wrapping panics.ErrPanic, never the process:
// the allocator of the scan panics at its k-th allocation, for every k up to the read's total.
func TestScanPanicsAreErrors(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := hCreate(t, store, "panics", false, nil)
	hAppend(t, tbl, hRange(0, 5000), "a")
	if _, err := tbl.Delete(t.Context(), expr.Or(expr.IsNull("score"), expr.Eq("id", 7)), nil); err != nil {
		t.Fatal(err)
	}
	for _, filter := range []*expr.Predicate{nil, expr.Ge("id", 100)} {
		total := func() int64 { // the allocations of a read that does not fail
			a := &faultAllocator{Allocator: memory.DefaultAllocator, fault: 1 << 62}
			recs, err := tbl.ReadAll(t.Context(), ScanOptions{Allocator: a, Filter: filter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				r.Release()
			}
			return a.count.Load()
		}()
		for k := int64(1); k <= total; k += max(1, total/60) {
			a := &faultAllocator{Allocator: memory.DefaultAllocator, fault: k}
			recs, err := tbl.ReadAll(t.Context(), ScanOptions{Allocator: a, Filter: filter})
			for _, r := range recs {
				r.Release()
			}
			if !errors.Is(err, panics.ErrPanic) {
				t.Fatalf("filter %v: a panic at allocation %d of %d: scan error %v, want a recovered panic", filter, k, total, err)
			}
		}
	}
	hRequireRows(t, "after the faults", hRead(t, tbl, 0), func() map[int64]string {
		w := hWant(hRange(0, 5000), "a")
		for id := range w {
			if hScoreNull(id) || id == 7 {
				delete(w, id)
			}
		}
		return w
	}())
}
