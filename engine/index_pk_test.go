package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
)

// pkModel is the expected content of a keyed hSchema table: id -> val.
type pkModel map[int64]string

func (m pkModel) set(ids []int64, val string) {
	for _, id := range ids {
		m[id] = val
	}
}

// pkUpsert upserts ids tagged val, checks the counts it reports against the model, and applies
// it to the model.
func pkUpsert(t testing.TB, tbl *Table, model pkModel, ids []int64, val string) WriteResult {
	t.Helper()
	rec := hBatch(ids, val)
	defer rec.Release()
	res, err := tbl.Upsert(t.Context(), []arrow.RecordBatch{rec}, nil)
	if err != nil {
		t.Fatalf("upsert %d rows tagged %s: %v", len(ids), val, err)
	}
	var updated int64
	for _, id := range ids {
		if _, ok := model[id]; ok {
			updated++
		}
	}
	if res.RowsUpdated != updated || res.RowsInserted != int64(len(ids))-updated {
		t.Fatalf("upsert %s: updated %d inserted %d, want %d and %d", val, res.RowsUpdated, res.RowsInserted, updated, int64(len(ids))-updated)
	}
	model.set(ids, val)
	return res
}

// pkCheck compares the table with the model, and the index lookup of every key (and some absent
// ones) with a full scan.
func pkCheck(t testing.TB, tbl *Table, model pkModel, what string) {
	t.Helper()
	hRequireRows(t, what, hRead(t, tbl, 0), model)
	m := hLatest(t, tbl)
	keys := make(map[string]struct{})
	for _, id := range append(slices.Collect(maps.Keys(model)), -1, -2, 1<<40) {
		keys[pkKey(t, id)] = struct{}{}
	}
	got, found, err := tbl.lookupKeys(t.Context(), m, keys)
	if err != nil {
		t.Fatalf("%s: lookup: %v", what, err)
	}
	want, err := tbl.findKeys(t.Context(), m, m.Fragments, keys)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Addresses(), want.Addresses()) || len(found) != len(model) {
		t.Fatalf("%s: index lookup found %d rows (%d keys), a scan %d rows (%d keys expected)", what, got.Len(), len(found), want.Len(), len(model))
	}
}

