package flightsvc_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// A DoPut beyond --max-concurrent-puts is refused at once; the stream being served still commits.
func TestConcurrentPutLimit(t *testing.T) {
	cfg := flightsvc.Config{MaxConcurrentPuts: 1}
	cfg.Sink.Engine.TargetRowsPerFragment = 2
	s := startServer(t, cfg)
	ctx := testCtx(t)
	// Hold the only slot: a stream that has sent its schema and a batch but not finished.
	held, err := s.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(held, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, epochCmd("limited", "q", 0)))
	b := batch(1, 2, 3)
	defer b.Release()
	if err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	// The held stream owns the slot once its handler runs. A create-on-put creates its table only
	// after reading the whole epoch, so the signal is its first data file: with fragments of 2
	// rows, the handler stores one while it reads the batch of 3.
	for i := 0; ; i++ {
		if files, _ := filepath.Glob(filepath.Join(s.Root, "limited", "data", "*.parquet")); len(files) > 0 {
			break
		} else if i == 2000 {
			t.Fatal("the held stream never reached the server")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, refused := s.putCmd(ctx, t, epochCmd("limited", "other", 0), []int64{100})
	wantCode(t, refused, codes.ResourceExhausted, "max-concurrent-puts")
	w.Close()
	_ = held.CloseSend()
	a, err := recvAck(held)
	if err != nil || a.Status != "committed" {
		t.Fatalf("held stream: %+v %v", a, err)
	}
	// The slot is free again.
	if a := s.putEpoch(t, "limited", "q", 1, []int64{4}); a.Status != "committed" {
		t.Fatalf("after release: %+v", a)
	}
	s.wantIDs(t, "limited", []int64{1, 2, 3, 4})
}

// A DoPut stream larger than --max-put-bytes fails with ResourceExhausted and commits nothing.
func TestPutByteLimit(t *testing.T) {
	s := startServer(t, flightsvc.Config{MaxPutBytes: 64 << 10})
	s.putEpoch(t, "capped", "q", 0, []int64{1})
	before := s.version(t, "capped")
	_, err := s.putCmd(testCtx(t), t, epochCmd("capped", "q", 1), idRange(0, 5000), idRange(5000, 5000))
	wantCode(t, err, codes.ResourceExhausted, "max-put-bytes")
	if v := s.version(t, "capped"); v != before {
		t.Fatalf("an oversize stream committed version %d", v)
	}
	if a := s.putEpoch(t, "capped", "q", 1, []int64{2}); a.Status != "committed" {
		t.Fatalf("a small stream after the refusal: %+v", a)
	}
}

// Every call answers with an x-request-id header (the client's own when it sent one).
func TestRequestIDHeader(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	for _, sent := range []string{"", "my-trace-42"} {
		ctx := context.Background()
		if sent != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", sent)
		}
		stream, err := s.Client.ListActions(ctx, &flight.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := stream.Header()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
		got := h.Get("x-request-id")
		if len(got) != 1 || got[0] == "" || (sent != "" && got[0] != sent) {
			t.Fatalf("sent %q, got x-request-id %v", sent, got)
		}
	}
}
