package streaming

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Two servers (sinks) on one unkeyed MemWAL table with two shards, one query hopping between
// them: each server owns one shard from its first put on and claims nothing else; a replay through
// the other server is a duplicate, from the WAL and, once each server flushed its own shard, from
// the watermark (its last two epochs there: the one before the last is what a query replays when
// its last became durable unacknowledged); epoch_status answers through either; an older epoch
// below a watermark the query flushed is a reused query id wherever it goes; and every row is
// there once.
func TestMemWALQueryHopsServers(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := NewSink(store, nil), NewSink(store, nil)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	spec := memwalSpec(2)
	want := func(s *Sink, e int64, status Status, ids ...int) {
		t.Helper()
		var pairs []any
		for _, id := range ids {
			pairs = append(pairs, id, "v")
		}
		if ack := putKV(t, s, "m", "q", e, ModeAppend, spec, pairs...); ack.Status != status || ack.Route != RouteMemWAL {
			t.Fatalf("epoch %d: %+v, want %s", e, ack, status)
		}
	}
	want(a, 0, StatusCommitted, 0, 1)
	want(a, 1, StatusCommitted, 10, 11)
	want(b, 1, StatusDuplicate, 10, 11) // the driver failed over: a replay, in a's shard's WAL
	want(b, 2, StatusCommitted, 20, 21)
	want(a, 2, StatusDuplicate, 20, 21) // and back
	want(a, 3, StatusCommitted, 30, 31) // a's shard: 0, 1, 3
	for _, s := range []*Sink{a, b} {
		for e := int64(0); e < 4; e++ {
			if st, err := s.EpochStatus(ctx, "m", "q", e); err != nil || !st.Committed {
				t.Fatalf("epoch_status of epoch %d: %+v %v", e, st, err)
			}
		}
	}
	for _, s := range []*Sink{a, b} {
		if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	want(a, 2, StatusDuplicate, 20, 21) // from b's shard's watermark
	want(b, 3, StatusDuplicate, 30, 31) // from a's shard's watermark: its top epoch
	want(b, 1, StatusDuplicate, 10, 11) // and the one before it
	for _, s := range []*Sink{a, b} {
		_, err := s.WriteEpoch(ctx, EpochRequest{Table: "m", QueryID: "q", EpochID: 0, Mode: ModeAppend, Create: spec},
			kvSource(t, []arrow.RecordBatch{kv(0, "v")}...))
		if !errors.Is(err, ErrQueryReused) {
			t.Fatalf("epoch 0 after the query flushed epochs 1, 2 and 3: %v, want ErrQueryReused", err)
		}
	}
	got := readKV(t, b, "m")
	if len(got) != 8 {
		t.Fatalf("rows %v, want 8", got)
	}
	for id, vs := range got {
		if len(vs) != 1 {
			t.Fatalf("id %d present %d times", id, len(vs))
		}
	}
	var owned []int
	for name, s := range map[string]*Sink{"a": a, "b": b} {
		s.mu.Lock()
		ss := s.memwal["m"]
		s.mu.Unlock()
		if got := ss.Claims(); !maps.Equal(got, map[string]int64{memwal.ClaimStart: 1}) {
			t.Fatalf("server %s claims %v, want one start claim", name, got)
		}
		i, err := ss.Route(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		owned = append(owned, i)
	}
	if owned[0] == owned[1] {
		t.Fatalf("both servers route to shard %d", owned[0])
	}
}
