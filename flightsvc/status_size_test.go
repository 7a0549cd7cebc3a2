package flightsvc_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestLongErrorsStaySmall: requests whose error would echo a long list or name the client sent
// (20,000 unknown columns in a ticket, a 100 kB table name, 20,000 primary-key columns) get
// their precise code and reason with a message of at most 1 KiB, and the server keeps serving.
func TestLongErrorsStaySmall(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "q", 0, []int64{1})
	cols := make([]string, 20_000)
	for i := range cols {
		cols[i] = fmt.Sprintf("no_such_column_%05d", i)
	}
	long := strings.Repeat("x", 100_000)
	_, getErr := s.get(testCtx(t), cmd{"table": "t", "columns": cols})
	_, statsErr := s.action(testCtx(t), "table_stats", cmd{"table": long + "/.."})
	_, putErr := s.putCmd(testCtx(t), t, cmd{"table": "pk", "query_id": "q", "epoch_id": 0,
		"create": cmd{"primary_key": cols}}, []int64{1})
	for _, c := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"ticket of 20,000 unknown columns", getErr, codes.InvalidArgument, "SCHEMA_MISMATCH"},
		{"table_stats of a 100 kB table name", statsErr, codes.InvalidArgument, "INVALID_TABLE_NAME"},
		{"create with 20,000 primary-key columns", putErr, codes.InvalidArgument, "SCHEMA_MISMATCH"},
	} {
		st, _ := status.FromError(c.err)
		t.Logf("%s: %v %s (%d bytes)", c.name, st.Code(), reasonOf(c.err), len(st.Message()))
		wantReason(t, c.err, c.code, c.reason)
		if n := len(st.Message()); n > 1024 {
			t.Fatalf("%s: a %d-byte message", c.name, n)
		}
	}
	s.wantIDs(t, "t", []int64{1})
}
