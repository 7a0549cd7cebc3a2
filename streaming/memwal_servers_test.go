package streaming

import (
	"context"
	"errors"
	"fmt"
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

// A table dropped on one server while another holds a MemWAL writer of it (idle, rows in its
// memtable and in a flushed generation) and created again under the name starts clean: the other
// server writes no state of the dropped table into it (its set is of the dropped incarnation: its
// writers' flush is refused), a query starts again at epoch 0 through either server, and both
// read the new rows only.
func TestMemWALDropWithWriterOnAnotherServer(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := NewSink(store, nil), NewSink(store, nil)
	t.Cleanup(a.Close)
	spec := memwalSpec(2)
	put := func(s *Sink, e int64, id int) {
		t.Helper()
		if ack := putKV(t, s, "m", "q", e, ModeAppend, spec, id, "v"); ack.Status != StatusCommitted {
			t.Fatalf("epoch %d: %+v", e, ack)
		}
	}
	put(b, 0, 0)
	put(b, 1, 1)
	if _, err := b.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	put(b, 2, 2) // in b's memtable
	if _, err := a.DropTable(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	put(a, 0, 100) // creates the table again
	put(b, 1, 101)
	want := fmt.Sprint(map[int64][]string{100: {"v"}, 101: {"v"}})
	for name, s := range map[string]*Sink{"a": a, "b": b} {
		if got := readKV(t, s, "m"); fmt.Sprint(got) != want {
			t.Fatalf("read through %s: got %v, want %s", name, got, want)
		}
	}
	b.Close() // the graceful shutdown flushes what b writes
	if _, err := a.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.FoldMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	if got := readKV(t, a, "m"); fmt.Sprint(got) != want {
		t.Fatalf("read after b's shutdown and the fold: got %v, want %s", got, want)
	}
}
