package memwal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// generationOfKey returns the generation whose directory holds key, if key is a generation file.
func generationOfKey(key string) (uint64, bool) {
	i := strings.Index(key, "/"+genDir)
	if i < 0 {
		return 0, false
	}
	rest := key[i+1+len(genDir):]
	j := strings.IndexByte(rest, '/')
	if j < 0 {
		return 0, false
	}
	return parseGenDir(rest[:j])
}

// replaceGeneration overwrites the file of generation g of shard with typetest.StringIDStream (a stream the fold refuses).
func replaceGeneration(t testing.TB, tbl *engine.Table, shard string, g uint64) {
	t.Helper()
	fg, ok := latestShardManifest(t, tbl, shard).Generation(g)
	if !ok || len(fg.Files) != 1 {
		t.Fatalf("generation %d: %+v, listed %v", g, fg, ok)
	}
	key := newShardPaths(tbl.Name(), shard).root + fg.Dir + fg.Files[0].Name
	if err := tbl.Store().Put(context.Background(), key, bytes.NewReader(typetest.StringIDStream(t))); err != nil {
		t.Fatal(err)
	}
}

func quarantinedNumbers(m *ShardManifest) []uint64 {
	var out []uint64
	for _, q := range m.Quarantined {
		out = append(out, q.Generation)
	}
	return out
}

// A generation whose data the fold refuses is quarantined: the generations around it fold and
// are readable, nothing of it is read or appended, its files stay, table stats name it with the
// error and its epochs, a replay of its epoch is still recognised, and after a restart the next
// fold neither retries it nor deletes it.
func TestFoldQuarantinesAGenerationItsDataRefuses(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 10, "a")
		flush(t, s) // generation 1
		put(t, s, "q", 2, 10, 10, "b")
		flush(t, s) // generation 2: refused below
		put(t, s, "q", 3, 20, 10, "c")
		flush(t, s) // generation 3
		replaceGeneration(t, tbl, testShardID, 2)

		n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID)
		if err != nil || n != 2 {
			t.Fatalf("fold: %d, %v; want generations 1 and 3 folded", n, err)
		}
		want := expectRows(0, 10, "a", 20, 10, "c")
		checkRows(t, "base after the fold", baseRows(t, tbl), want)
		checkRows(t, "merged read", readMerged(t, tbl, s), want)
		m := latestShardManifest(t, tbl, testShardID)
		if got := generationNumbers(m); len(got) != 0 {
			t.Fatalf("shard still lists generations %v", got)
		}
		if got := quarantinedNumbers(m); len(got) != 1 || got[0] != 2 {
			t.Fatalf("quarantined %v, want [2]", got)
		}
		q := m.Quarantined[0]
		if !strings.Contains(q.Error, "schema mismatch") || q.Rows != 10 || len(q.Epochs) != 1 || q.Epochs[0] != (EpochSpan{QueryID: "q", First: 2, Last: 2}) {
			t.Fatalf("quarantine record %+v: want the schema error, 10 rows and epoch 2 of q", q)
		}
		base, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if base.MemWALMerged[testShardID] != 3 {
			t.Fatalf("merged watermark %d, want 3", base.MemWALMerged[testShardID])
		}
		genPrefix := newShardPaths(tbl.Name(), testShardID).root + makeGenDir(2)
		if n := countKeys(t, store, genPrefix); n != 1 {
			t.Fatalf("%d files of the quarantined generation left, want its file kept", n)
		}
		st, err := ReadStats(ctx, s)
		if err != nil || len(st.Quarantined) != 1 || st.Quarantined[0].Generation != 2 {
			t.Fatalf("stats: quarantined %+v (%v), want generation 2", st.Quarantined, err)
		}
		// The epoch was acknowledged: its replay is recognised, not landed again.
		if held, _ := s.EpochCommitted("q", 2); !held {
			t.Fatalf("replay of the quarantined epoch: held %v", held)
		}

		// Restart: the quarantine stays, the next fold folds only the new generation.
		s.Close()
		s2 := openShard(t, tbl, testShardID, nil)
		put(t, s2, "q", 4, 30, 10, "d")
		flush(t, s2)
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("fold after restart: %d, %v; want the new generation only", n, err)
		}
		m2 := latestShardManifest(t, tbl, testShardID)
		if len(m2.Quarantined) != 1 || m2.Quarantined[0].QuarantinedAtNanos != q.QuarantinedAtNanos {
			t.Fatalf("quarantine after restart %+v, want the first record unchanged", m2.Quarantined)
		}
		want = expectRows(0, 10, "a", 20, 10, "c", 30, 10, "d")
		checkRows(t, "merged read after restart", readMerged(t, tbl, s2), want)
		if n := countKeys(t, store, genPrefix); n != 1 {
			t.Fatalf("%d files of the quarantined generation left after the next fold, want 1", n)
		}
	})
}

// A storage failure while a fold reads a generation is not the data's: the fold fails, quarantines
// nothing, and succeeds once the store answers.
func TestFoldStorageErrorIsRetriedNotQuarantined(t *testing.T) {
	forEachStore(t, func(t *testing.T, real objstore.Store) {
		ctx := context.Background()
		store := &faultStore{Store: real}
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 10, "a")
		flush(t, s)
		genPrefix := newShardPaths(tbl.Name(), testShardID).genPrefix()
		store.set(func(f *faultStore) { f.failGet = func(key string) bool { return strings.HasPrefix(key, genPrefix) } })
		if _, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); !errors.Is(err, errInjected) {
			t.Fatalf("fold with failing reads: %v, want the injected error", err)
		}
		if m := latestShardManifest(t, tbl, testShardID); len(m.Quarantined) != 0 || len(m.FlushedGenerations) != 1 {
			t.Fatalf("after a storage failure: flushed %v, quarantined %v", generationNumbers(m), quarantinedNumbers(m))
		}
		store.set(func(f *faultStore) { f.failGet = nil })
		if n, err := NewFolder(tbl, nil).FoldShard(ctx, testShardID); err != nil || n != 1 {
			t.Fatalf("fold once the store answers: %d, %v", n, err)
		}
		checkRows(t, "base", baseRows(t, tbl), expectRows(0, 10, "a"))
	})
}

