package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Engine instruments and tracer, on the global OpenTelemetry providers (the server installs one that
// exports to Prometheus; without one they cost nothing).
var (
	meter          = otel.Meter("github.com/flight-sink/flight-sink/engine")
	tracer         = otel.Tracer("github.com/flight-sink/flight-sink/engine")
	commitLatency  metric.Float64Histogram
	commitsTotal   metric.Int64Counter
	commitRetries  metric.Int64Counter
	commitConflict metric.Int64Counter
	commitStalls   metric.Int64Counter
	commitStalled  metric.Float64Histogram
)

func init() {
	commitLatency, _ = meter.Float64Histogram("flight_sink.commit.duration",
		metric.WithUnit("s"), metric.WithDescription("Time to commit one transaction, from the first manifest attempt to success."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	commitsTotal, _ = meter.Int64Counter("flight_sink.commits", metric.WithDescription("Transactions committed, by operation."))
	commitRetries, _ = meter.Int64Counter("flight_sink.commit.retries", metric.WithDescription("Manifest creations lost to a concurrent committer and retried."))
	commitConflict, _ = meter.Int64Counter("flight_sink.commit.conflicts", metric.WithDescription("Commits refused by the conflict matrix."))
	commitStalls, _ = meter.Int64Counter("flight_sink.commit.stalls",
		metric.WithDescription("Commits that found their table at the fragment ceiling (compaction.max_fragments) and stalled for a compaction, by outcome (compacted, waited, nothing_to_merge, failed)."))
	commitStalled, _ = meter.Float64Histogram("flight_sink.commit.stall.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a commit stalled at the fragment ceiling."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300))
}

// recordStall counts one commit stall at the fragment ceiling and its duration.
func recordStall(ctx context.Context, op Operation, outcome string, waited time.Duration) {
	attrs := metric.WithAttributes(attribute.String("operation", string(op)), attribute.String("outcome", outcome))
	commitStalls.Add(ctx, 1, attrs)
	commitStalled.Record(ctx, waited.Seconds(), attrs)
}

func recordCommit(ctx context.Context, op Operation, start time.Time, retries int) {
	attrs := metric.WithAttributes(attribute.String("operation", string(op)))
	commitLatency.Record(ctx, time.Since(start).Seconds(), attrs)
	commitsTotal.Add(ctx, 1, attrs)
	if retries > 0 {
		commitRetries.Add(ctx, int64(retries), attrs)
	}
}
