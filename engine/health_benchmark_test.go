package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/objstore"
)

// Benchmarks of table health: compaction throughput, scans before and after compaction, and
// append commit latency while compaction runs. They run on the local filesystem.

var hBenchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "user", Type: arrow.BinaryTypes.String},
	{Name: "country", Type: arrow.BinaryTypes.String},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

func hBenchBatch(from int64, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, hBenchSchema)
	defer b.Release()
	countries := []string{"DE", "FR", "US", "JP", "BR", "IN", "GB", "ES"}
	for i := range int64(n) {
		id := from + i
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000 + id*1000))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user-%07d", id*7919%1_000_003))
		b.Field(3).(*array.StringBuilder).Append(countries[id%int64(len(countries))])
		if id%10 == 0 {
			b.Field(4).AppendNull()
		} else {
			b.Field(4).(*array.Float64Builder).Append(float64(id%10_000) / 100)
		}
	}
	return b.NewRecordBatch()
}

// hBenchFragments creates a table of `frags` fragments of `rows` rows each, committed as one
// Append, and returns it with the total size of its data files.
func hBenchFragments(b *testing.B, store objstore.Store, name string, frags, rows int) (*Table, int64) {
	b.Helper()
	ctx := b.Context()
	tbl, err := Create(ctx, store, name, hBenchSchema, CreateOptions{}, &Options{TargetRowsPerFragment: int64(rows)})
	if err != nil {
		b.Fatal(err)
	}
	w, err := tbl.NewWriter(ctx, hBenchSchema)
	if err != nil {
		b.Fatal(err)
	}
	for i := range frags {
		rec := hBenchBatch(int64(i*rows), rows)
		if err := w.Write(ctx, rec); err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	fs, err := w.Finish(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, &Transaction{Operation: OpAppend, Fragments: fs}); err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range fs {
		size += f.Files[0].SizeBytes
	}
	return tbl, size
}

// hBenchCompact compacts to Lance's default target, whatever the fragments were written with.
var hBenchCompact = CompactOptions{TargetRowsPerFragment: 1 << 20}

func hScanAll(b *testing.B, tbl *Table, v uint64) int64 {
	s, err := tbl.Scan(b.Context(), ScanOptions{Version: v})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Release()
	var n int64
	for s.Next() {
		n += s.RecordBatch().NumRows()
	}
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkCompaction measures compaction of a table of 1,000 fragments of 1,000 rows into one
// fragment of 1,000,000 rows (MB/s of input data files), and a full scan before and after.
func BenchmarkCompaction(b *testing.B) {
	store, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	const frags, rows = 1000, 1000
	tbl, size := hBenchFragments(b, store, "bench-compact", frags, rows)
	before, err := tbl.Latest(b.Context())
	if err != nil {
		b.Fatal(err)
	}

	b.Run("rewrite-1000-fragments", func(b *testing.B) {
		b.SetBytes(size)
		var written int64
		for b.Loop() {
			txn, rep, err := tbl.PrepareCompaction(b.Context(), before, hBenchCompact)
			if err != nil || txn == nil || rep.FragmentsAdded != 1 {
				b.Fatalf("compaction: %+v %v", rep, err)
			}
			written = rep.BytesWritten
			tbl.Discard(b.Context(), txn) // keep the input for the next round
		}
		b.ReportMetric(float64(frags*rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(float64(written)/float64(size), "out/in-bytes")
	})

	b.Run("scan-1000-fragments", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if n := hScanAll(b, tbl, before.Version); n != frags*rows {
				b.Fatalf("scanned %d rows", n)
			}
		}
	})

	rep, err := tbl.Compact(b.Context(), hBenchCompact)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scan-compacted", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if n := hScanAll(b, tbl, rep.Version); n != frags*rows {
				b.Fatalf("scanned %d rows", n)
			}
		}
	})
}

// BenchmarkAppendCommitDuringCompaction measures the latency of an append (1,000 rows, write and
// commit) on an idle table and while compaction of 1,000,000 rows runs without pause on the same
// table.
func BenchmarkAppendCommitDuringCompaction(b *testing.B) {
	store, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tbl, _ := hBenchFragments(b, store, "bench-latency", 1000, 1000)
	big, err := tbl.Latest(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	appender, err := Open(b.Context(), store, "bench-latency", nil)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		rec := hBenchBatch(10_000_000, 1000)
		defer rec.Release()
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := appender.Append(b.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("idle", run)
	b.Run("compacting", func(b *testing.B) {
		ctx, cancel := context.WithCancel(b.Context())
		var wg sync.WaitGroup
		var rounds, commits int
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				// Rewrite the million rows (never committed, so every round has the same work),
				// and compact the appends for real, so appends also rebase over Rewrites.
				if txn, _, err := tbl.PrepareCompaction(ctx, big, hBenchCompact); err == nil && txn != nil {
					tbl.Discard(context.WithoutCancel(ctx), txn)
					rounds++
				}
				if rep, err := tbl.Compact(ctx, hBenchCompact); err == nil && rep.Version != 0 {
					commits++
				}
			}
		}()
		time.Sleep(50 * time.Millisecond) // let the compaction get going
		run(b)
		cancel()
		wg.Wait()
		b.ReportMetric(float64(rounds), "compactions")
		b.ReportMetric(float64(commits), "rewrites-committed")
	})
}
