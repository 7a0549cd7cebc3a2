package memwal

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// keyedSet is a keyed table of two shards and its ShardSet, with nothing folded automatically.
func keyedSet(t *testing.T, store objstore.Store) (*engine.Table, *ShardSet) {
	t.Helper()
	tbl, err := engine.Create(context.Background(), store, "events", rowsSchema,
		engine.CreateOptions{PrimaryKey: []string{"id"}, Config: map[string]string{ConfigShards: "2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss := NewShardSet(tbl, ShardIDs(2), &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
	t.Cleanup(ss.Close)
	return tbl, ss
}

// epochParts splits epoch e's rows (ids from..from+n-1, each row's epoch column e) by key into
// the two shards' parts; both must have rows.
func epochParts(t *testing.T, e, from, n int64) []arrow.RecordBatch {
	t.Helper()
	rec := makeRows(from, n, "v", e)
	defer rec.Release()
	parts, err := PartitionByKey(context.Background(), rec, []string{"id"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		if p == nil {
			t.Fatalf("epoch %d has no row for shard %d", e, i)
		}
		t.Cleanup(p.Release)
	}
	return parts
}

// putPart puts epoch e's part of shard i.
// putPart puts part into shard i as a part of epoch e, with the context BeginEpoch returned.
func putPart(t *testing.T, ctx context.Context, ss *ShardSet, i int, e int64, part arrow.RecordBatch) {
	t.Helper()
	m, err := ss.Table().Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noHeld := func(*Shard) (bool, error) { return false, nil }
	if _, err := ss.Put(ctx, i, m, &epochid.ID{QueryID: "q", EpochID: e}, []arrow.RecordBatch{part}, noHeld); err != nil {
		t.Fatalf("put epoch %d shard %d: %v", e, i, err)
	}
}

// epochCounts reads the set (Scan) and returns the rows of each epoch.
func epochCounts(t *testing.T, ss *ShardSet) map[int64]int64 {
	t.Helper()
	r, err := ss.Scan(context.Background(), engine.ScanOptions{})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	defer r.Release()
	out := map[int64]int64{}
	for r.Next() {
		b := r.RecordBatch()
		col := b.Column(b.Schema().FieldIndices("epoch")[0]).(*array.Int64)
		for i := 0; i < col.Len(); i++ {
			out[col.Value(i)]++
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

// An epoch whose parts span two shards is visible to the set's reads whole or not at all: with
// one part applied and the other not yet, a read (Scan, Pin) sees none of it; once the epoch
// ends, all of it. A part flushed to a generation before the epoch ended makes the read wait for
// the epoch and read it whole.
func TestShardSetEpochVisibleAtOnce(t *testing.T) {
	storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl, ss := keyedSet(t, store)

		parts := epochParts(t, 1, 0, 40)
		pctx, end, err := ss.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 1})
		if err != nil {
			t.Fatal(err)
		}
		putPart(t, pctx, ss, 0, 1, parts[0])
		if got := epochCounts(t, ss); got[1] != 0 {
			t.Fatalf("one shard's part applied, the other not: the read returns %d rows of the epoch, want none", got[1])
		}
		pin, err := ss.Pin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pin.Rows() != 0 {
			t.Fatalf("pinned read of a half-applied epoch holds %d rows, want none", pin.Rows())
		}
		pin.Release()
		putPart(t, pctx, ss, 1, 1, parts[1])
		end()
		if got := epochCounts(t, ss); got[1] != 40 {
			t.Fatalf("after the epoch ended the read returns %d of its 40 rows", got[1])
		}

		// A replay of the acknowledged epoch (it finds the epoch held and puts nothing) is in
		// flight: the acknowledged rows stay visible.
		_, endReplay, err := ss.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := epochCounts(t, ss); got[1] != 40 {
			t.Fatalf("while a replay of the acknowledged epoch is in flight the read returns %d of its 40 rows", got[1])
		}
		pin, err = ss.Pin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pin.Rows() != 40 {
			t.Fatalf("pinned read while a replay of the acknowledged epoch is in flight holds %d of its 40 rows", pin.Rows())
		}
		pin.Release()
		endReplay()
		// The same on a server that writes none of the shards (it reads them from storage): a
		// replay there of the epoch another server acknowledged.
		other := NewShardSet(tbl, ShardIDs(2), &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
		defer other.Close()
		_, endReplay, err = other.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := epochCounts(t, other); got[1] != 40 {
			t.Fatalf("a server reading the shards from storage, a replay of the acknowledged epoch in flight there: the read returns %d of its 40 rows", got[1])
		}
		endReplay()

		// A part flushed before the epoch ends: the read waits for the epoch.
		parts = epochParts(t, 2, 100, 40)
		pctx, end, err = ss.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 2})
		if err != nil {
			t.Fatal(err)
		}
		putPart(t, pctx, ss, 0, 2, parts[0])
		if err := ss.Flush(ctx, 0); err != nil {
			t.Fatal(err)
		}
		read := make(chan map[int64]int64)
		go func() { read <- epochCounts(t, ss) }()
		putPart(t, pctx, ss, 1, 2, parts[1])
		end()
		if got := <-read; got[2] != 40 || got[1] != 40 {
			t.Fatalf("a read while a flushed part's epoch was in flight returned %v rows per epoch, want 40 of epochs 1 and 2", got)
		}
	})
}

// Quiesce waits for the epochs in flight to end, and epochs that begin meanwhile wait for its
// release; reads go on.
func TestShardSetQuiesceOrdersEpochs(t *testing.T) {
	storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		_, ss := keyedSet(t, store)
		_, end, err := ss.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 1})
		if err != nil {
			t.Fatal(err)
		}
		var ended, released atomic.Bool
		quiesced := make(chan func())
		go func() {
			release, err := ss.Quiesce(ctx)
			if err != nil {
				t.Error(err)
			}
			if !ended.Load() {
				t.Error("Quiesce returned while an epoch was in flight")
			}
			quiesced <- release
		}()
		epochCounts(t, ss) // a read does not wait for the epoch in flight
		ended.Store(true)
		end()
		release := <-quiesced
		began := make(chan struct{})
		go func() {
			_, end, err := ss.BeginEpoch(ctx, &epochid.ID{QueryID: "q", EpochID: 2})
			if err != nil {
				t.Error(err)
			} else {
				end()
			}
			if !released.Load() {
				t.Error("an epoch began while the set was quiesced")
			}
			close(began)
		}()
		epochCounts(t, ss) // nor for a quiesced set
		released.Store(true)
		release()
		<-began
	})
}
