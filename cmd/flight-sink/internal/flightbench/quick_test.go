package flightbench

import (
	"context"
	"os"
	"testing"
)

// TestRunSmall runs every workload at a tiny size: the benchmark code itself must keep working.
func TestRunSmall(t *testing.T) {
	cfg := Config{Root: t.TempDir(), BatchRows: 1000, BatchesPerStrm: 2, Streams: []int{1, 2}, Epochs: 5, EpochRows: 10, HistoryVersions: 20, LatencyEpochs: 3, RouteEpochs: 20, RouteStreams: []int{1, 3}}
	if err := Run(context.Background(), cfg, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
