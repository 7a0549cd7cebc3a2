package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// benchRows is the batch size of the throughput benchmarks: a typical streaming micro-batch.
const benchRows = 64 * 1024

// benchSchema mixes the column kinds a streaming sink sees: keys, measures, flags, a
// low-cardinality and a high-cardinality string, an event time and a sparse optional value.
var benchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "session", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "event_time", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "maybe", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

var countries = []string{"US", "DE", "FR", "GB", "JP", "CN", "IN", "BR", "CA", "AU", "ES", "IT", "NL", "SE", "NO",
	"PL", "MX", "AR", "ZA", "KR", "SG", "CH", "AT", "BE", "DK", "FI", "IE", "PT", "NZ", "TR"}

// benchBatch builds rows rows of benchSchema from a fixed seed, starting at id from.
func benchBatch(from int64, rows int) arrow.RecordBatch {
	rng := rand.New(rand.NewPCG(uint64(from), 42))
	ids := rand.NewChaCha8([32]byte{byte(from), byte(from >> 8), 7})
	b := array.NewRecordBuilder(memory.DefaultAllocator, benchSchema)
	defer b.Release()
	start := time.Date(2024, 5, 6, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := range rows {
		id := from + int64(i)
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Int32Builder).Append(rng.Int32N(1000))
		b.Field(2).(*array.Float64Builder).Append(rng.Float64() * 100)
		b.Field(3).(*array.BooleanBuilder).Append(rng.IntN(3) == 0)
		b.Field(4).(*array.StringBuilder).Append(countries[rng.IntN(len(countries))])
		u, err := uuid.NewRandomFromReader(ids)
		if err != nil {
			panic(err)
		}
		b.Field(5).(*array.StringBuilder).Append(u.String())
		b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(start + id*1000 + rng.Int64N(1000)))
		if rng.IntN(10) == 0 {
			b.Field(7).(*array.Int64Builder).Append(rng.Int64())
		} else {
			b.Field(7).AppendNull()
		}
	}
	return b.NewRecordBatch()
}

// arrowBytes is the uncompressed in-memory size of rec: the bytes of all its Arrow buffers.
func arrowBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, buf := range d.Buffers() {
			if buf != nil {
				n += int64(buf.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
	}
	for _, col := range rec.Columns() {
		walk(col.Data())
	}
	return n
}

// Dictionary choices for the Parquet files the benchmarks compare.
const (
	dictNone   = "none"   // plain encoding everywhere
	dictEngine = "engine" // the engine's per-column choice (dictionaryPays)
	dictAll    = "all"    // pqarrow's default: dictionary on every column
)

// parquetProps are the writer properties the engine's Writer uses, with the dictionary choice
// made by dict.
func parquetProps(rec arrow.RecordBatch, dict string) *parquet.WriterProperties {
	opts := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(zstdLevel),
		parquet.WithDictionaryDefault(dict == dictAll),
		parquet.WithMaxRowGroupLength((&Options{}).EnsureDefaults().MaxRowGroupRows),
		parquet.WithStats(true),
	}
	if dict == dictEngine {
		for i, use := range dictionaryPays(rec) {
			if use {
				opts = append(opts, parquet.WithDictionaryFor(rec.Schema().Field(i).Name, true))
			}
		}
	}
	return parquet.NewWriterProperties(opts...)
}

// writeParquet encodes recs as one Parquet file into w the way the engine does (WriteBuffered,
// stored Arrow schema).
func writeParquet(w io.Writer, props *parquet.WriterProperties, recs ...arrow.RecordBatch) error {
	fw, err := pqarrow.NewFileWriter(recs[0].Schema(), w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := fw.WriteBuffered(r); err != nil {
			fw.Close()
			return err
		}
	}
	return fw.Close()
}