// pkKey encodes id as the index encodes an hSchema key.
func pkKey(t testing.TB, id int64) string {
	t.Helper()
	rec := hBatch([]int64{id}, "")
	defer rec.Release()
	enc, err := expr.NewKeyEncoder(rec, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := enc.Key(0)
	return k
}

// TestIndexUpsertAcrossCompactionAndOptimize runs upserts through the primary-key index while the
// table is appended to, compacted, deleted from, overwritten and its index optimized and merged,
// and checks after every step that the table holds exactly one row per key with the newest value
// and that index lookups agree with a full scan.
func TestIndexUpsertAcrossCompactionAndOptimize(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "pkidx", true, &Options{TargetRowsPerFragment: 50})
		model := pkModel{}
		hAppend(t, tbl, hRange(0, 200), "a") // 4 fragments
		model.set(hRange(0, 200), "a")
		m, err := tbl.CreateIndex(ctx, IndexSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ix := m.Index("pk")
		if ix == nil || len(ix.Segments) != 1 || ix.Segments[0].Entries != 200 || len(ix.UnindexedFragments(m)) != 0 {
			t.Fatalf("created index: %+v", ix)
		}
		pkCheck(t, tbl, model, "after create index")
		pkUpsert(t, tbl, model, hRange(150, 100), "b") // 50 replaced through the index, 50 new
		pkCheck(t, tbl, model, "upsert through the index")

		for i := range 5 {
			hAppend(t, tbl, hRange(300+int64(i)*10, 10), "c")
			model.set(hRange(300+int64(i)*10, 10), "c")
		}
		pkUpsert(t, tbl, model, append(hRange(100, 20), hRange(300, 6)...), "d") // indexed + unindexed
		pkCheck(t, tbl, model, "upsert over indexed and unindexed fragments")

		rep, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{})
		if err != nil || rep.Indices[0].Version == 0 || rep.Indices[0].UnindexedFragments != 0 || rep.Indices[0].SegmentsAfter != 2 {
			t.Fatalf("optimize (delta): %+v, %v", rep, err)
		}
		pkUpsert(t, tbl, model, hRange(240, 70), "e")
		pkCheck(t, tbl, model, "upsert after a delta")

		crep, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 1000})
		if err != nil || crep.Version == 0 {
			t.Fatalf("compact: %+v, %v", crep, err)
		}
		m = hLatest(t, tbl)
		if un := m.Index("pk").UnindexedFragments(m); len(un) == 0 {
			t.Fatal("rewritten fragments still read as indexed")
		}
		pkCheck(t, tbl, model, "after compaction")
		pkUpsert(t, tbl, model, hRange(0, 400), "f") // every key, old and new
		pkCheck(t, tbl, model, "upsert after compaction")

		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
			t.Fatal(err)
		}
		pkUpsert(t, tbl, model, hRange(390, 20), "g")
		pkCheck(t, tbl, model, "upsert after re-indexing the compacted fragments")

		if _, err := tbl.Delete(ctx, expr.Lt("id", 50), nil); err != nil {
			t.Fatal(err)
		}
		for id := range int64(50) {
			delete(model, id)
		}
		pkUpsert(t, tbl, model, hRange(40, 20), "h") // 10 deleted keys come back, 10 replaced
		pkCheck(t, tbl, model, "upsert after a delete")

		rep, err = tbl.OptimizeIndices(ctx, OptimizeIndexOptions{MergeAll: true})
		if err != nil {
			t.Fatal(err)
		}
		m = hLatest(t, tbl)
		ix = m.Index("pk")
		if len(ix.Segments) != 1 || ix.Segments[0].Entries != m.Rows() || len(ix.UnindexedFragments(m)) != 0 {
			t.Fatalf("after merging: %d segments, %d entries for %d rows: %+v", len(ix.Segments), ix.Segments[0].Entries, m.Rows(), rep)
		}
		pkUpsert(t, tbl, model, hRange(0, 500), "i")
		pkCheck(t, tbl, model, "upsert after merging")

		// An Overwrite replaces every fragment: the index survives, covering nothing.
		rec := hBatch(hRange(1000, 30), "o")
		_, err = tbl.Overwrite(ctx, hSchema, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		model = pkModel{}
		model.set(hRange(1000, 30), "o")
		m = hLatest(t, tbl)
		if ix := m.Index("pk"); ix == nil || len(ix.Segments) != 0 {
			t.Fatalf("index after overwrite: %+v", ix)
		}
		pkUpsert(t, tbl, model, hRange(1020, 20), "p")
		pkCheck(t, tbl, model, "upsert after overwrite")
		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
			t.Fatal(err)
		}
		pkUpsert(t, tbl, model, hRange(1000, 5), "q")
		pkCheck(t, tbl, model, "upsert after re-indexing the overwrite")
	})
}

// TestIndexUpsertRebasesOverCompactionAndOptimize prepares an upsert against an indexed version,
// lets a compaction and an index optimize land first, then commits it.
func TestIndexUpsertRebasesOverCompactionAndOptimize(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "rebase", true, &Options{TargetRowsPerFragment: 20})
		model := pkModel{}
		for i := range 6 {
			hAppend(t, tbl, hRange(int64(i)*20, 20), "a")
		}
		model.set(hRange(0, 120), "a")
		if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
			t.Fatal(err)
		}
		rec := hBatch(hRange(50, 100), "b")
		defer rec.Release()
		txn, err := tbl.PrepareUpsert(ctx, nil, []arrow.RecordBatch{rec})
		if err != nil {
			t.Fatal(err)
		}
		hAppend(t, tbl, hRange(140, 20), "c") // keys the upsert also writes, unindexed
		model.set(hRange(140, 20), "c")
		if rep, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 200}); err != nil || rep.Version == 0 {
			t.Fatalf("compact: %+v %v", rep, err)
		}
		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, txn); err != nil {
			t.Fatal(err)
		}
		model.set(hRange(50, 100), "b")
		pkCheck(t, tbl, model, "upsert rebased over compaction and optimize")
	})
}

