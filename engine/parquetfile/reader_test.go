package parquetfile

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/bench/benchdata"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// benchFile writes rows of benchdata.Batch in row groups of 3000 rows and returns the file.
func benchFile(t *testing.T, rows int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(benchdata.Schema, &buf, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(3000)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	b := benchdata.Batch(memory.DefaultAllocator, 0, rows, 1)
	defer b.Release()
	if err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// openBench opens a file of benchFile with mem as its readers' allocator.
func openBench(t *testing.T, b []byte, mem memory.Allocator, props pqarrow.ArrowReadProperties) *pqarrow.FileReader {
	t.Helper()
	pr, err := file.NewParquetReader(bytes.NewReader(b), file.WithReadProps(parquet.NewReaderProperties(mem)))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pr, props, mem)
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// TestRecordReaderMatchesPqarrow: serial and parallel, the reader returns the batches pqarrow's
// record reader returns, for all columns and row groups and for some of each, and frees
// everything it allocated.
func TestRecordReaderMatchesPqarrow(t *testing.T) {
	data := benchFile(t, 10_000)
	for _, tc := range []struct {
		name      string
		cols, rgs []int
	}{{"all", nil, nil}, {"some", []int{0, 2, 4}, []int{1, 3}}} {
		for _, parallel := range []bool{false, true} {
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			props := pqarrow.ArrowReadProperties{BatchSize: 1024}
			want, err := openBench(t, data, memory.DefaultAllocator, props).GetRecordReader(context.Background(), tc.cols, tc.rgs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewRecordReader(context.Background(), openBench(t, data, mem, props), tc.cols, tc.rgs, parallel, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Schema().Equal(want.Schema()) {
				t.Fatalf("%s: schema %s, pqarrow %s", tc.name, got.Schema(), want.Schema())
			}
			n := 0
			for want.Next() {
				if !got.Next() {
					t.Fatalf("%s parallel %v: batch %d missing (%v)", tc.name, parallel, n, got.Err())
				}
				if !array.RecordEqual(got.RecordBatch(), want.RecordBatch()) {
					t.Fatalf("%s parallel %v: batch %d differs", tc.name, parallel, n)
				}
				n++
			}
			if got.Next() || got.Err() != nil || want.Err() != nil {
				t.Fatalf("%s parallel %v: after %d batches: another %v, error %v (pqarrow's %v)", tc.name, parallel, n, got.RecordBatch() != nil, got.Err(), want.Err())
			}
			want.Release()
			got.Release()
			mem.AssertSize(t, 0)
		}
	}
}

// panicking is an allocator that panics on its nth allocation and after.
type panicking struct {
	memory.Allocator
	left atomic.Int64
}

func (p *panicking) Allocate(n int) []byte {
	if p.left.Add(-1) < 0 {
		panic("allocator fault")
	}
	return p.Allocator.Allocate(n)
}

// TestRecordReaderPanicIsError: a panic while decoding a column (here, an allocator that fails in
// the decode goroutines) ends the read with an error wrapping panics.ErrPanic; in pqarrow's
// parallel reader it would end the process.
func TestRecordReaderPanicIsError(t *testing.T) {
	data := benchFile(t, 10_000)
	for _, parallel := range []bool{false, true} {
		mem := &panicking{Allocator: memory.DefaultAllocator}
		mem.left.Store(1 << 40)
		rr, err := NewRecordReader(context.Background(), openBench(t, data, mem, pqarrow.ArrowReadProperties{BatchSize: 1024}), nil, nil, parallel, mem)
		if err != nil {
			t.Fatal(err)
		}
		if !rr.Next() {
			t.Fatalf("parallel %v: first batch: %v", parallel, rr.Err())
		}
		mem.left.Store(0)
		for rr.Next() {
		}
		if err := rr.Err(); !errors.Is(err, panics.ErrPanic) {
			t.Fatalf("parallel %v: read ended with %v, want a recovered panic", parallel, err)
		}
		rr.Release()
	}
}
