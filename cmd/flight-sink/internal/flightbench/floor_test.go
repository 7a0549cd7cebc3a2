package flightbench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestFloorSmall runs the memwal-floor workload at a tiny size: the benchmark code itself must
// keep working (it is not part of the default run TestRunSmall covers), and the server's WAL
// fdatasyncs it reports are those of the small epochs, one each.
func TestFloorSmall(t *testing.T) {
	cfg := Config{Root: t.TempDir(), Only: "memwal-floor", BatchRows: 1000, BatchesPerStrm: 2, Epochs: 5, EpochRows: 10}
	var out bytes.Buffer
	if err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	os.Stdout.Write(out.Bytes())
	if !strings.Contains(out.String(), "MemWAL WAL fdatasyncs (server): 5, ") {
		t.Fatal("the report lacks the server's 5 WAL fdatasyncs of the 5 small epochs")
	}
}
