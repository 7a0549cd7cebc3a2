package flightsvc_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestPredicateOverBoundsRefused: a delete "where" and a DoGet ticket "filter" nested 4,990
// "not"s deep (about 100 kB) are refused with INVALID_PREDICATE before they are decoded past
// their nesting; the process allocates less than 16 MiB in all for both refusals
// (runtime.MemStats.TotalAlloc, cumulative), nothing is deleted, and the server keeps serving.
// Not parallel, so that the count is these calls'.
func TestPredicateOverBoundsRefused(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "q", 0, []int64{1, 2, 3})
	deep := json.RawMessage(strings.Repeat(`{"op":"not","args":[`, 4990) + `{"op":"=","column":"id","value":1}` + strings.Repeat(`]}`, 4990))

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, delErr := s.action(testCtx(t), "delete", cmd{"table": "t", "where": deep})
	_, getErr := s.get(testCtx(t), cmd{"table": "t", "filter": deep})
	runtime.ReadMemStats(&after)

	wantReason(t, delErr, codes.InvalidArgument, "INVALID_PREDICATE")
	wantCode(t, delErr, codes.InvalidArgument, "deeper than 100 levels")
	wantReason(t, getErr, codes.InvalidArgument, "INVALID_PREDICATE")
	t.Logf("allocated %d bytes refusing both", after.TotalAlloc-before.TotalAlloc)
	const bound = 16 << 20
	if n := after.TotalAlloc - before.TotalAlloc; n > bound {
		t.Fatalf("refusing two 4,990-deep predicates allocated %d bytes, want under %d", n, bound)
	}
	s.wantIDs(t, "t", []int64{1, 2, 3})
	// A predicate within the bounds still deletes.
	shallow := json.RawMessage(strings.Repeat(`{"op":"not","args":[`, 2) + `{"op":"=","column":"id","value":1}` + strings.Repeat(`]}`, 2))
	if _, err := s.action(testCtx(t), "delete", cmd{"table": "t", "where": shallow}); err != nil {
		t.Fatal(err)
	}
	s.wantIDs(t, "t", []int64{2, 3})
}