// BenchmarkAppend measures Append throughput through a Table on a local store: Parquet encoding,
// the durable data file, the transaction file and the manifest commit. Compare with
// BenchmarkPqarrowBaseline, which does only the encoding and the durable file.
func BenchmarkAppend(b *testing.B) {
	store, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := Create(b.Context(), store, "bench", benchSchema, CreateOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rec := benchBatch(0, benchRows)
	defer rec.Release()
	b.SetBytes(arrowBytes(rec))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tbl.Append(b.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportFileBytesPerRow(b, tbl)
}

func reportFileBytesPerRow(b *testing.B, tbl *Table) {
	m, err := tbl.Latest(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range m.Fragments {
		for _, df := range f.Files {
			size += df.SizeBytes
		}
	}
	if rows := m.Rows(); rows > 0 {
		b.ReportMetric(float64(size)/float64(rows), "file-bytes/row")
	}
}

// BenchmarkPqarrowBaseline writes the same batches with pqarrow straight to a local file, with the
// engine's settings (zstd, WriteBuffered, the engine's dictionary choice) and an fsync, as the
// engine's data file write has one: the floor Append can approach.
func BenchmarkPqarrowBaseline(b *testing.B) {
	dir := b.TempDir()
	rec := benchBatch(0, benchRows)
	defer rec.Release()
	props := parquetProps(rec, dictEngine)
	b.SetBytes(arrowBytes(rec))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.parquet", i)))
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := writeParquet(bw, props, rec); err != nil {
			b.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileSize encodes one batch with each dictionary choice and reports the file size per
// row next to the encode speed: what dictionary-on-everything buys against what it costs.
func BenchmarkFileSize(b *testing.B) {
	rec := benchBatch(0, benchRows)
	defer rec.Release()
	var chosen []string
	for i, use := range dictionaryPays(rec) {
		if use {
			chosen = append(chosen, rec.Schema().Field(i).Name)
		}
	}
	b.Logf("engine dictionary-encodes %v", chosen)
	for _, dict := range []string{dictNone, dictEngine, dictAll} {
		b.Run("dict="+dict, func(b *testing.B) {
			props := parquetProps(rec, dict)
			var buf bytes.Buffer
			b.SetBytes(arrowBytes(rec))
			for b.Loop() {
				buf.Reset()
				if err := writeParquet(&buf, props, rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/float64(rec.NumRows()), "bytes/row")
		})
	}
}

// BenchmarkCommitLatency times single 1,000-row appends end to end (write, commit, durable) on
// each store and reports the median and the 99th percentile.
func BenchmarkCommitLatency(b *testing.B) {
	rec := benchBatch(0, 1000)
	defer rec.Release()
	for _, st := range storetest.Stores(b) {
		b.Run(st.Name, func(b *testing.B) {
			store := st.New(b)
			tbl, err := Create(b.Context(), store, "latency", benchSchema, CreateOptions{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := tbl.Append(b.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// historyVersions is the length of BenchmarkHistory's table.
const historyVersions = 10_000

// BenchmarkHistory reads the newest 100 and 10,000 versions of a table with 10,000 versions on a
// local store, through a warm handle, and 100 through a freshly opened one (a restarted server).
// The table is built once, by real commits (streaming epochs with no data, so each manifest stays
// small), and shared by the sub-benchmarks.
func BenchmarkHistory(b *testing.B) {
	dir := b.TempDir()
	store, err := objstore.NewLocal(dir)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	tbl, err := Create(b.Context(), store, "history", benchSchema, CreateOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for e := int64(2); e <= historyVersions; e++ {
		txn := &Transaction{Operation: OpAppend, Properties: EpochProperties(epochid.ID{QueryID: "bench-query", EpochID: e}, nil)}
		if _, err := tbl.Commit(b.Context(), txn); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("built %d versions in %v", historyVersions, time.Since(start).Round(time.Millisecond))

	for _, n := range []int{100, historyVersions} {
		b.Run(fmt.Sprintf("last=%d", n), func(b *testing.B) {
			for b.Loop() {
				h, err := tbl.History(b.Context(), n)
				if err != nil {
					b.Fatal(err)
				}
				if len(h) != n || h[0].Version != historyVersions || h[n-1].Missing {
					b.Fatalf("history of %d: %d entries, newest %d", n, len(h), h[0].Version)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "versions/s")
		})
	}
	// Latest through a warm handle lists only versions after the cached one: its cost should
	// not depend on the length of the history. Compare with a table of 10 versions.
	small, err := Create(b.Context(), store, "short", benchSchema, CreateOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for range 9 {
		if _, err := small.Commit(b.Context(), &Transaction{Operation: OpAppend}); err != nil {
			b.Fatal(err)
		}
	}
	for _, h := range []struct {
		n   int
		tbl *Table
	}{{10, small}, {historyVersions, tbl}} {
		b.Run(fmt.Sprintf("latest/versions=%d", h.n), func(b *testing.B) {
			for b.Loop() {
				if _, err := h.tbl.Latest(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("open+last=100", func(b *testing.B) {
		for b.Loop() {
			fresh, err := Open(b.Context(), store, "history", nil)
			if err != nil {
				b.Fatal(err)
			}
			if h, err := fresh.History(b.Context(), 100); err != nil || len(h) != 100 {
				b.Fatalf("history: %d entries, %v", len(h), err)
			}
		}
	})
}

// BenchmarkFinishLater commits 1,000-row appends whose data file is stored before the commit
// starts (Finish) and while the commit writes its transaction file (FinishLater), side by side.
func BenchmarkFinishLater(b *testing.B) {
	rec := benchBatch(0, 1000)
	defer rec.Release()
	for _, st := range storetest.Stores(b) {
		for _, later := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/later=%v", st.Name, later), func(b *testing.B) {
				tbl, err := Create(b.Context(), st.New(b), "later", benchSchema, CreateOptions{}, nil)
				if err != nil {
					b.Fatal(err)
				}
				var lat []time.Duration
				for b.Loop() {
					start := time.Now()
					w, err := tbl.NewWriter(b.Context(), benchSchema)
					if err != nil {
						b.Fatal(err)
					}
					if err := w.Write(b.Context(), rec); err != nil {
						b.Fatal(err)
					}
					txn := &Transaction{Operation: OpAppend}
					if later {
						txn.Fragments, err = w.FinishLater(b.Context())
						txn.FilesDurable = w.Durable
					} else {
						txn.Fragments, err = w.Finish(b.Context())
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tbl.Commit(b.Context(), txn); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				reportPercentiles(b, lat)
			})
		}
	}
}
