package flightsvc_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// epochBatch is a rowSchema batch with ids 0..keys-1, each row's payload "e<epoch>".
func epochBatch(keys int, epoch int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
	defer b.Release()
	for id := 0; id < keys; id++ {
		b.Field(0).(*array.Int64Builder).Append(int64(id))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("e%d", epoch))
	}
	return b.NewRecordBatch()
}

// A writer puts keyed epochs whose rows span both shards of a MemWAL table while readers DoGet
// and read GetFlightInfo's endpoints in a loop: every epoch rewrites every key with its own
// number, so a read that sees whole epochs returns every key with one epoch's number. A read
// with keys of two epochs saw one shard's part of the newest epoch without the other's.
//
// Whether a read falls between two shards' applies is up to the scheduler; the invariant is
// checked on every read, and the deterministic case (a read held between the applies) is
// streaming's TestMemWALKeyedEpochVisibleAtOnce and memwal's TestShardSetEpochVisibleAtOnce.
func TestMemWALKeyedEpochsReadWhole(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const keys, epochs = 64, 60
	put := func(e int64) {
		t.Helper()
		c := cmd{"table": "k", "query_id": "q", "epoch_id": e, "mode": "update",
			"create": cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}}
		rec := epochBatch(keys, e)
		defer rec.Release()
		a, err := s.put(testCtx(t), cmdDesc(t, c), rowSchema, rec)
		if err != nil || a.Status != "committed" || a.Route != "memwal" {
			t.Errorf("epoch %d: %+v %v", e, a, err)
		}
	}
	put(0)
	var done atomic.Bool
	var reads atomic.Int64
	check := func(what string, payloads []string) {
		counts := map[string]int{}
		for _, p := range payloads {
			counts[p]++
		}
		if len(counts) != 1 || len(payloads) != keys {
			t.Errorf("%s returned %d rows of epochs %v, want the %d keys of one epoch", what, len(payloads), counts, keys)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for e := int64(1); e <= epochs; e++ {
			put(e)
		}
		done.Store(true)
	})
	for range 2 {
		wg.Go(func() {
			for !done.Load() && !t.Failed() {
				r, err := s.get(testCtx(t), cmd{"table": "k"})
				if err != nil {
					t.Errorf("DoGet: %v", err)
					return
				}
				check("DoGet", r.Payloads)
				reads.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !done.Load() && !t.Failed() {
			info, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("k"))
			if err != nil {
				t.Errorf("GetFlightInfo: %v", err)
				return
			}
			var payloads []string
			for _, ep := range info.Endpoint {
				r, err := s.get(testCtx(t), ep.Ticket.Ticket)
				if err != nil {
					t.Errorf("endpoint: %v", err)
					return
				}
				payloads = append(payloads, r.Payloads...)
			}
			check("GetFlightInfo's endpoints", payloads)
			reads.Add(1)
		}
	})
	wg.Wait()
	r, err := s.get(testCtx(t), cmd{"table": "k"})
	if err != nil {
		t.Fatal(err)
	}
	check("the last DoGet", r.Payloads)
	if r.Payloads[0] != fmt.Sprintf("e%d", epochs) {
		t.Fatalf("the last DoGet reads epoch %s, want e%d", r.Payloads[0], epochs)
	}
	t.Logf("%d reads during %d epochs", reads.Load(), epochs)
}
