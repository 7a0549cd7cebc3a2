package iceberg

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Publisher instruments, on the global OpenTelemetry provider (exported to Prometheus by the
// server, like the engine's).
var (
	meter            = otel.Meter("github.com/flight-sink/flight-sink/iceberg")
	publishes        metric.Int64Counter
	publishDuration  metric.Float64Histogram
	publishLag       metric.Float64Histogram
	versionsBehind   metric.Int64Gauge
	snapshotsExpired metric.Int64Counter
)

func init() {
	publishes, _ = meter.Int64Counter("flight_sink.iceberg.publishes",
		metric.WithDescription("Iceberg publish runs, by outcome (published, up_to_date, disabled, failed)."))
	publishDuration, _ = meter.Float64Histogram("flight_sink.iceberg.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one Iceberg publish run."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	publishLag, _ = meter.Float64Histogram("flight_sink.iceberg.publish.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from the commit of a version to its Iceberg snapshot (or metadata record) landing."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	versionsBehind, _ = meter.Int64Gauge("flight_sink.iceberg.versions_behind",
		metric.WithDescription("Versions a table's Iceberg metadata lagged behind after its last publish run."))
	snapshotsExpired, _ = meter.Int64Counter("flight_sink.iceberg.snapshots_expired",
		metric.WithDescription("Iceberg snapshots expired along with the versions they mirror."))
}

// recordPublish records one publish run of table name.
func recordPublish(ctx context.Context, name string, rep Report, err error, took time.Duration, lag time.Duration, behind uint64) {
	outcome := "published"
	switch {
	case errors.Is(err, ErrDisabled):
		outcome = "disabled"
	case err != nil:
		outcome = "failed"
	case rep.To == rep.From:
		outcome = "up_to_date"
	}
	tattr := attribute.String("table", name)
	publishes.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	if outcome == "disabled" {
		return
	}
	publishDuration.Record(ctx, took.Seconds())
	if outcome == "published" && lag > 0 {
		publishLag.Record(ctx, lag.Seconds())
	}
	versionsBehind.Record(ctx, int64(behind), metric.WithAttributes(tattr))
}

// RecordBehind records that table name's Iceberg metadata is behind versions behind its newest
// version, as a publish run does: for a lag found by watching the table (commits of another
// process), before the publish that catches it up.
func RecordBehind(ctx context.Context, name string, behind uint64) {
	versionsBehind.Record(ctx, int64(behind), metric.WithAttributes(attribute.String("table", name)))
}
