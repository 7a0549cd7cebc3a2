package streaming

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestIcebergPublishCost measures the 1-second-trigger workload (small epochs on the direct
// route, sent back to back by one query, background maintenance) with Iceberg publishing on and
// off: epochs/s, ack p50/p99, and with publishing on the publish lag (ack to the version being in
// the Iceberg metadata) p50/p99. A measurement, not a test: it runs only with
// FLIGHT_SINK_ICEBERG_BENCH_EPOCHS set (docs/iceberg.md quotes it).
func TestIcebergPublishCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLIGHT_SINK_ICEBERG_BENCH_EPOCHS"))
	if n <= 0 {
		t.Skip("set FLIGHT_SINK_ICEBERG_BENCH_EPOCHS to measure")
	}
	for _, on := range []bool{false, true, false, true} {
		rate, p50, p99, lag50, lag99 := runPublishWorkload(t, n, on)
		t.Logf("publishing %-5v: %d epochs of 1000 rows: %.1f epochs/s, ack p50 %.1f ms p99 %.1f ms; publish lag p50 %.0f ms p99 %.0f ms",
			on, n, rate, p50, p99, lag50, lag99)
	}
}

func runPublishWorkload(t *testing.T, n int, publish bool) (rate, p50, p99, lag50, lag99 float64) {
	ctx := context.Background()
	s, store := newSink(t, &Options{DisableIceberg: !publish})
	var (
		mu   sync.Mutex
		seen = map[uint64]time.Time{}
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	if publish {
		wg.Add(1)
		go func() { // polls the version hint: when the version it mirrors moves, the time it was seen
			defer wg.Done()
			last := ""
			for {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if v, ok := publishedVersion(ctx, store, &last); ok {
					mu.Lock()
					if _, dup := seen[v]; !dup {
						seen[v] = time.Now()
					}
					mu.Unlock()
				}
			}
		}()
	}
	rows := make([]int64, 1000)
	var lat []float64
	start := time.Now()
	versions := make([]uint64, 0, n)
	for e := range n {
		for i := range rows {
			rows[i] = int64(e*1000 + i)
		}
		t0 := time.Now()
		ack, err := put(t, s, "bench", int64(e), ModeAppend, rows...)
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		versions = append(versions, ack.Version)
		ackAt[ack.Version] = time.Now()
	}
	rate = float64(n) / time.Since(start).Seconds()
	if publish {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			mu.Lock()
			_, ok := seen[versions[len(versions)-1]]
			mu.Unlock()
			if ok {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(done)
	wg.Wait()
	slices.Sort(lat)
	p50, p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	if publish {
		// A version's lag: from its ack to the first moment the metadata mirrored it or a later
		// version (coalesced).
		var pubs []uint64
		for v := range seen {
			pubs = append(pubs, v)
		}
		slices.Sort(pubs)
		var lags []float64
		for _, v := range versions {
			i, _ := slices.BinarySearch(pubs, v)
			if i == len(pubs) {
				continue
			}
			first := seen[pubs[i]]
			for _, p := range pubs[i:] {
				if seen[p].Before(first) {
					first = seen[p]
				}
			}
			lags = append(lags, float64(first.Sub(ackAt[v]).Milliseconds()))
		}
		slices.Sort(lags)
		if len(lags) > 0 {
			lag50, lag99 = lags[len(lags)/2], lags[len(lags)*99/100]
		}
	}
	clear(ackAt)
	return rate, p50, p99, lag50, lag99
}

// ackAt holds when each version was acknowledged (one workload at a time).
var ackAt = map[uint64]time.Time{}

// publishedVersion reads the version the Iceberg metadata of table "t" mirrors, through the
// version hint; last caches the hint's number so a metadata file is read only when it moves.
func publishedVersion(ctx context.Context, store objstore.Store, last *string) (uint64, bool) {
	hint, err := store.Get(ctx, "t/metadata/version-hint.text")
	if err != nil || string(hint) == *last {
		return 0, false
	}
	b, err := store.Get(ctx, "t/metadata/v"+strings.TrimSpace(string(hint))+".metadata.json")
	if err != nil {
		return 0, false
	}
	meta, err := table.ParseMetadataBytes(b)
	if err != nil {
		return 0, false
	}
	*last = string(hint)
	v, err := strconv.ParseUint(meta.Properties().Get("flight-sink.version", "0"), 10, 64)
	return v, err == nil
}
