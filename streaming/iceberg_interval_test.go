package streaming

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flight-sink/flight-sink/engine"
)

// publishRuns reads flight_sink.iceberg.publishes (every outcome) from reader.
func publishRuns(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "flight_sink.iceberg.publishes" {
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// TestIcebergPublishCoalescesBurst: with a publish interval, a burst of commits publishes fewer
// times than it commits, and once the burst is over the trailing publish brings the Iceberg
// metadata to the newest version without any further commit, in background and inline mode.
func TestIcebergPublishCoalescesBurst(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	const n = 20
	for _, mode := range []engine.MaintenanceMode{engine.MaintenanceBackground, engine.MaintenanceInline} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			s, store := newSink(t, &Options{IcebergPublishInterval: 2 * time.Second,
				DefaultMaintenance: &engine.MaintenanceConfig{Mode: mode}})
			before := publishRuns(t, reader)
			var last uint64
			for e := range n {
				ack, err := put(t, s, "q", int64(e), ModeAppend, int64(e))
				if err != nil {
					t.Fatal(err)
				}
				last = ack.Version
			}
			// The trailing publish mirrors the newest version, which may be a maintenance commit
			// after the last epoch (a compaction of the burst's small fragments): at least last.
			hint := ""
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if v, ok := publishedVersion(ctx, store, &hint); ok && v >= last {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Iceberg metadata did not reach version %d or later after the burst (hint %q)", last, hint)
				}
			}
			got := publishRuns(t, reader) - before
			t.Logf("%d commits, %d publish runs", n, got)
			if got >= n || got < 1 {
				t.Fatalf("%d commits made %d publish runs; want at least 1 and fewer than %d", n, got, n)
			}
		})
	}
}
