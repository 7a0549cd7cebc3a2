package flightsvc

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// setupTracing exports traces over OTLP/gRPC when the standard OpenTelemetry environment names
// an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with the other
// OTEL_EXPORTER_OTLP_* variables honoured by the exporter). Without one, spans go to whatever
// tracer provider is installed globally (none by default: they cost nothing). The returned
// function flushes and stops the exporter.
func setupTracing(ctx context.Context, logger *slog.Logger) (func(context.Context), error) {
	// Continue the caller's trace when a producer sends W3C trace context (traceparent).
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func(context.Context) {}, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, _ := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("flight-sink")))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	logger.Info("exporting traces over OTLP")
	return func(ctx context.Context) {
		if err := tp.Shutdown(ctx); err != nil {
			logger.Warn("trace exporter shutdown", "err", err)
		}
	}, nil
}