// A fold that stops after it recorded a quarantine and before any commit raised the watermark
// past it (a crash between the two): the next fold raises the watermark past the quarantined
// generation without appending anything of it and keeps its files.
func TestFoldAfterQuarantineBeforeWatermark(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createTable(t, store, nil)
		s := openShard(t, tbl, testShardID, nil)
		put(t, s, "q", 1, 0, 10, "a")
		flush(t, s)
		replaceGeneration(t, tbl, testShardID, 1)
		c := NewFolder(tbl, nil)
		ms := NewManifestStore(store, tbl.Name(), testShardID, nil)
		fg, _ := latestShardManifest(t, tbl, testShardID).Generation(1)
		if err := c.quarantine(ctx, testShardID, ms, fg, errors.New("refused")); err != nil {
			t.Fatal(err)
		}
		// The crash: the watermark is still 0. Reads from storage skip the quarantined generation
		// already (a writer reads through the manifest it last committed until the watermark
		// passes the generation, and fails rather than read part of it).
		checkRows(t, "stored read before the next fold", readMerged(t, tbl, NewStoredShard(tbl, testShardID, nil)), nil)
		if n, err := c.FoldShard(ctx, testShardID); err != nil || n != 0 {
			t.Fatalf("next fold: %d, %v; want nothing drained", n, err)
		}
		base, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if base.MemWALMerged[testShardID] != 1 || len(base.Fragments) != 0 {
			t.Fatalf("after the next fold: watermark %d, %d fragments; want 1 and none", base.MemWALMerged[testShardID], len(base.Fragments))
		}
		if n := countKeys(t, store, newShardPaths(tbl.Name(), testShardID).root+makeGenDir(1)); n != 1 {
			t.Fatalf("%d files of the quarantined generation, want 1", n)
		}
		if m := latestShardManifest(t, tbl, testShardID); len(m.Quarantined) != 1 {
			t.Fatalf("quarantined %v, want [1]", quarantinedNumbers(m))
		}
		checkRows(t, "writer's read after the next fold", readMerged(t, tbl, s), nil)
	})
}

// A shard whose generations 2 to 19 all hold data the fold refuses (more than the fold ceiling of
// 16 in a row) keeps acknowledging puts: each put that finds the ceiling reached folds the shard,
// which quarantines the refused generations and folds the others, so the unfolded backlog stays
// within the ceiling plus the put in flight, and every other epoch reads back once.
func TestShardSetTakesPutsPastTheCeilingWithRefusedGenerations(t *testing.T) {
	forEachStore(t, func(t *testing.T, real objstore.Store) {
		ctx := context.Background()
		store := &faultStore{Store: real}
		bad := typetest.StringIDStream(t)
		store.set(func(f *faultStore) {
			f.rewritePut = func(key string, body []byte) []byte {
				if g, ok := generationOfKey(key); ok && g >= 2 && g <= 19 {
					return bad
				}
				return body
			}
		})
		tbl := createTable(t, store, nil)
		const ceiling, epochs = 16, 40
		o := testOptions()
		o.MaxUnfoldedGenerations = ceiling
		ss := NewShardSet(tbl, []string{testShardID}, &ShardSetOptions{Shard: *o, FoldGenerations: -1})
		t.Cleanup(ss.Close)
		held := func(*Shard) (bool, error) { return false, nil }
		var want []any
		for e := int64(1); e <= epochs; e++ {
			rec := makeRows(e*10, 2, "v", e)
			m, err := tbl.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done, err := ss.Put(ctx, 0, m, &epochid.ID{QueryID: "q", EpochID: e}, []arrow.RecordBatch{rec}, held)
			rec.Release()
			if err != nil || done {
				t.Fatalf("put epoch %d: %v %v", e, done, err)
			}
			if err := ss.Flush(ctx); err != nil { // generation e
				t.Fatalf("flush epoch %d: %v", e, err)
			}
			if e < 2 || e > 19 {
				want = append(want, int(e*10), 2, "v")
			}
			sm := latestShardManifest(t, tbl, testShardID)
			if base, err := tbl.Latest(ctx); err != nil {
				t.Fatal(err)
			} else if n := sm.NextGeneration - 1 - base.MemWALMerged[testShardID]; n > ceiling+1 {
				t.Fatalf("after epoch %d: %d generations above the merged watermark, the ceiling allows %d (+1 in flight)", e, n, ceiling)
			}
		}
		if _, err := ss.FoldShard(ctx, 0, 1); err != nil {
			t.Fatal(err)
		}
		sm := latestShardManifest(t, tbl, testShardID)
		if got := quarantinedNumbers(sm); len(got) != 18 || got[0] != 2 || got[17] != 19 {
			t.Fatalf("quarantined %v, want generations 2 to 19", got)
		}
		checkRows(t, "base", baseRows(t, tbl), expectRows(want...))
		checkRows(t, "merged read", readSet(t, ss), expectRows(want...))
	})
}
