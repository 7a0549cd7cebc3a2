package memwal

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// batchOf builds one batch from (id, val) pairs.
func batchOf(rows ...row) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowsSchema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.ID)
		b.Field(1).(*array.StringBuilder).Append(r.Val)
		b.Field(2).AppendNull()
	}
	return b.NewRecordBatch()
}

func putRows(t testing.TB, s *Shard, q string, epoch int64, rows ...row) {
	t.Helper()
	rec := batchOf(rows...)
	defer rec.Release()
	if _, err := s.Put(context.Background(), &epochid.ID{QueryID: q, EpochID: epoch}, rec); err != nil {
		t.Fatalf("put epoch %d: %v", epoch, err)
	}
}

// With a primary key the newest row of a key wins across the base table, flushed generations
// (later over earlier) and the memtable (later WAL position over earlier), before and after
// the fold merges the generations into the base table.
func TestPrimaryKeyNewestWins(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, []string{"id"})
		base := makeRows(0, 10, "base", 0)
		if _, err := tbl.Append(ctx, []arrow.RecordBatch{base}, nil); err != nil {
			t.Fatal(err)
		}
		base.Release()

		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 5, "g1") // ids 0-4
		flush(t, s)
		put(t, s, "q", 2, 2, 2, "g2") // ids 2-3
		flush(t, s)
		put(t, s, "q", 3, 3, 1, "m1")                           // id 3 again, in the memtable
		putRows(t, s, "q", 4, row{5, "m2"}, row{7, "first"})    // a later entry
		putRows(t, s, "q", 5, row{7, "second"}, row{7, "last"}) // one put, one key twice: the later row

		want := []row{{0, "g1-0"}, {1, "g1-1"}, {2, "g2-2"}, {3, "m1-3"}, {4, "g1-4"}, {5, "m2"},
			{6, "base-6"}, {7, "last"}, {8, "base-8"}, {9, "base-9"}}
		checkRows(t, "resident read", readMerged(t, tbl, s), want)
		checkRows(t, "stored read", readMerged(t, tbl, NewStoredShard(tbl, testShardID, nil)), want)

		// The fold is an upsert: the base table keeps one row per key.
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 2 {
			t.Fatalf("fold: %d, %v, want 2", n, err)
		}
		checkRows(t, "base after folding generations 1-2", baseRows(t, tbl), []row{{0, "g1-0"}, {1, "g1-1"}, {2, "g2-2"},
			{3, "g2-3"}, {4, "g1-4"}, {5, "base-5"}, {6, "base-6"}, {7, "base-7"}, {8, "base-8"}, {9, "base-9"}})
		checkRows(t, "resident read after the fold", readMerged(t, tbl, s), want)

		flush(t, s)
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("fold the memtable's generation: %d, %v, want 1", n, err)
		}
		checkRows(t, "base after folding everything", baseRows(t, tbl), want)
		checkRows(t, "resident read at the end", readMerged(t, tbl, s), want)
	})
}

// A table with several shards: keys routed by PartitionByKey, read back merged from every
// shard, folded shard by shard, and projected.
func TestMergedReadAcrossShards(t *testing.T) {
	ctx := context.Background()
	store, _ := objstore.NewLocal(t.TempDir())
	tbl, err := engine.Create(ctx, store, "events", rowsSchema,
		engine.CreateOptions{PrimaryKey: []string{"id"}, Config: map[string]string{ConfigShards: "3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := tbl.Latest(ctx)
	ids, err := TableShardIDs(m)
	if err != nil || len(ids) != 3 {
		t.Fatalf("shard ids: %v, %v", ids, err)
	}
	var shards []*Shard
	var readers []ShardReader
	for _, id := range ids {
		s := openShard(t, tbl, id, nil)
		shards = append(shards, s)
		readers = append(readers, s)
	}
	write := func(epoch int64, rec arrow.RecordBatch) {
		parts, err := PartitionByKey(ctx, rec, []string{"id"}, len(shards))
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range parts {
			if p == nil {
				continue
			}
			if _, err := shards[i].Put(ctx, &epochid.ID{QueryID: "q", EpochID: epoch}, p); err != nil {
				t.Fatal(err)
			}
			p.Release()
		}
	}
	r1 := makeRows(0, 300, "v1", 1)
	write(1, r1)
	r1.Release()
	for _, s := range shards {
		flush(t, s)
	}
	r2 := makeRows(100, 100, "v2", 2)
	write(2, r2)
	r2.Release()
	used := 0
	for _, s := range shards {
		if s.Stats().MemtableRows > 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("keys landed in %d of 3 shards", used)
	}
	want := expectRows(0, 100, "v1", 100, 100, "v2", 200, 100, "v1")
	checkRows(t, "merged read", readMerged(t, tbl, readers...), want)

	for _, id := range ids {
		if _, err := NewFolder(tbl, nil).FoldShard(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	checkRows(t, "merged read after the fold", readMerged(t, tbl, readers...), want)
	checkRows(t, "base after the fold", baseRows(t, tbl), expectRows(0, 300, "v1"))

	// Projection without the key column still applies newest-wins.
	r, err := ScanMerged(ctx, tbl, readers, engine.ScanOptions{Columns: []string{"val"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	n, v2 := 0, 0
	for r.Next() {
		b := r.RecordBatch()
		if b.NumCols() != 1 || b.Schema().Field(0).Name != "val" {
			t.Fatalf("projected batch schema %s", b.Schema())
		}
		vals := b.Column(0).(*array.String)
		for i := 0; i < vals.Len(); i++ {
			n++
			if vals.Value(i)[:2] == "v2" {
				v2++
			}
		}
	}
	if r.Err() != nil || n != 300 || v2 != 100 {
		t.Fatalf("projected read: %d rows, %d v2, err %v; want 300 and 100", n, v2, r.Err())
	}
}

// Without a primary key a merged read is the union of base and MemWAL rows.
func TestMergedReadUnion(t *testing.T) {
	ctx := context.Background()
	store, _ := objstore.NewLocal(t.TempDir())
	tbl := createTable(t, store, nil)
	base := makeRows(0, 5, "x", 0)
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{base}, nil); err != nil {
		t.Fatal(err)
	}
	base.Release()
	s := openShard(t, tbl, testShardID, nil)
	put(t, s, "q", 1, 0, 5, "x") // the same rows again: no key, so both copies count
	flush(t, s)
	put(t, s, "q", 2, 0, 5, "x")
	checkRows(t, "union", readMerged(t, tbl, s), expectRows(0, 5, "x", 0, 5, "x", 0, 5, "x"))
}
