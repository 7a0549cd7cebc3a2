package flightbench

import (
	"context"
	"os"
	"testing"
)

// TestFloorSmall runs the memwal-floor workload at a tiny size: the benchmark code itself must
// keep working (it is not part of the default run TestRunSmall covers).
func TestFloorSmall(t *testing.T) {
	cfg := Config{Root: t.TempDir(), Only: "memwal-floor", BatchRows: 1000, BatchesPerStrm: 2, Epochs: 5, EpochRows: 10}
	if err := Run(context.Background(), cfg, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
