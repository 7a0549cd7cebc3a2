package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/internal/pythontest"
)

// TestMemWALTrickleVisibleWithinFreshness: a MemWAL table fed one small epoch a second (far
// below any flush or fold by size or count) is folded by age, so every acknowledged row reaches
// the Iceberg table with no flush or fold asked for: the status counts no missing row within a
// ceiling of a few freshness bounds after the last acknowledgement, and PyIceberg then reads
// every row exactly once.
func TestMemWALTrickleVisibleWithinFreshness(t *testing.T) {
	py := pythontest.Interpreter(t, "pyiceberg")
	const bound = 2 * time.Second
	ctx := context.Background()
	s, _ := newSink(t, &Options{MemWALFreshness: bound, IcebergPublishInterval: 200 * time.Millisecond})
	const epochs = 5
	var want []int64
	for e := range epochs {
		a := putKV(t, s, "trickle", "q", int64(e), ModeAppend, memwalSpec(1), 2*e, "a", 2*e+1, "b")
		if a.Status != StatusCommitted {
			t.Fatalf("epoch %d: %+v", e, a)
		}
		want = append(want, int64(2*e), int64(2*e+1))
		if e < epochs-1 {
			time.Sleep(time.Second)
		}
	}
	tbl, err := s.Table(ctx, "trickle")
	if err != nil {
		t.Fatal(err)
	}
	// A ceiling, not a measurement: the bound plus room for a loaded machine.
	ceiling := time.Now().Add(10 * bound)
	for {
		st, err := s.IcebergStatus(ctx, tbl)
		if err != nil {
			t.Fatal(err)
		}
		if st.MissingRows == 0 && st.IcebergVersion > 0 {
			break
		}
		if time.Now().After(ceiling) {
			t.Fatalf("%d rows still invisible to Iceberg readers %v after the last epoch (bound %v): %+v", st.MissingRows, 10*bound, bound, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	script := `
import json, sys
from pyiceberg.io import load_file_io
from pyiceberg.table import StaticTable
loc = sys.argv[1]
hint = loc + "/metadata/version-hint.text"
with load_file_io({}, hint).new_input(hint).open() as f:
    n = int(f.read().decode().strip())
tbl = StaticTable.from_metadata(f"{loc}/metadata/v{n}.metadata.json")
print(json.dumps(sorted(tbl.scan().to_arrow().column("id").to_pylist())))
`
	cmd := exec.CommandContext(ctx, py, "-c", script, tbl.URI())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got []int64
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("pyiceberg printed %q: %v", out, err)
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if len(got) != len(want) {
		t.Fatalf("PyIceberg reads ids %v; want every acknowledged row once: %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("PyIceberg reads ids %v; want every acknowledged row once: %v", got, want)
		}
	}
}