// TestIndexLookupReadsNoCoveredData shows that a lookup answers covered fragments from the index
// alone: it still works with their data files gone.
func TestIndexLookupReadsNoCoveredData(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "noscan", true, nil)
		hAppend(t, tbl, hRange(0, 100), "a")
		m, err := tbl.CreateIndex(ctx, IndexSpec{})
		if err != nil {
			t.Fatal(err)
		}
		covered := m.Fragments[0]
		hAppend(t, tbl, hRange(100, 10), "b")
		if err := store.Delete(ctx, tbl.key(covered.Files[0].Path)); err != nil {
			t.Fatal(err)
		}
		m = hLatest(t, tbl)
		keys := map[string]struct{}{pkKey(t, 5): {}, pkKey(t, 105): {}, pkKey(t, 999): {}}
		rows, found, err := tbl.lookupKeys(ctx, m, keys)
		if err != nil {
			t.Fatalf("lookup with the covered data file gone: %v", err)
		}
		if rows.Len() != 2 || len(found) != 2 || !rows.Contains(rowset.Address(covered.ID, 5)) {
			t.Fatalf("lookup found %v (%d keys)", rows.Addresses(), len(found))
		}
	})
}

// TestIndexOptimizeSegments checks delta appends and the size-tiered merge.
func TestIndexOptimizeSegments(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "segs", true, nil)
		hAppend(t, tbl, hRange(0, 1000), "a")
		if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
			t.Fatal(err)
		}
		// Nothing to do: nothing committed.
		before := latestVersion(t, tbl)
		if rep, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil || rep.Indices[0].Version != 0 || latestVersion(t, tbl) != before {
			t.Fatalf("optimize of a current index: %+v %v", rep, err)
		}
		// Small deltas pile up to MaxSegments, then the small ones merge and the large base stays.
		for i := range 6 {
			hAppend(t, tbl, hRange(2000+int64(i)*10, 10), "d")
			rep, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{MaxSegments: 4})
			if err != nil {
				t.Fatal(err)
			}
			m := hLatest(t, tbl)
			segs := m.Index("pk").Segments
			if len(segs) > 4 {
				t.Fatalf("round %d: %d segments, limit 4 (%+v)", i, len(segs), rep)
			}
			if segs[0].Entries != 1000 {
				t.Fatalf("round %d: the large base segment was rewritten (%d entries)", i, segs[0].Entries)
			}
			var n int64
			for _, s := range segs {
				n += s.Entries
			}
			if n != m.Rows() {
				t.Fatalf("round %d: %d entries for %d rows", i, n, m.Rows())
			}
		}
		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{Names: []string{"nope"}}); err == nil {
			t.Fatal("optimize of an unknown index succeeded")
		}
	})
}

