package memwal

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flight-sink/flight-sink/objstore"
)

// walSyncCount reads the count and sum of the WAL sync histogram for one store kind.
func walSyncCount(t *testing.T, kind string) (uint64, float64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := metricReader().Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok || m.Name != WALSyncMetric {
				continue
			}
			for _, dp := range h.DataPoints {
				if v, _ := dp.Attributes.Value("store"); v.AsString() == kind {
					return dp.Count, dp.Sum
				}
			}
		}
	}
	return 0, 0
}

// Every WAL entry a put waits for is timed in flight_sink.memwal.wal.sync.duration: one sample
// per entry, under store=local for a segment's fdatasync, store=object for an entry object's
// put. Three puts one after another are three groups, so three entries and three samples.
func TestWALSyncsAreMeasured(t *testing.T) {
	metricReader() // before any shard records: the package's instruments bind to the first provider
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		kind := "object"
		if _, ok := store.(*objstore.Local); ok {
			kind = "local"
		}
		s := openShard(t, createTable(t, store, nil), testShardID, nil)
		before, sumBefore := walSyncCount(t, kind)
		for e := range int64(3) {
			put(t, s, "q", e, e*10, 10, "m")
		}
		after, sumAfter := walSyncCount(t, kind)
		if after-before != 3 {
			t.Fatalf("%d WAL sync samples under store=%s for 3 puts, want 3", after-before, kind)
		}
		if sumAfter <= sumBefore {
			t.Fatalf("the 3 samples add no time (sum %g -> %g)", sumBefore, sumAfter)
		}
	})
}
