package memwal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// Writers a table's drop left open on other servers write no shard state once the drop has
// begun: a flush, a lease renewal and the flush of a graceful shutdown are refused
// (engine.ErrTableNotFound) and stop the writer, and a table created again under the name starts
// with shards that hold nothing.
func TestShardWritersOfDroppedTableWriteNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		ttl := 300 * time.Millisecond
		srv := newOwnerServers(t, store, 3, ttl, ttl, ttl)
		flusher, renewer, closer := srv[0], srv[1], srv[2]
		for i, s := range srv {
			if _, err := s.put(string(rune('a'+i)), 0, int64(i)*10, 5); err != nil {
				t.Fatal(err)
			}
		}
		flushing, renewing := flusher.ss.healthyWriters(), renewer.ss.healthyWriters()
		if len(flushing) != 1 || len(renewing) != 1 {
			t.Fatalf("the servers write %d and %d shards, want 1 each", len(flushing), len(renewing))
		}
		if _, err := engine.Drop(ctx, store, "events"); err != nil {
			t.Fatal(err)
		}

		// The flusher's own lease renewal (its owner loop) may have stopped its writer already:
		// then the flush finds nothing to flush.
		if err := flusher.ss.Flush(ctx); err != nil && !errors.Is(err, engine.ErrTableNotFound) {
			t.Fatalf("flush after the drop: %v, want ErrTableNotFound or nothing", err)
		}
		// A renewal is due a third of the TTL after the owner's last commit.
		time.Sleep(ttl / 3)
		renewer.ss.renewLeases(ctx)
		for what, ws := range map[string]map[int]*Shard{"flush": flushing, "lease renewal": renewing} {
			for _, w := range ws {
				if err := w.Err(); !errors.Is(err, engine.ErrTableNotFound) {
					t.Fatalf("writer after a %s of the dropped table: %v, want ErrTableNotFound", what, err)
				}
			}
		}

		fresh, err := engine.Create(ctx, store, "events", rowsSchema, engine.CreateOptions{Config: map[string]string{ConfigShards: "3"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		closer.ss.Close() // the graceful shutdown's flush, into the name the new table holds
		for _, id := range ShardIDs(3) {
			if m, err := NewManifestStore(store, "events", id, nil).ReadLatest(ctx); !errors.Is(err, ErrNoManifest) {
				t.Fatalf("shard %s of the new table: manifest %+v, %v; want none", id, m, err)
			}
		}
		ss := NewShardSet(fresh, ShardIDs(3), &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
		defer ss.Close()
		if rows := readSet(t, ss); len(rows) != 0 {
			t.Fatalf("the new table reads %d rows of the dropped one", len(rows))
		}
	})
}

// A put into a shard writer of a dropped table is not acknowledged: the drop fence after its WAL
// entry refuses it (engine.ErrTableNotFound), removes an entry object, and stops the writer.
func TestShardPutIntoDroppedTableRefused(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		srv := newOwnerServers(t, store, 1, 0)[0]
		if _, err := srv.put("a", 0, 0, 5); err != nil {
			t.Fatal(err)
		}
		w := srv.ss.healthyWriters()[0]
		if _, err := engine.Drop(ctx, store, "events"); err != nil {
			t.Fatal(err)
		}
		// Straight to the writer: a put through the set reads the table first, and finds it gone.
		rec := makeRows(5, 5, "a", 1)
		defer rec.Release()
		if _, err := w.Put(ctx, &epochid.ID{QueryID: "a", EpochID: 1}, rec); !errors.Is(err, engine.ErrTableNotFound) {
			t.Fatalf("put after the drop: %v, want ErrTableNotFound", err)
		}
		if err := w.Err(); !errors.Is(err, engine.ErrTableNotFound) {
			t.Fatalf("writer after the refused put: %v, want ErrTableNotFound", err)
		}
		if !w.wal.Segmented() {
			objs, err := store.List(ctx, "events/", "")
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 0 {
				t.Fatalf("the refused put left %d objects under the dropped table, first %s", len(objs), objs[0].Key)
			}
		}
	})
}
