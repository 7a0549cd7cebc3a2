package flightsvc_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

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

// TestStalledDoGetsHeapBounded: four DoGets whose client stops reading after the schema, on a
// table of 16 fragments of 1 MiB, hold what the design bounds: per stream the batch being sent,
// the read-ahead (at most readAheadBytes, 8 MiB, here its two-batch depth), the batch being
// decoded and the fragment's file reader: about 6 MiB of 1 MiB batches. The server's live heap
// (runtime.MemStats.HeapAlloc after a GC) grows by less than 4 x 12 MiB while they stall,
// however much of the table is unread, and a fifth DoGet is refused (--max-concurrent-gets 4).
// Not parallel, so that the heap is this test's.
func TestStalledDoGetsHeapBounded(t *testing.T) {
	s := startServer(t, flightsvc.Config{MaxConcurrentGets: 4})
	payload := strings.Repeat("x", 1000)
	for e := int64(0); e < 16; e++ {
		b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
		for i := int64(0); i < 1024; i++ {
			b.Field(0).(*array.Int64Builder).Append(e*1024 + i)
			b.Field(1).(*array.StringBuilder).Append(payload)
		}
		rec := b.NewRecordBatch()
		b.Release()
		_, err := s.put(testCtx(t), cmdDesc(t, epochCmd("wide", "q", e)), rowSchema, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	tk := []byte(`{"table": "wide"}`)
	slow, err := flight.NewClientWithMiddleware(s.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	stalled, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	for range 4 {
		stream, err := slow.DoGet(stalled, &flight.Ticket{Ticket: tk})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// Let the streams fill what they may buffer: a wait, not a timing assertion.
	time.Sleep(300 * time.Millisecond)
	grown := int64(heap()) - int64(before)
	t.Logf("4 stalled DoGets of a 16 MiB table: heap grew %d bytes", grown)
	const bound = 4 * 12 << 20
	if grown > bound {
		t.Fatalf("4 stalled DoGets grew the heap by %d bytes, want under %d", grown, bound)
	}
	_, err = s.get(testCtx(t), cmd{"table": "wide"})
	wantReason(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
}
