package memwal

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// beforeShardRead is a store that runs a function once, before the next read of a shard
// manifest: a fold placed exactly between a reader's read of the base version and its read of
// the shards.
type beforeShardRead struct {
	objstore.Store
	mu   sync.Mutex
	once func()
}

func (s *beforeShardRead) arm(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.once = f
}

func (s *beforeShardRead) before(key string) {
	if !strings.Contains(key, "/_mem_wal/") || !strings.Contains(key, "/manifest/") {
		return
	}
	s.mu.Lock()
	f := s.once
	s.once = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

func (s *beforeShardRead) Get(ctx context.Context, key string) ([]byte, error) {
	s.before(key)
	return s.Store.Get(ctx, key)
}

func (s *beforeShardRead) List(ctx context.Context, prefix, startAfter string) ([]objstore.ObjectInfo, error) {
	s.before(prefix)
	return s.Store.List(ctx, prefix, startAfter)
}

// A fold that commits and drains a shard's generations after table_stats read the base version
// and before it read the shard: the state reads again from the fold's version, so the rows are
// counted once (in the base) instead of in neither part, and the shards' details agree with it.
func TestTableStateAcrossAFold(t *testing.T) {
	storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
		for _, pk := range [][]string{nil, {"id"}} {
			ctx := context.Background()
			hooked := &beforeShardRead{Store: store}
			tbl, err := engine.Create(ctx, hooked, "events"+strings.Join(pk, ""), rowsSchema,
				engine.CreateOptions{PrimaryKey: pk, Config: map[string]string{ConfigShards: "1"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ss := NewShardSet(tbl, []string{testShardID}, &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
			t.Cleanup(ss.Close)
			rec := makeRows(0, 3100, "v", 0)
			m, err := tbl.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			noHeld := func(*Shard) (bool, error) { return false, nil }
			if _, err := ss.Put(ctx, 0, m, &epochid.ID{QueryID: "q", EpochID: 0}, []arrow.RecordBatch{rec}, noHeld); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			if err := ss.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := ss.TableState(ctx); err != nil || st.Rows() != 3100 || st.MemWALRows != 3100 {
				t.Fatalf("pk %v before the fold: rows %d (MemWAL %d), %v; want 3100 in MemWAL", pk, st.Rows(), st.MemWALRows, err)
			}
			folded := false
			hooked.arm(func() {
				n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID)
				folded = err == nil && n == 1
			})
			st, err := ss.TableState(ctx)
			if err != nil {
				t.Fatalf("pk %v: %v", pk, err)
			}
			if !folded {
				t.Fatalf("pk %v: the fold between the reads did not run", pk)
			}
			var detailRows int64
			for _, sh := range st.Shards {
				detailRows += sh.GenerationRows + sh.MemtableRows
			}
			if st.Rows() != 3100 || st.BaseRows != 3100 || st.MemWALRows != 0 || detailRows != 0 || st.Manifest.MemWALMerged[testShardID] != 1 {
				t.Fatalf("pk %v across a fold: version %d rows %d (base %d, MemWAL %d), shard details %d rows; want 3100 in the base at the fold's version",
					pk, st.Manifest.Version, st.Rows(), st.BaseRows, st.MemWALRows, detailRows)
			}
		}
	})
}
