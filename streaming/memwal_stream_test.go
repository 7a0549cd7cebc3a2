package streaming

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// failingSource yields its batches, then fails instead of ending: a client gone mid-epoch.
type failingSource struct {
	BatchSource
	err error
}

func (f *failingSource) Next() bool { return f.BatchSource.Next() }
func (f *failingSource) Err() error { return f.err }

// kvEpoch returns n batches of 3 rows with ids from e*100 on, valued tag.
func kvEpoch(e int64, n int, tag string) []arrow.RecordBatch {
	var recs []arrow.RecordBatch
	for i := 0; i < n; i++ {
		id := int(e)*100 + i*3
		recs = append(recs, kv(id, tag, id+1, tag, id+2, tag))
	}
	return recs
}

// Epochs past the streaming threshold are streamed into the shard (a local disk) or buffered (an
// object store): each lands exactly once, across a restart too; a replay is a duplicate; a stream
// that fails part-way acknowledges nothing and leaves nothing; a keyed table takes the buffered
// path.
func TestMemWALLargeEpochsStream(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		opts := &Options{MemWAL: memwal.Options{StreamPutBytes: 1}} // every epoch streams after its first batch
		s := NewSink(store, opts)
		spec := memwalSpec(2)
		write := func(s *Sink, e int64, src BatchSource) (Ack, error) {
			return s.WriteEpoch(ctx, EpochRequest{Table: "m", QueryID: "q", EpochID: e, Mode: ModeAppend, Create: spec}, src)
		}
		for e := int64(0); e < 3; e++ {
			recs := kvEpoch(e, 4, "x")
			a, err := write(s, e, kvSource(t, recs...))
			arrowschema.ReleaseBatches(recs)
			if err != nil || a.Status != StatusCommitted || a.Rows != 12 || a.Route != RouteMemWAL {
				t.Fatalf("epoch %d: %+v %v", e, a, err)
			}
		}
		recs := kvEpoch(1, 4, "x")
		if a, err := write(s, 1, kvSource(t, recs...)); err != nil || a.Status != StatusDuplicate {
			t.Fatalf("replay of a streamed epoch: %+v %v", a, err)
		}
		arrowschema.ReleaseBatches(recs)
		// A stream that fails after 3 of its batches: an error, nothing lands.
		recs = kvEpoch(3, 3, "broken")
		broken := errors.New("client went away")
		if _, err := write(s, 3, &failingSource{BatchSource: kvSource(t, recs...), err: broken}); !errors.Is(err, broken) {
			t.Fatalf("an epoch whose stream fails: %v, want %v", err, broken)
		}
		arrowschema.ReleaseBatches(recs)
		check := func(s *Sink, what string) {
			t.Helper()
			got := readKV(t, s, "m")
			if len(got) != 36 {
				t.Fatalf("%s: %d ids, want 36", what, len(got))
			}
			for id, vs := range got {
				if len(vs) != 1 || vs[0] != "x" {
					t.Fatalf("%s: id %d holds %v, want one x", what, id, vs)
				}
			}
		}
		check(s, "after the streams")
		s.Close()
		s = NewSink(store, opts)
		defer s.Close()
		check(s, "after a restart")
		recs = kvEpoch(2, 4, "x")
		if a, err := write(s, 2, kvSource(t, recs...)); err != nil || a.Status != StatusDuplicate {
			t.Fatalf("replay after a restart: %+v %v", a, err)
		}
		arrowschema.ReleaseBatches(recs)
		recs = kvEpoch(3, 4, "x")
		if a, err := write(s, 3, kvSource(t, recs...)); err != nil || a.Status != StatusCommitted {
			t.Fatalf("the failed epoch sent again: %+v %v", a, err)
		}
		arrowschema.ReleaseBatches(recs)

		// A keyed table: buffered, newest row wins as ever.
		keyed := memwalSpec(2, "id")
		for e := int64(0); e < 2; e++ {
			recs := kvEpoch(0, 3, []string{"old", "new"}[e])
			a, err := s.WriteEpoch(ctx, EpochRequest{Table: "k", QueryID: "q", EpochID: e, Mode: ModeUpdate, Create: keyed}, kvSource(t, recs...))
			arrowschema.ReleaseBatches(recs)
			if err != nil || a.Status != StatusCommitted {
				t.Fatalf("keyed epoch %d: %+v %v", e, a, err)
			}
		}
		for id, vs := range readKV(t, s, "k") {
			if len(vs) != 1 || vs[0] != "new" {
				t.Fatalf("keyed id %d holds %v, want the newest row", id, vs)
			}
		}
	})
}
