package flightsvc

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// failingReader yields n batches of one int64 column (values 0..n-1), then fails with err.
type failingReader struct {
	mem  memory.Allocator
	n, i int
	err  error
	cur  arrow.RecordBatch
}

var raSchema = arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)

func (r *failingReader) Schema() *arrow.Schema { return raSchema }
func (r *failingReader) Retain()               {}
func (r *failingReader) Release() {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
}
func (r *failingReader) Next() bool {
	r.Release()
	if r.i >= r.n {
		return false
	}
	b := array.NewInt64Builder(r.mem)
	b.Append(int64(r.i))
	col := b.NewArray()
	b.Release()
	r.cur = array.NewRecordBatch(raSchema, []arrow.Array{col}, 1)
	col.Release()
	r.i++
	return true
}
func (r *failingReader) RecordBatch() arrow.RecordBatch { return r.cur }
func (r *failingReader) Record() arrow.RecordBatch      { return r.cur }
func (r *failingReader) Err() error                     { return r.err }

// TestReadAhead: batches arrive in order, the source's error after the last of them, and
// closing early (a client that went away) frees every batch read ahead.
func TestReadAhead(t *testing.T) {
	t.Run("order and error", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		defer mem.AssertSize(t, 0)
		boom := errors.New("data file gone")
		src := &failingReader{mem: mem, n: 10, err: boom}
		ra := newReadAhead(context.Background(), src)
		var got []int64
		for ra.Next() {
			got = append(got, ra.RecordBatch().Column(0).(*array.Int64).Value(0))
		}
		if !errors.Is(ra.Err(), boom) {
			t.Fatalf("err %v, want %v", ra.Err(), boom)
		}
		ra.Close()
		src.Release()
		if len(got) != 10 {
			t.Fatalf("got %v", got)
		}
		for i, v := range got {
			if v != int64(i) {
				t.Fatalf("batch %d holds %d: out of order (%v)", i, v, got)
			}
		}
	})
	t.Run("close early", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		defer mem.AssertSize(t, 0)
		src := &failingReader{mem: mem, n: 1000}
		ra := newReadAhead(context.Background(), src)
		if !ra.Next() {
			t.Fatal("no first batch")
		}
		ra.Close()
		src.Release()
	})
	t.Run("cancelled", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		defer mem.AssertSize(t, 0)
		ctx, cancel := context.WithCancel(context.Background())
		src := &failingReader{mem: mem, n: 1000}
		ra := newReadAhead(ctx, src)
		cancel()
		for ra.Next() {
		}
		ra.Close()
		src.Release()
	})
}
