package flightbench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// TestServersSmall runs the memwal-servers workload at a tiny size on the test versitygw: two
// servers, two queries, a second per route, 1 ms store latency. The run fails if any
// acknowledged epoch is not read back exactly once, so this also checks the workload's
// exactness check end to end.
func TestServersSmall(t *testing.T) {
	uri, opts := storetest.S3(t)
	cfg := Config{Root: t.TempDir(), Only: "memwal-servers", Store: uri, S3: &opts, StoreLatency: time.Millisecond,
		Servers: 2, ServerQueries: 2, RouteDuration: time.Second, EpochRows: 10}
	if err := Run(context.Background(), cfg, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// TestCheckEpochCounts: the exactness check flags an epoch missing, one landed twice, a partial
// one and one never acknowledged, and passes the exact case.
func TestCheckEpochCounts(t *testing.T) {
	acked := [][]int64{{0, 1}, {0}}
	for _, tc := range []struct {
		name   string
		counts map[serverEpoch]int64
		bad    int
	}{
		{"exact", map[serverEpoch]int64{{0, 0}: 3, {0, 1}: 3, {1, 0}: 3}, 0},
		{"missing", map[serverEpoch]int64{{0, 0}: 3, {1, 0}: 3}, 1},
		{"twice", map[serverEpoch]int64{{0, 0}: 6, {0, 1}: 3, {1, 0}: 3}, 1},
		{"partial", map[serverEpoch]int64{{0, 0}: 3, {0, 1}: 2, {1, 0}: 3}, 1},
		{"never acknowledged", map[serverEpoch]int64{{0, 0}: 3, {0, 1}: 3, {1, 0}: 3, {1, 1}: 3}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkEpochCounts(tc.counts, acked, 3); len(got) != tc.bad {
				t.Fatalf("problems %q, want %d", got, tc.bad)
			}
		})
	}
}
