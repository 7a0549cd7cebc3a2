package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/objstore"
)

// Benchmarks of the primary-key index: upsert throughput with key matching through the index
// against a scan of the key column, and the latency of one key lookup. They run on the local
// filesystem, on a keyed table of 1,000,000 rows in 8 fragments.

const (
	pkBenchRows      = 1_000_000
	pkBenchFragRows  = 125_000
	pkBenchBatch     = 1_000 // rows per upsert: half replace existing keys, half are new
	pkBenchMaintainN = 16    // upserts between maintenance passes (outside the timer)
)

// pkBenchTable creates the keyed table, with its primary-key index when indexed.
func pkBenchTable(b *testing.B, indexed bool) *Table {
	b.Helper()
	ctx := b.Context()
	store, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := Create(ctx, store, "pkbench", hBenchSchema, CreateOptions{PrimaryKey: []string{"id"}}, &Options{TargetRowsPerFragment: pkBenchFragRows})
	if err != nil {
		b.Fatal(err)
	}
	var recs []arrow.RecordBatch
	for i := 0; i < pkBenchRows; i += pkBenchFragRows {
		recs = append(recs, hBenchBatch(int64(i), pkBenchFragRows))
	}
	if _, err := tbl.Append(ctx, recs, nil); err != nil {
		b.Fatal(err)
	}
	for _, r := range recs {
		r.Release()
	}
	if indexed {
		if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
			b.Fatal(err)
		}
	}
	return tbl
}

// BenchmarkUpsert measures upserts of 1,000 rows (500 matched, 500 new) into a 1,000,000-row
// table, matching keys through the index or by scanning the key column. Every 16 upserts a
// maintenance pass (compaction, and index optimize when indexed) runs outside the timer, so that
// neither variant pays for a pile of small fragments.
func BenchmarkUpsert(b *testing.B) {
	for _, indexed := range []bool{true, false} {
		name := "scan"
		if indexed {
			name = "index"
		}
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			tbl := pkBenchTable(b, indexed)
			rng := rand.New(rand.NewPCG(1, 2))
			next := int64(pkBenchRows)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				ids := make([]int64, 0, pkBenchBatch)
				for range pkBenchBatch / 2 {
					ids = append(ids, rng.Int64N(next))
				}
				for range pkBenchBatch / 2 {
					ids = append(ids, next)
					next++
				}
				rec := hBenchIDs(ids)
				if _, err := tbl.Upsert(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
					b.Fatal(err)
				}
				rec.Release()
				if i++; i%pkBenchMaintainN == 0 {
					b.StopTimer()
					if _, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: pkBenchFragRows}); err != nil {
						b.Fatal(err)
					}
					if indexed {
						if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(pkBenchBatch*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkPointLookup measures finding the row of one key in the 1,000,000-row table: through
// the index with its segment cached (the steady state), through the index reading the segment
// from the store first (cold), and by scanning the key column.
func BenchmarkPointLookup(b *testing.B) {
	for _, mode := range []string{"index", "index-cold", "scan"} {
		b.Run(mode, func(b *testing.B) {
			ctx := b.Context()
			tbl := pkBenchTable(b, mode != "scan")
			m, err := tbl.Latest(ctx)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			keys := make([]map[string]struct{}, 1024)
			for i := range keys {
				keys[i] = map[string]struct{}{pkKey(b, rng.Int64N(pkBenchRows)): {}}
			}
			i := 0
			for b.Loop() {
				if mode == "index-cold" {
					b.StopTimer()
					resetIndexCache(tbl)
					b.StartTimer()
				}
				rows, _, err := tbl.lookupKeys(ctx, m, keys[i%len(keys)])
				if err != nil || rows.Len() != 1 {
					b.Fatalf("lookup %d: %d rows, %v", i, rows.Len(), err)
				}
				i++
			}
		})
	}
}

// hBenchIDs builds hBenchSchema rows with the given ids.
func hBenchIDs(ids []int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, hBenchSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000 + id*1000))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user-%07d", id*7919%1_000_003))
		b.Field(3).(*array.StringBuilder).Append("DE")
		b.Field(4).(*array.Float64Builder).Append(float64(id%10_000) / 100)
	}
	return b.NewRecordBatch()
}
