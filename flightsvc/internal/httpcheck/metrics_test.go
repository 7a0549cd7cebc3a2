package httpcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// hasSeries reports whether body has a sample of name carrying every label.
func hasSeries(body, name string, labels ...string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") || !(strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestMetricsSLOSeries: the series the alert rules and the dashboard (deploy/) use are on
// /metrics with their labels and the values the server's state implies, and no label carries a
// query id.
func TestMetricsSLOSeries(t *testing.T) {
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir(),
		MaxConcurrentPuts: 1, Version: "v9.8.7-test", Logger: logs.logger()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	url := "http://" + srv.HTTPAddr().String() + "/metrics"
	c, err := flight.NewClientWithMiddleware(srv.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const query = "q-must-not-be-a-label"
	start := float64(time.Now().Unix())
	// The only put slot is released when the server's handler returns, which may be after the
	// client read its ack: wait for it to be free before the next put.
	slotFree := func() {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); metricValue(t, get(t, url), "flight_sink_puts_in_flight") != 0; {
			if time.Now().After(deadline) {
				t.Fatal("the put slot stayed taken for 30 s after the put's ack")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for e := int64(0); e < 3; e++ {
		slotFree()
		if s := putEpoch(t, c, "slo", query, e, 5); s != "committed" {
			t.Fatalf("epoch %d: %s", e, s)
		}
	}
	end := float64(time.Now().Unix() + 1)
	if _, err := c.GetFlightInfo(t.Context(), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"no_such_table"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetFlightInfo of a missing table: %v", err)
	}
	// One DoPut in flight holds the only slot: the next is refused.
	slotFree()
	stream, w := openPut(t, c, map[string]any{"table": "slo", "query_id": query, "epoch_id": 3}, 1)
	var body string
	for deadline := time.Now().Add(30 * time.Second); ; {
		body = get(t, url)
		if metricValue(t, body, "flight_sink_puts_in_flight") == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v := metricValue(t, body, "flight_sink_puts_in_flight"); v != 1 {
		t.Errorf("flight_sink_puts_in_flight = %v with one DoPut open, want 1", v)
	}
	refused, err := c.DoPut(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refused.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a DoPut over --max-concurrent-puts: %v, want ResourceExhausted", err)
	}
	if s := closePut(t, stream, w); s != "committed" {
		t.Fatalf("epoch 3: %s", s)
	}
	body = get(t, url)

	if v := metricValue(t, body, "flight_sink_rows_total", `table="slo"`); v != 16 {
		t.Errorf(`flight_sink_rows_total{table="slo"} = %v, want 16`, v)
	}
	if v := metricValue(t, body, "flight_sink_epochs_total", `table="slo"`, `status="committed"`); v != 4 {
		t.Errorf("flight_sink_epochs_total{table=slo,status=committed} = %v, want 4\n%s", v, body)
	}
	if v := metricValue(t, body, "flight_sink_table_last_commit_timestamp_seconds", `table="slo"`); v < start || v > end+1 {
		t.Errorf("flight_sink_table_last_commit_timestamp_seconds = %v, want within [%v, %v]", v, start, end+1)
	}
	if v := metricValue(t, body, "flight_sink_puts_in_flight"); v != 0 {
		t.Errorf("flight_sink_puts_in_flight = %v after every DoPut ended, want 0", v)
	}
	if v := metricValue(t, body, "flight_sink_puts_max_concurrent"); v != 1 {
		t.Errorf("flight_sink_puts_max_concurrent = %v, want 1", v)
	}
	if v := metricValue(t, body, "flight_sink_puts_refused_total"); v != 1 {
		t.Errorf("flight_sink_puts_refused_total = %v, want 1", v)
	}
	if v := metricValue(t, body, "flight_sink_call_errors_total", `reason="TABLE_NOT_FOUND"`, `method="/arrow.flight.protocol.FlightService/GetFlightInfo"`); v != 1 {
		t.Errorf("flight_sink_call_errors_total{reason=TABLE_NOT_FOUND} = %v, want 1", v)
	}
	if v := metricValue(t, body, "flight_sink_call_errors_total", `reason="LIMIT_EXCEEDED"`, `method="/arrow.flight.protocol.FlightService/DoPut"`); v != 1 {
		t.Errorf("flight_sink_call_errors_total{reason=LIMIT_EXCEEDED} = %v, want 1", v)
	}
	if v := metricValue(t, body, "flight_sink_ready"); v != 1 {
		t.Errorf("flight_sink_ready = %v, want 1", v)
	}
	if v := metricValue(t, body, "flight_sink_build_info", `version="v9.8.7-test"`, `goversion="go`); v != 1 {
		t.Errorf("flight_sink_build_info{version} = %v, want 1", v)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"} {
		if !hasSeries(body, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if strings.Contains(body, query) {
		t.Errorf("a label carries the query id %q: label cardinality must stay bounded", query)
	}
	if n := logs.count("INFO", "call refused", "LIMIT_EXCEEDED"); n != 1 {
		t.Errorf("%d INFO lines for the refusal under --max-concurrent-puts, want 1:\n%s", n, logs)
	}
}
