package streaming

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	meter       = otel.Meter("github.com/flight-sink/flight-sink/streaming")
	epochsTotal metric.Int64Counter
	rowsIn      metric.Int64Counter
)

func init() {
	epochsTotal, _ = meter.Int64Counter("flight_sink.epochs", metric.WithDescription("Epoch writes acknowledged, by status (committed, duplicate, empty, staged) and mode."))
	rowsIn, _ = meter.Int64Counter("flight_sink.rows", metric.WithDescription("Rows committed by epoch writes."))
}

func recordAck(ctx context.Context, a Ack, mode Mode) {
	epochsTotal.Add(ctx, 1, metric.WithAttributes(attribute.String("status", string(a.Status)), attribute.String("mode", string(mode))))
	if a.Status == StatusCommitted && a.Rows > 0 {
		rowsIn.Add(ctx, a.Rows)
	}
}