// TestIndexConcurrentChanges: two merges prepared against the same version cannot both land; a
// delta and a merge of other segments can.
func TestIndexConcurrentChanges(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "conc", true, nil)
		hAppend(t, tbl, hRange(0, 50), "a")
		if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
			t.Fatal(err)
		}
		hAppend(t, tbl, hRange(50, 50), "a")
		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
			t.Fatal(err)
		}
		m := hLatest(t, tbl)
		ix := m.Index("pk")
		merge := func() (*Manifest, error) {
			seg, err := tbl.mergePKSegments(ctx, m, ix, ix.Segments)
			if err != nil {
				t.Fatal(err)
			}
			ch := &IndexChange{Name: "pk", Added: []IndexSegment{seg}}
			for _, s := range ix.Segments {
				ch.Removed = append(ch.Removed, s.ID)
			}
			return tbl.commitIndexChange(ctx, m, OpOptimizeIndex, ch, nil)
		}
		if _, err := merge(); err != nil {
			t.Fatal(err)
		}
		if _, err := merge(); !errors.Is(err, ErrCommitConflict) {
			t.Fatalf("second merge of the same segments: %v, want ErrCommitConflict", err)
		}
		// The losing merge's segment file was removed.
		live := map[string]bool{}
		for _, p := range segmentFiles(hLatest(t, tbl).Index("pk").Segments) {
			live[p] = true
		}
		for _, k := range hKeys(t, tbl, indicesDir) {
			if !live[k] && !strings.Contains(k, ix.Segments[0].ID) && !strings.Contains(k, ix.Segments[1].ID) {
				t.Fatalf("index file %s of the failed merge is left behind", k)
			}
		}
		// CreateIndex of an existing name conflicts.
		if _, err := tbl.CreateIndex(ctx, IndexSpec{Name: "pk"}); !errors.Is(err, ErrCommitConflict) {
			t.Fatalf("second create: %v", err)
		}
		ch := &IndexChange{Name: "pk2", ID: "x", Kind: IndexPrimaryKey, Columns: []string{"id"}}
		if _, err := tbl.commitIndexChange(ctx, hLatest(t, tbl), OpCreateIndex, ch, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.commitIndexChange(ctx, m, OpCreateIndex, ch, nil); !errors.Is(err, ErrCommitConflict) {
			t.Fatalf("create racing a create of the same name: %v", err)
		}
	})
}

func TestIndexCreateErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		plain := hCreate(t, store, "plain", false, nil)
		if _, err := plain.CreateIndex(ctx, IndexSpec{}); err == nil || !strings.Contains(err.Error(), "primary key") {
			t.Fatalf("index on a table without a key: %v", err)
		}
		keyed := hCreate(t, store, "keyed", true, nil)
		if _, err := keyed.CreateIndex(ctx, IndexSpec{Columns: []string{"val"}}); err == nil {
			t.Fatal("index on a non-key column succeeded")
		}
		// An empty table gets an index with no segments that covers everything there is.
		m, err := keyed.CreateIndex(ctx, IndexSpec{Name: "by_id"})
		if err != nil || m.Index("by_id") == nil || len(m.Index("by_id").Segments) != 0 || m.Transaction.Properties[PropIndexName] != "by_id" {
			t.Fatalf("index on an empty table: %+v %v", m, err)
		}
	})
}

// TestIndexCleanupRemovesReplacedSegments: files of merged-away segments go with cleanup, the
// current ones stay.
func TestIndexCleanupRemovesReplacedSegments(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "gc", true, nil)
		model := pkModel{}
		for i := range 4 {
			hAppend(t, tbl, hRange(int64(i)*10, 10), "a")
			model.set(hRange(int64(i)*10, 10), "a")
			if i == 0 {
				if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{MergeAll: true}); err != nil {
			t.Fatal(err)
		}
		if n := len(hKeys(t, tbl, indicesDir)); n != 5 {
			t.Fatalf("%d index files before cleanup, want 5", n)
		}
		rep, err := tbl.Cleanup(ctx, CleanupPolicy{OlderThan: time.Second, Grace: time.Nanosecond, Now: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		keys := hKeys(t, tbl, indicesDir)
		want := segmentFiles(hLatest(t, tbl).Index("pk").Segments)
		if rep.IndexFilesRemoved != 4 || !slices.Equal(keys, want) {
			t.Fatalf("cleanup removed %d index files, left %v, want %v", rep.IndexFilesRemoved, keys, want)
		}
		resetIndexCache(tbl) // read the surviving segment from the store again
		pkUpsert(t, tbl, model, hRange(5, 30), "b")
		pkCheck(t, tbl, model, fmt.Sprintf("after cleanup (%v)", keys))
	})
}

// resetIndexCache empties tbl's index cache.
func resetIndexCache(tbl *Table) { tbl.opts.IndexCache.reset() }
