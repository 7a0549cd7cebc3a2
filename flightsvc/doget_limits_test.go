package flightsvc_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestMaxConcurrentGets: with --max-concurrent-gets 2, two DoGets whose clients stop reading
// hold both slots; a third is refused with ResourceExhausted (LIMIT_EXCEEDED) naming the flag,
// and once the two are cancelled a DoGet reads the table again.
func TestMaxConcurrentGets(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxConcurrentGets: 2})
	for e := int64(0); e < 4; e++ {
		s.putEpoch(t, "t", "q", e, idRange(e*10_000, 10_000))
	}
	tk, err := json.Marshal(cmd{"table": "t"})
	if err != nil {
		t.Fatal(err)
	}
	// A client with a fixed 64 KiB flow-control window: a stream it stops reading stays open
	// with the server blocked in Send.
	slow, err := flight.NewClientWithMiddleware(s.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	stalled, cancel := context.WithCancel(testCtx(t))
	for range 2 {
		stream, err := slow.DoGet(stalled, &flight.Ticket{Ticket: tk})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the schema; then the client stops reading
			t.Fatal(err)
		}
	}
	_, err = s.get(testCtx(t), cmd{"table": "t"})
	wantReason(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	wantCode(t, err, codes.ResourceExhausted, "max-concurrent-gets")
	cancel()
	// The slots free as the cancelled handlers return.
	for {
		ids, err := s.get(testCtx(t), cmd{"table": "t"})
		if err == nil {
			if n := ids.Rows; n != 40_000 {
				t.Fatalf("read %d rows, want 40,000", n)
			}
			return
		}
		wantReason(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	}
}
