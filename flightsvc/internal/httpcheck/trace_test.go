package httpcheck

import (
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestEpochIsTraced checks that one epoch produces the DoPut server span with the dedupe, write
// and commit spans beneath it, all in one trace.
func TestEpochIsTraced(t *testing.T) {
	rec := spanRecorder()
	seen := len(rec.Ended()) // spans of earlier runs in this process (go test -count=N)

	grpcAddr, _ := start(t)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := putEpoch(t, c, "traced", "q", 0, 5); s != "committed" {
		t.Fatalf("epoch: %s", s)
	}
	// The server span ends when the handler returns, a moment after the client has its ack.
	byName := map[string]sdktrace.ReadOnlySpan{}
	for i := 0; i < 200; i++ {
		for _, s := range rec.Ended()[seen:] {
			byName[s.Name()] = s
		}
		if _, ok := byName["arrow.flight.protocol.FlightService/DoPut"]; ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	doput, ok := byName["arrow.flight.protocol.FlightService/DoPut"]
	if !ok {
		names := []string{}
		for n := range byName {
			names = append(names, n)
		}
		t.Fatalf("no DoPut server span; spans: %v", names)
	}
	for _, name := range []string{"streaming.WriteEpoch", "streaming.Dedupe", "engine.Commit"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		if s.SpanContext().TraceID() != doput.SpanContext().TraceID() {
			t.Errorf("%s is not in the DoPut trace", name)
		}
	}
}

var (
	recorderOnce sync.Once
	recorder     *tracetest.SpanRecorder
)

// spanRecorder installs a span recorder as the process's tracer provider, once: the packages'
// tracers delegate to the first provider set and keep it, so a second one would record nothing.
func spanRecorder() *tracetest.SpanRecorder {
	recorderOnce.Do(func() {
		recorder = tracetest.NewSpanRecorder()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))
	})
	return recorder
}
