package memwal

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// benchEpochRows is the size of one epoch: a 1-second trigger of a modest stream.
const benchEpochRows = 1000

// BenchmarkEpochPut lands b.N epochs of 1,000 rows on local disk, one after another as one
// streaming query does, through a MemWAL shard and directly as one engine Append per epoch. It
// reports epochs/s and the p50/p99 acknowledgement latency. The memwal_8_streams case runs eight
// queries at once into one shard, where group commit shares WAL entries.
//
//	go test -run '^$' -bench BenchmarkEpochPut -benchtime 2000x ./memwal/
func BenchmarkEpochPut(b *testing.B) {
	b.Run("memwal", func(b *testing.B) { benchEpochs(b, 1, memwalPut) })
	b.Run("memwal_8_streams", func(b *testing.B) { benchEpochs(b, 8, memwalPut) })
	b.Run("direct_append", func(b *testing.B) { benchEpochs(b, 1, directAppend) })
}

type putFunc func(ctx context.Context, tbl *engine.Table, s *Shard, q string, epoch int64, rec arrow.RecordBatch) error

func memwalPut(ctx context.Context, _ *engine.Table, s *Shard, q string, epoch int64, rec arrow.RecordBatch) error {
	_, err := s.Put(ctx, &epochid.ID{QueryID: q, EpochID: epoch}, rec)
	return err
}

func directAppend(ctx context.Context, tbl *engine.Table, _ *Shard, q string, epoch int64, rec arrow.RecordBatch) error {
	_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, engine.EpochProperties(epochid.ID{QueryID: q, EpochID: epoch}, nil))
	return err
}

func benchEpochs(b *testing.B, streams int, fn putFunc) {
	ctx := context.Background()
	store, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tbl := createTable(b, store, nil)
	s, err := OpenShard(ctx, tbl, testShardID, nil) // default thresholds: a flush every 100 epochs
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := make([]arrow.RecordBatch, 64)
	for i := range recs {
		recs[i] = makeRows(int64(i)*benchEpochRows, benchEpochRows, "bench", int64(i))
		defer recs[i].Release()
	}

	lat := make([]time.Duration, b.N)
	var next int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < streams; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := "q" + string(rune('a'+w))
			for epoch := int64(0); ; epoch++ {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := fn(ctx, tbl, s, q, epoch, recs[i%int64(len(recs))]); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "epochs/s")
	b.ReportMetric(pct(0.50), "p50_ack_ms")
	b.ReportMetric(pct(0.99), "p99_ack_ms")
	if m, err := tbl.Latest(ctx); err == nil {
		b.ReportMetric(float64(len(m.Fragments)), "base_fragments")
	}
	if st := s.Stats(); st.Generations > 0 {
		// Fold what the run left into the base table (untimed): what the folder makes of it.
		b.ReportMetric(float64(st.Generations), "generations")
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "fold_ms")
		m, err := tbl.Latest(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(m.Fragments)), "fragments_after_fold")
		if m.Rows() != int64(b.N)*benchEpochRows {
			b.Fatalf("base holds %d rows after the fold, want %d", m.Rows(), int64(b.N)*benchEpochRows)
		}
	}
}
