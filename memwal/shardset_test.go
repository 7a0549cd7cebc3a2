package memwal

import (
	"context"
	"maps"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// The ShardSet's lifecycle: reads (Scan, Stats, Readers) claim nothing and write nothing; a put
// claims the shard; a writer fenced by another server is reopened once by the next put, which
// lands without a duplicate; and the fold is a maintenance step that runs (inline) once enough
// generations are flushed, stamped as maintenance, first in the run.
func TestShardSetLifecycle(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		ids := []string{testShardID}
		var ran []engine.MaintenanceOperation
		ss := NewShardSet(tbl, ids, &ShardSetOptions{
			Shard:           *testOptions(),
			FoldGenerations: 2,
			Maintainer: engine.MaintainerOptions{DefaultConfig: &engine.MaintenanceConfig{Mode: engine.MaintenanceInline},
				Steps: []engine.MaintenanceStep{{Operation: "probe", Due: func(context.Context, *engine.Manifest) (bool, error) { return true, nil },
					Run: func(context.Context, map[string]string) error { ran = append(ran, "probe"); return nil }}}},
		})
		t.Cleanup(ss.Close)

		before := storeObjects(t, store)
		if got := readSet(t, ss); len(got) != 0 {
			t.Fatalf("empty shard set reads %v", got)
		}
		if st, err := ss.Stats(ctx); err != nil || len(st) != 1 || st[0].WriterEpoch != 0 {
			t.Fatalf("stats of an unclaimed shard: %+v %v", st, err)
		}
		if after := storeObjects(t, store); len(after) != len(before) {
			t.Fatalf("reads wrote %d objects", len(after)-len(before))
		}

		held := func(w *Shard) (bool, error) { return false, nil }
		setPut := func(e, from int64) {
			t.Helper()
			rec := makeRows(from, 2, "v", e)
			defer rec.Release()
			m, err := tbl.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if done, err := ss.Put(ctx, 0, m, &epochid.ID{QueryID: "q", EpochID: e}, []arrow.RecordBatch{rec}, held); err != nil || done {
				t.Fatalf("put epoch %d: %v %v", e, done, err)
			}
		}
		setPut(0, 0)
		first := ss.Readers()[0].(*Shard)

		// Another server claims the shard: the set's writer is fenced; its next put reopens.
		other := openShard(t, tbl, testShardID, nil)
		other.Close()
		setPut(1, 10)
		if w := ss.Readers()[0].(*Shard); w == first || w.WriterEpoch() <= other.WriterEpoch() {
			t.Fatalf("the put after fencing did not reopen the shard (epoch %d, the other server's %d)", w.WriterEpoch(), other.WriterEpoch())
		}
		if got := readSet(t, ss); len(got) != 4 {
			t.Fatalf("after the reopen the set reads %v, want 4 rows once each", got)
		}
		if got := ss.Claims(); !maps.Equal(got, map[string]int64{ClaimStart: 1, ClaimFenced: 1}) {
			t.Fatalf("claims %v, want the first put's start claim and the reopen's fenced claim", got)
		}

		// Two flushed generations: the fold is due, and AfterPut runs the maintenance inline.
		for e := int64(2); e < 4; e++ {
			setPut(e, e*10)
			if err := ss.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		m, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ss.AfterPut(ctx, m); err != nil {
			t.Fatal(err)
		}
		m, err = tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.MemWALMerged[testShardID] == 0 || m.Transaction.Properties[engine.PropMaintenance] != string(MaintainFold) {
			t.Fatalf("after AfterPut: merged watermark %d, last commit %v; want a maintenance fold",
				m.MemWALMerged[testShardID], m.Transaction.Properties)
		}
		if len(ran) != 1 {
			t.Fatalf("contributed steps ran %v; want the probe once, in the fold's run", ran)
		}
		if got := readSet(t, ss); len(got) != 8 {
			t.Fatalf("after the fold the set reads %v, want 8 rows once each", got)
		}
		// Folded: not due again until the shard flushes again.
		if err := ss.AfterPut(ctx, m); err != nil || len(ran) != 1 {
			t.Fatalf("a second AfterPut with nothing to fold ran %v (%v)", ran, err)
		}
	})
}

func readSet(t *testing.T, ss *ShardSet) []row {
	t.Helper()
	return readMerged(t, ss.Table(), ss.Readers()...)
}
