package streaming

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

var (
	meter       = otel.Meter("github.com/flight-sink/flight-sink/streaming")
	tracer      = otel.Tracer("github.com/flight-sink/flight-sink/streaming")
	epochsTotal metric.Int64Counter
	rowsIn      metric.Int64Counter
	bytesIn     metric.Int64Counter
	lastCommit  metric.Float64Gauge
	// laggingAfter and stalledAfter are each table's health thresholds, for the alert rules.
	laggingAfter, stalledAfter metric.Float64Gauge
)

func init() {
	epochsTotal, _ = meter.Int64Counter("flight_sink.epochs", metric.WithDescription("Epoch writes acknowledged, by table, status (committed, duplicate, empty, staged) and mode."))
	rowsIn, _ = meter.Int64Counter("flight_sink.rows", metric.WithDescription("Rows committed by epoch writes and plain appends, by table."))
	lastCommit, _ = meter.Float64Gauge("flight_sink.table.last_commit.timestamp", metric.WithUnit("s"),
		metric.WithDescription("Unix time at which this process last acknowledged a committed epoch or append of the table (base table or MemWAL)."))
	laggingAfter, _ = meter.Float64Gauge("flight_sink.table.health.lagging_after", metric.WithUnit("s"),
		metric.WithDescription("How long the table may go without a committed epoch before its health is lagging (its health.lagging_after, else the server's)."))
	stalledAfter, _ = meter.Float64Gauge("flight_sink.table.health.stalled_after", metric.WithUnit("s"),
		metric.WithDescription("How long the table may go without a committed epoch before its health is stalled (its health.stalled_after, else the server's)."))
	bytesIn, _ = meter.Int64Counter("flight_sink.data_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of data files (Parquet) written for epochs and plain appends, committed or not."))
}

// recordAck counts an acknowledged write. Its labels are bounded: a table, a status and a mode,
// never a query id.
func recordAck(ctx context.Context, a Ack, mode Mode) {
	table := attribute.String("table", a.Table)
	epochsTotal.Add(ctx, 1, metric.WithAttributes(table, attribute.String("status", string(a.Status)), attribute.String("mode", string(mode))))
	if a.Status == StatusCommitted {
		recordCommit(ctx, a.Table, a.Rows)
	}
}

// recordCommit counts rows committed to table by an epoch or a plain append, and the time.
func recordCommit(ctx context.Context, table string, rows int64) {
	attr := metric.WithAttributes(attribute.String("table", table))
	rowsIn.Add(ctx, rows, attr)
	lastCommit.Record(ctx, float64(time.Now().UnixNano())/1e9, attr)
}

// startSpan starts a span for one epoch operation.
func startSpan(ctx context.Context, name string, r *EpochRequest) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithAttributes(attribute.String("table", r.Table),
		attribute.String("query_id", r.QueryID), attribute.Int64("epoch_id", r.EpochID), attribute.String("mode", string(r.Mode))))
}

// endSpan records the outcome of an epoch operation on its span and ends it.
func endSpan(span trace.Span, a Ack, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("status", string(a.Status)), attribute.Int64("version", int64(a.Version)), attribute.Int64("rows", a.Rows))
	}
	span.End()
}
