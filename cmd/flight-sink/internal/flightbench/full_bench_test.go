package flightbench

import (
	"context"
	"os"
	"testing"
)

// TestRunFull runs the full benchmark when FLIGHT_SINK_BENCH=1 (make bench); a normal test run
// skips it.
func TestRunFull(t *testing.T) {
	if os.Getenv("FLIGHT_SINK_BENCH") != "1" {
		t.Skip("set FLIGHT_SINK_BENCH=1 to run the full Flight benchmark")
	}
	cfg := Config{Root: t.TempDir(), Only: os.Getenv("FLIGHT_SINK_BENCH_ONLY")}
	if err := Run(context.Background(), cfg, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
