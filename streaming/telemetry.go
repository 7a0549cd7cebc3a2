package streaming

import (
	"context"

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
)

func init() {
	epochsTotal, _ = meter.Int64Counter("flight_sink.epochs", metric.WithDescription("Epoch writes acknowledged, by status (committed, duplicate, empty, staged) and mode."))
	rowsIn, _ = meter.Int64Counter("flight_sink.rows", metric.WithDescription("Rows committed by epoch writes."))
	bytesIn, _ = meter.Int64Counter("flight_sink.data_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of data files (Parquet) written for epochs and plain appends, committed or not."))
}

func recordAck(ctx context.Context, a Ack, mode Mode) {
	epochsTotal.Add(ctx, 1, metric.WithAttributes(attribute.String("status", string(a.Status)), attribute.String("mode", string(mode))))
	if a.Status == StatusCommitted && a.Rows > 0 {
		rowsIn.Add(ctx, a.Rows)
	}
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
