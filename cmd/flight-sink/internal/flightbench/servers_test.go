package flightbench

import (
	"context"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/objstore/storetest"
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

// TestReadClaims: the workload reads the claims counter through its OpenTelemetry reader, summed
// over scopes and split by reason, and reports n/a while nothing has recorded it.
func TestReadClaims(t *testing.T) {
	ctx := context.Background()
	r := claimsReader()
	before, beforeBy, _ := readClaims(ctx, r)
	c, err := otel.Meter("flightbench-test").Int64Counter(claimsMetric)
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 2, metric.WithAttributes(attribute.String("reason", "start")))
	c.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "takeover")))
	after, afterBy, found := readClaims(ctx, r)
	if !found || after-before != 3 {
		t.Fatalf("claims %d -> %d (found %v), want 3 more", before, after, found)
	}
	if got := claimsDelta(beforeBy, afterBy, after-before, found); got != "3 (start 2, takeover 1)" {
		t.Fatalf("claimsDelta = %q", got)
	}
	if got := claimsDelta(nil, nil, 0, false); got != "n/a" {
		t.Fatalf("claimsDelta without the counter = %q, want n/a", got)
	}
}
