package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// TestIndexCatchupGatesMemWALRetirement runs Lance's MemWAL index catch-up end to end with the real MemWAL: on a table
// with an index, a folded generation's files stay until an index optimize proves the index holds
// its rows; on a table without one they go at once.
func TestIndexCatchupGatesMemWALRetirement(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "val", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	batch := func(from, n int64, tag string) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		for id := from; id < from+n; id++ {
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", tag, id))
		}
		return b.NewRecordBatch()
	}
	shard := memwal.ShardIDs(1)[0]
	for _, st := range storetest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			ctx := t.Context()
			for _, indexed := range []bool{false, true} {
				name := fmt.Sprintf("mw-indexed-%v", indexed)
				tbl, err := engine.Create(ctx, store, name, schema, engine.CreateOptions{PrimaryKey: []string{"id"},
					Config: map[string]string{memwal.ConfigShards: "1"}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if indexed {
					if _, err := tbl.CreateIndex(ctx, engine.IndexSpec{}); err != nil {
						t.Fatal(err)
					}
				}
				sh, err := memwal.OpenShard(ctx, tbl, shard, &memwal.Options{MemtableMaxRows: 1 << 40, MemtableMaxAge: -1})
				if err != nil {
					t.Fatal(err)
				}
				for e := int64(1); e <= 2; e++ {
					rec := batch(e*100, 50, "v")
					_, err := sh.Put(ctx, &epochid.ID{QueryID: "q", EpochID: e}, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
					if err := sh.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				c := memwal.NewFolder(tbl, nil)
				if n, err := c.FoldShard(ctx, shard); err != nil || n != 2 {
					t.Fatalf("compact: %d generations, %v", n, err)
				}
				gens := genDirs(t, store, name, shard)
				m, err := tbl.Latest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !indexed {
					if len(gens) != 0 {
						t.Fatalf("table without indices kept generations %v", gens)
					}
					sh.Close()
					continue
				}
				if len(gens) != 2 || engine.IndexesCoverGeneration(m, shard, 1) {
					t.Fatalf("before the index caught up: generation dirs %v, catch-up %v", gens, m.IndexCatchup)
				}
				// The index catches up; the next compaction of the shard retires the generations.
				if _, err := tbl.OptimizeIndices(ctx, engine.OptimizeIndexOptions{}); err != nil {
					t.Fatal(err)
				}
				if m, err = tbl.Latest(ctx); err != nil || !engine.IndexesCoverGeneration(m, shard, 2) {
					t.Fatalf("after optimize: catch-up %v (%v)", m.IndexCatchup, err)
				}
				if _, err := c.FoldShard(ctx, shard); err != nil {
					t.Fatal(err)
				}
				if gens := genDirs(t, store, name, shard); len(gens) != 0 {
					t.Fatalf("generations %v survive a caught-up index", gens)
				}
				if m.Rows() != 100 {
					t.Fatalf("table holds %d rows, want 100", m.Rows())
				}
				sh.Close()
			}
		})
	}
}

// genDirs lists the flushed generation directories of a shard.
func genDirs(t *testing.T, store objstore.Store, table, shard string) []string {
	t.Helper()
	objs, err := store.List(context.Background(), table+"/_mem_wal/"+shard+"/gen/", "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, table+"/_mem_wal/"+shard+"/gen/")
		if d, _, ok := strings.Cut(rest, "/"); ok && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}
