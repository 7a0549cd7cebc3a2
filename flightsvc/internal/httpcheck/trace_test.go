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
	// The first epoch creates the table (nothing to dedupe against); the second is the one traced.
	for e := int64(0); e < 2; e++ {
		if s := putEpoch(t, c, "traced", "q", e, 5); s != "committed" {
			t.Fatalf("epoch %d: %s", e, s)
		}
	}
	// The server span ends when the handler returns, a moment after the client has its ack. Spans
	// are grouped by trace: the second epoch's trace must hold every one of these.
	want := []string{"arrow.flight.protocol.FlightService/DoPut", "streaming.WriteEpoch", "streaming.Dedupe", "engine.Commit"}
	complete := func() (map[string]bool, bool) {
		traces := map[[16]byte]map[string]bool{}
		for _, s := range rec.Ended()[seen:] {
			id := [16]byte(s.SpanContext().TraceID())
			if traces[id] == nil {
				traces[id] = map[string]bool{}
			}
			traces[id][s.Name()] = true
		}
		var best map[string]bool
		for _, names := range traces {
			all := true
			for _, n := range want {
				all = all && names[n]
			}
			if all {
				return names, true
			}
			if names["streaming.Dedupe"] || best == nil {
				best = names
			}
		}
		return best, false
	}
	var names map[string]bool
	ok := false
	for i := 0; i < 500 && !ok; i++ {
		if names, ok = complete(); !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !ok {
		t.Fatalf("no trace holds all of %v; the closest holds %v", want, names)
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
