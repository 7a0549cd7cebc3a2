package reliability

// Reads of a MemWAL table on a server whose shard writer another server has fenced.

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestFencedWriterServesStaleReads: server A writes epoch 0 of a query to a MemWAL shard (A's
// sink now holds the shard's writer), server B writes epoch 1 (B claims the shard and fences A's
// writer). Both are acknowledged, so a DoGet on A must return both epochs; A's writer does not
// know it was fenced, and A serves the table from its stale memtable.
func TestFencedWriterServesStaleReads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs server processes")
	}
	root := t.TempDir()
	a := mustStartServer(t, "a", root)
	b := mustStartServer(t, "b", root)
	ctx := context.Background()
	create := map[string]any{"memwal": map[string]any{"shards": 1}}
	for i, s := range []*server{a, b} {
		rec := epochBatch(0, "q", int64(i), 10)
		got, err := doPut(ctx, s.Client, map[string]any{"table": "w", "query_id": "q", "epoch_id": i, "create": create}, rec)
		rec.Release()
		if err != nil || got.Status != "committed" {
			t.Fatalf("epoch %d on %s: %+v, %v", i, s.Name, got, err)
		}
	}
	sent := map[epochKey]int{{"q", 0}: epochRows("q", 0, 10), {"q", 1}: epochRows("q", 1, 10)}
	acked := map[epochKey]bool{{"q", 0}: true, {"q", 1}: true}
	for _, s := range []*server{b, a} {
		rows, err := readTable(ctx, s.Client, "w")
		if err != nil {
			t.Fatalf("read on %s: %v", s.Name, err)
		}
		if _, _, problems := checkRows("w", rows, map[string]bool{"q": true}, acked, sent, true); len(problems) > 0 {
			t.Fatalf("read on %s:\n%s", s.Name, strings.Join(problems, "\n"))
		}
	}
}

// TestFencedShardSnapshotIsStale is the same at the memwal level: a Shard whose claim another
// writer took still answers Snapshot from its own memtable, without the other writer's
// acknowledged puts, instead of failing with ErrFenced.
func TestFencedShardSnapshotIsStale(t *testing.T) {
	ctx := context.Background()
	tbl, id := oneShardTable(t)
	opts := &memwal.Options{MemtableMaxAge: -1}
	put := func(s *memwal.Shard, e int64) {
		rec := epochBatch(0, "q", e, 10)
		defer rec.Release()
		if _, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: e}, rec); err != nil {
			t.Fatalf("put epoch %d: %v", e, err)
		}
	}
	first, err := memwal.OpenShard(ctx, tbl, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	put(first, 0)
	second, err := memwal.OpenShard(ctx, tbl, id, opts) // fences first
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	put(second, 1)
	sn, err := first.Snapshot(ctx, 0)
	if err != nil {
		if !strings.Contains(err.Error(), "fenced") {
			t.Fatalf("snapshot of a fenced writer: %v, want ErrFenced", err)
		}
		return // the fix: a fenced writer refuses to answer for the shard
	}
	defer sn.Release()
	var rows int64
	if err := sn.Read(ctx, func(b arrow.RecordBatch) error { rows += b.NumRows(); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := int64(epochRows("q", 0, 10) + epochRows("q", 1, 10)); rows != want {
		t.Fatalf("snapshot of the fenced writer holds %d rows, the shard holds %d acknowledged rows", rows, want)
	}
}

// TestFencedShardReadsRowsTwice: the stale memtable of a fenced writer also double-counts. Writer
// A puts epoch 0; writer B claims the shard, replays epoch 0, flushes it, and a folder folds it
// into the base table. A merged read through A then has epoch 0 from the base table and again
// from A's memtable.
func TestFencedShardReadsRowsTwice(t *testing.T) {
	ctx := context.Background()
	tbl, id := oneShardTable(t)
	opts := &memwal.Options{MemtableMaxAge: -1}
	first, err := memwal.OpenShard(ctx, tbl, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	rec := epochBatch(0, "q", 0, 10)
	defer rec.Release()
	if _, err := first.Put(ctx, &epochid.ID{QueryID: "q", EpochID: 0}, rec); err != nil {
		t.Fatal(err)
	}
	second, err := memwal.OpenShard(ctx, tbl, id, opts) // fences first, replays epoch 0
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := memwal.NewFolder(tbl, nil).FoldShard(ctx, id); err != nil {
		t.Fatal(err)
	}
	rows := scanMerged(t, ctx, tbl, []memwal.ShardReader{first})
	sent := map[epochKey]int{{"q", 0}: int(rec.NumRows())}
	if _, _, problems := checkRows("w", rows, map[string]bool{"q": true}, map[epochKey]bool{{"q", 0}: true}, sent, true); len(problems) > 0 {
		t.Fatalf("merged read through the fenced writer:\n%s", strings.Join(problems, "\n"))
	}
}

// oneShardTable creates a MemWAL table with one shard on a local store and returns its shard id.
func oneShardTable(t *testing.T) (*engine.Table, string) {
	t.Helper()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := engine.Create(t.Context(), store, "w", epochSchema, engine.CreateOptions{Config: map[string]string{memwal.ConfigShards: "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl, memwal.ShardIDs(1)[0]
}
