package flightsvc

import (
	"context"
	"runtime"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	meter = otel.Meter("github.com/flight-sink/flight-sink/flightsvc")
	// callErrors counts failed calls by method and ErrorInfo reason: both sets are bounded.
	callErrors metric.Int64Counter
	// putsInFlight are the DoPut streams being served, process-wide.
	putsInFlight metric.Int64UpDownCounter
	// putsRefused counts DoPut streams refused under --max-concurrent-puts.
	putsRefused metric.Int64Counter
)

func init() {
	callErrors, _ = meter.Int64Counter("flight_sink.call.errors",
		metric.WithDescription("Failed gRPC calls, by method and ErrorInfo reason (STORAGE_UNAVAILABLE: the store did not answer)."))
	putsInFlight, _ = meter.Int64UpDownCounter("flight_sink.puts.in_flight",
		metric.WithDescription("DoPut streams being served; compare with flight_sink_puts_max_concurrent."))
	putsRefused, _ = meter.Int64Counter("flight_sink.puts.refused",
		metric.WithDescription("DoPut streams refused because --max-concurrent-puts were already being served."))
}

// serverGauges registers the gauges of one server's state: its --max-concurrent-puts, whether
// it is ready, and the build it runs. The returned function unregisters them.
func serverGauges(maxPuts int, version string, ready *readiness) (func(), error) {
	maxConcurrent, err := meter.Int64ObservableGauge("flight_sink.puts.max_concurrent",
		metric.WithDescription("The server's --max-concurrent-puts (-1: no limit)."))
	if err != nil {
		return nil, err
	}
	readyGauge, err := meter.Int64ObservableGauge("flight_sink.ready",
		metric.WithDescription("1 while /readyz answers 200 (the store answers, the server is not draining), else 0."))
	if err != nil {
		return nil, err
	}
	buildInfo, err := meter.Int64ObservableGauge("flight_sink.build.info",
		metric.WithDescription("Always 1; its labels name the running build."))
	if err != nil {
		return nil, err
	}
	if maxPuts <= 0 {
		maxPuts = -1
	}
	build := metric.WithAttributes(attribute.String("version", version), attribute.String("goversion", runtime.Version()))
	var stopped atomic.Bool
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if stopped.Load() {
			return nil
		}
		o.ObserveInt64(maxConcurrent, int64(maxPuts))
		r := int64(0)
		if ready.notReady() == "" {
			r = 1
		}
		o.ObserveInt64(readyGauge, r)
		o.ObserveInt64(buildInfo, 1, build)
		return nil
	}, maxConcurrent, readyGauge, buildInfo)
	if err != nil {
		return nil, err
	}
	return func() { stopped.Store(true); _ = reg.Unregister() }, nil
}
