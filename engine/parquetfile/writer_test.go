package parquetfile

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/bench/benchdata"
)

// TestParallelWriterMatchesPqarrow writes the same batches with the column-parallel writer and
// with pqarrow's FileWriter and requires files a reader cannot tell apart: the same Arrow schema
// (time zone included), the same rows and nulls, the same row groups with statistics, and the
// dictionary encoding kept for the column that asked for it.
func TestParallelWriterMatchesPqarrow(t *testing.T) {
	if !flatSchema(benchdata.Schema) {
		t.Fatal("benchdata.Schema should take the parallel path")
	}
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryDefault(false),
		parquet.WithDictionaryFor("country", true),
		parquet.WithMaxRowGroupLength(5000), // batches straddle row groups
		parquet.WithAllocator(mem),
		parquet.WithStats(true),
	)
	var batches []arrow.RecordBatch
	for i, n := range []int{3000, 4000, 1, 7999, 2500} {
		batches = append(batches, benchdata.Batch(memory.DefaultAllocator, int64(i)*10_000, n, 1))
	}
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	write := func(parallel bool) []byte {
		var buf bytes.Buffer
		var w Writer
		var err error
		if parallel {
			w, err = newParallelWriter(benchdata.Schema, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		} else {
			w, err = pqarrow.NewFileWriter(benchdata.Schema, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range batches {
			if err := w.WriteBuffered(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	par, seq := write(true), write(false)

	read := func(name string, b []byte) (arrow.Table, *file.Reader) {
		rdr, err := file.NewParquetReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: open: %v", name, err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatalf("%s: read: %v", name, err)
		}
		return tbl, rdr
	}
	pt, pr := read("parallel", par)
	defer pt.Release()
	st, sr := read("pqarrow", seq)
	defer st.Release()

	if !pt.Schema().Equal(st.Schema()) {
		t.Fatalf("schema: parallel %s, pqarrow %s", pt.Schema(), st.Schema())
	}
	for i, f := range benchdata.Schema.Fields() {
		if g := pt.Schema().Field(i); g.Name != f.Name || !arrow.TypeEqual(g.Type, f.Type) || g.Nullable != f.Nullable {
			t.Fatalf("column %d reads back as %s, want %s", i, g, f)
		}
	}
	if !array.TableEqual(pt, st) {
		t.Fatal("the parallel writer's rows differ from pqarrow's")
	}
	if pt.NumRows() != 3000+4000+1+7999+2500 {
		t.Fatalf("rows: %d", pt.NumRows())
	}
	if pr.NumRowGroups() != sr.NumRowGroups() || pr.NumRowGroups() != 4 {
		t.Fatalf("row groups: parallel %d, pqarrow %d, want 4", pr.NumRowGroups(), sr.NumRowGroups())
	}
	for g := 0; g < pr.NumRowGroups(); g++ {
		pg, sg := pr.MetaData().RowGroup(g), sr.MetaData().RowGroup(g)
		if pg.NumRows() != sg.NumRows() {
			t.Fatalf("row group %d: %d rows, pqarrow %d", g, pg.NumRows(), sg.NumRows())
		}
		for c := 0; c < pg.NumColumns(); c++ {
			pc, err := pg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			sc, _ := sg.ColumnChunk(c)
			if set, _ := pc.StatsSet(); !set {
				t.Fatalf("row group %d column %d has no statistics", g, c)
			}
			ps, _ := pc.Statistics()
			ss, _ := sc.Statistics()
			if ps.NullCount() != ss.NullCount() || !bytes.Equal(ps.EncodeMin(), ss.EncodeMin()) || !bytes.Equal(ps.EncodeMax(), ss.EncodeMax()) {
				t.Fatalf("row group %d column %d statistics differ", g, c)
			}
			if pc.HasDictionaryPage() != sc.HasDictionaryPage() {
				t.Fatalf("row group %d column %d: dictionary page %v, pqarrow %v", g, c, pc.HasDictionaryPage(), sc.HasDictionaryPage())
			}
		}
	}
	if cc, err := pr.MetaData().RowGroup(0).ColumnChunk(4); err != nil || !cc.HasDictionaryPage() {
		t.Fatalf("country lost its dictionary (%v)", err)
	}
}

// TestParallelWriterAbort: an aborted writer with a row group in flight and rows pending frees
// every batch it held.
func TestParallelWriterAbort(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(1000), parquet.WithAllocator(mem))
	var buf bytes.Buffer
	w, err := newParallelWriter(benchdata.Schema, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	b := benchdata.Batch(memory.DefaultAllocator, 0, 2500, 1)
	if err := w.WriteBuffered(b); err != nil {
		t.Fatal(err)
	}
	b.Release()
	w.abort()
	if err := w.WriteBuffered(benchdata.Batch(memory.DefaultAllocator, 0, 1, 1)); err == nil {
		t.Fatal("write after abort succeeded")
	}
}
