package flightsvc_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// Large MemWAL epochs streamed into the shard over Flight: a multi-batch epoch lands exactly once
// and its replay is a duplicate; a client that cancels its DoPut part-way acknowledges nothing
// and leaves nothing, and the epoch sent again is committed, not a duplicate.
func TestMemWALLargeEpochsStreamOverFlight(t *testing.T) {
	cfg := flightsvc.Config{}
	cfg.Sink.MemWAL.StreamPutBytes = 1 // every epoch streams after its first batch
	s := startServer(t, cfg)
	create := cmd{"memwal": cmd{"shards": 2}}
	epoch := func(e int64) [][]int64 {
		return [][]int64{idRange(e*1000, 100), idRange(e*1000+100, 100), idRange(e*1000+200, 100)}
	}
	var want []int64
	for e := int64(0); e < 3; e++ {
		a := s.mustPut(t, cmd{"table": "big", "query_id": "q", "epoch_id": e, "create": create}, epoch(e)...)
		if a.Status != "committed" || a.Route != "memwal" || a.Rows != 300 {
			t.Fatalf("epoch %d: %+v", e, a)
		}
		want = append(want, idRange(e*1000, 300)...)
	}
	if a := s.mustPut(t, cmd{"table": "big", "query_id": "q", "epoch_id": 1}, epoch(1)...); a.Status != "duplicate" {
		t.Fatalf("replay of a streamed epoch: %+v", a)
	}

	// Epoch 3: two batches sent, then the client cancels without closing the stream.
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := s.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, cmd{"table": "big", "query_id": "q", "epoch_id": 3}))
	for _, ids := range epoch(3)[:2] {
		b := batch(ids...)
		err := w.Write(b)
		b.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("a cancelled DoPut was acknowledged")
	}
	w.Close()
	s.wantIDs(t, "big", want)
	if a := s.mustPut(t, cmd{"table": "big", "query_id": "q", "epoch_id": 3}, epoch(3)...); a.Status != "committed" || a.Rows != 300 {
		t.Fatalf("the cancelled epoch sent again: %+v", a)
	}
	s.wantIDs(t, "big", append(want, idRange(3000, 300)...))
}
