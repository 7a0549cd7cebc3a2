package engine

import (
	"errors"
	"maps"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

// hHandles returns the handle a second actor uses: the same *Table, or a separate one (as a
// separate process would have).
func hHandles(t testing.TB, tbl *Table, shared bool) *Table {
	if shared {
		return tbl
	}
	return hOpen(t, tbl.Store(), tbl.Name(), &tbl.opts)
}

func hSessions(t *testing.T, fn func(t *testing.T, store objstore.Store, shared bool)) {
	for _, mode := range []struct {
		name   string
		shared bool
	}{{"shared-handle", true}, {"separate-handles", false}} {
		t.Run(mode.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) { fn(t, store, mode.shared) })
		})
	}
}

// TestUpsertRebasesOverCompaction follows Lance's automatic resolution of a compaction then an
// update or delete: an upsert is prepared (uncommitted), a compaction commits and moves every row,
// and then the upsert commits: it maps the rows it replaces through the compaction's change-of-
// address mapping instead of failing. Expected updates happen and no extra rows appear. Run with
// the upsert and the compaction on one shared handle and on separate handles.
func TestUpsertRebasesOverCompaction(t *testing.T) {
	hSessions(t, func(t *testing.T, store objstore.Store, shared bool) {
		ctx := t.Context()
		tbl := hCreate(t, store, "seed4", true, &Options{TargetRowsPerFragment: 1000})
		want := map[int64]string{}
		for i := range int64(10) {
			hAppend(t, tbl, hRange(i*20, 20), "a")
			maps.Copy(want, hWant(hRange(i*20, 20), "a"))
		}
		// Some deleted rows, so the compaction also drops rows (they have no new address).
		if _, err := tbl.Delete(ctx, expr.In("id", 3, 4, 77, 151), nil); err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{3, 4, 77, 151} {
			delete(want, id)
		}

		upserter, compactor := tbl, hHandles(t, tbl, shared)
		rec := hBatch([]int64{5, 50, 150, 199, 300, 301}, "u") // 4 replace, 2 insert
		defer rec.Release()
		txn, err := upserter.PrepareUpsert(ctx, nil, []arrow.RecordBatch{rec})
		if err != nil {
			t.Fatal(err)
		}
		readVersion := txn.ReadVersion
		if txn.Deleted.Len() != 4 {
			t.Fatalf("prepared upsert replaces %d rows, want 4", txn.Deleted.Len())
		}

		rep, err := compactor.Compact(ctx, CompactOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Version != readVersion+1 || rep.FragmentsRemoved != 10 || rep.FragmentsAdded != 1 {
			t.Fatalf("compaction %+v, want 10 fragments into 1 at version %d", rep, readVersion+1)
		}

		m, err := upserter.Commit(ctx, txn)
		if err != nil {
			t.Fatalf("upsert after compaction: %v", err)
		}
		if m.Version != readVersion+2 || m.Transaction.Operation != OpUpsert || m.Transaction.ReadVersion != readVersion {
			t.Fatalf("upsert committed %s at version %d reading %d", m.Transaction.Operation, m.Version, m.Transaction.ReadVersion)
		}
		maps.Copy(want, hWant([]int64{5, 50, 150, 199, 300, 301}, "u"))
		hRequireRows(t, "after the rebased upsert", hRead(t, compactor, 0), want)
		if m.Rows() != int64(len(want)) {
			t.Fatalf("manifest counts %d rows, want %d", m.Rows(), len(want))
		}
		// The deletions landed on the compacted fragment, the one the rows moved to.
		var compacted Fragment
		for _, f := range m.Fragments {
			if f.PhysicalRows == 196 {
				compacted = f
			}
		}
		if compacted.DeletedRows != 4 {
			t.Fatalf("compacted fragment %+v, want 4 deleted rows", compacted)
		}
		if frag, v, ok := parseDeletionKey(compacted.DeletionFile); !ok || frag != compacted.ID || v != m.Version {
			t.Fatalf("deletion file %q", compacted.DeletionFile)
		}
	})
}

// TestRewriteCarriesDeletions is the mirror: a compaction prepared against an old version
// commits after a Delete and an Update landed; it carries their deletions into its new
// fragments.
func TestRewriteCarriesDeletions(t *testing.T) {
	hSessions(t, func(t *testing.T, store objstore.Store, shared bool) {
		ctx := t.Context()
		tbl := hCreate(t, store, "mirror", true, &Options{TargetRowsPerFragment: 1000})
		want := map[int64]string{}
		for i := range int64(8) {
			hAppend(t, tbl, hRange(i*25, 25), "a")
			maps.Copy(want, hWant(hRange(i*25, 25), "a"))
		}
		compactor, writer := tbl, hHandles(t, tbl, shared)
		txn, rep, err := compactor.PrepareCompaction(ctx, nil, CompactOptions{})
		if err != nil || txn == nil {
			t.Fatalf("prepare compaction: %v", err)
		}
		if _, err := writer.Delete(ctx, expr.And(expr.Ge("id", 10), expr.Lt("id", 20)), nil); err != nil {
			t.Fatal(err)
		}
		res, err := writer.Update(ctx, UpdateSpec{Where: expr.In("id", 30, 31, 199), Set: map[string]any{"val": "x"}}, nil)
		if err != nil || res.RowsUpdated != 3 {
			t.Fatalf("update: %+v %v", res, err)
		}
		hAppend(t, writer, hRange(1000, 5), "n") // an append in between is compatible too
		for id := int64(10); id < 20; id++ {
			delete(want, id)
		}
		maps.Copy(want, hWant([]int64{30, 31, 199}, "x"))
		maps.Copy(want, hWant(hRange(1000, 5), "n"))

		m, err := compactor.Commit(ctx, txn)
		if err != nil {
			t.Fatalf("rewrite after delete and update: %v", err)
		}
		if m.Version != rep.ReadVersion+4 {
			t.Fatalf("rewrite landed at version %d, read %d", m.Version, rep.ReadVersion)
		}
		hRequireRows(t, "after the late rewrite", hRead(t, writer, 0), want)
		// The compacted fragment carries 13 deletions (10 deleted, 3 updated away).
		var carried int64
		for _, f := range m.Fragments {
			if f.PhysicalRows == 200 {
				carried = f.DeletedRows
			}
		}
		if carried != 13 {
			t.Fatalf("compacted fragment carries %d deletions, want 13", carried)
		}
		// A second compaction materializes them (13 of 200 > 10%) and merges the rest.
		if _, err := writer.Compact(ctx, CompactOptions{}); err != nil {
			t.Fatal(err)
		}
		hRequireRows(t, "after recompaction", hRead(t, tbl, 0), want)
	})
}

// TestRowConflictMatrix checks the row-level pairs of the matrix in docs/conflicts.md.
func TestRowConflictMatrix(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		var n int
		fresh := func() (*Table, map[int64]string) {
			n++
			tbl := hCreate(t, store, "m"+string(rune('a'+n)), true, &Options{TargetRowsPerFragment: 50})
			hAppend(t, tbl, hRange(0, 100), "a")
			return tbl, hWant(hRange(0, 100), "a")
		}
		requireConflict := func(err error, ours, theirs Operation) {
			t.Helper()
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCommitConflict) || !CommitDefinitelyFailed(err) {
				t.Fatalf("%s after %s: got %v, want a *ConflictError", ours, theirs, err)
			}
			if ce.Operation != ours || ce.TheirOp != theirs || ce.TheirVersion == 0 || ce.ReadVersion == 0 {
				t.Fatalf("conflict error %+v does not name both sides", ce)
			}
		}
		update := func(tbl *Table, where *expr.Predicate, val string) *Transaction {
			t.Helper()
			txn, err := tbl.PrepareUpdate(ctx, nil, UpdateSpec{Where: where, Set: map[string]any{"val": val}})
			if err != nil {
				t.Fatal(err)
			}
			return txn
		}
		del := func(tbl *Table, where *expr.Predicate) *Transaction {
			t.Helper()
			txn, err := tbl.PrepareDelete(ctx, nil, where)
			if err != nil {
				t.Fatal(err)
			}
			return txn
		}
		commit := func(tbl *Table, txn *Transaction) {
			t.Helper()
			if _, err := tbl.Commit(ctx, txn); err != nil {
				t.Fatalf("commit %s: %v", txn.Operation, err)
			}
		}

		t.Run("delete after overlapping delete", func(t *testing.T) {
			tbl, want := fresh()
			a, b := del(tbl, expr.Lt("id", 10)), del(tbl, expr.And(expr.Ge("id", 5), expr.Lt("id", 15)))
			commit(tbl, a)
			commit(tbl, b)
			for id := int64(0); id < 15; id++ {
				delete(want, id)
			}
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
			if got := hLatest(t, tbl).Rows(); got != 85 {
				t.Fatalf("manifest counts %d rows, want 85", got)
			}
		})
		t.Run("update after overlapping update", func(t *testing.T) {
			tbl, want := fresh()
			a, b := update(tbl, expr.Lt("id", 10), "x"), update(tbl, expr.Eq("id", 9), "y")
			commit(tbl, a)
			_, err := tbl.Commit(ctx, b)
			requireConflict(err, OpUpdate, OpUpdate)
			tbl.Discard(ctx, b)
			maps.Copy(want, hWant(hRange(0, 10), "x"))
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("update after disjoint update", func(t *testing.T) {
			tbl, want := fresh()
			a, b := update(tbl, expr.Lt("id", 10), "x"), update(tbl, expr.Eq("id", 60), "y")
			commit(tbl, a)
			commit(tbl, b)
			maps.Copy(want, hWant(hRange(0, 10), "x"))
			want[60] = "y"
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("update after overlapping delete", func(t *testing.T) {
			tbl, _ := fresh()
			a, b := del(tbl, expr.Eq("id", 3)), update(tbl, expr.Lt("id", 10), "x")
			commit(tbl, a)
			_, err := tbl.Commit(ctx, b)
			requireConflict(err, OpUpdate, OpDelete)
		})
		t.Run("delete after overlapping update", func(t *testing.T) {
			tbl, _ := fresh()
			a, b := update(tbl, expr.Lt("id", 10), "x"), del(tbl, expr.Eq("id", 3))
			commit(tbl, a)
			_, err := tbl.Commit(ctx, b)
			requireConflict(err, OpDelete, OpUpdate)
		})
		t.Run("delete after overwrite", func(t *testing.T) {
			tbl, _ := fresh()
			b := del(tbl, expr.Eq("id", 3))
			rec := hBatch(hRange(500, 3), "o")
			defer rec.Release()
			if _, err := tbl.Overwrite(ctx, hSchema, []arrow.RecordBatch{rec}, nil); err != nil {
				t.Fatal(err)
			}
			_, err := tbl.Commit(ctx, b)
			requireConflict(err, OpDelete, OpOverwrite)
		})
		t.Run("rewrite after overwrite", func(t *testing.T) {
			tbl, _ := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			txn, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{})
			if err != nil || txn == nil {
				t.Fatalf("prepare: %v", err)
			}
			if _, err := tbl.Overwrite(ctx, hSchema, nil, nil); err != nil {
				t.Fatal(err)
			}
			_, err = tbl.Commit(ctx, txn)
			requireConflict(err, OpRewrite, OpOverwrite)
		})
		t.Run("rewrite after overlapping rewrite", func(t *testing.T) {
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			maps.Copy(want, hWant(hRange(100, 10), "a"))
			a, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{})
			if err != nil || a == nil {
				t.Fatalf("prepare a: %v", err)
			}
			b, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{})
			if err != nil || b == nil {
				t.Fatalf("prepare b: %v", err)
			}
			commit(tbl, a)
			_, err = tbl.Commit(ctx, b)
			requireConflict(err, OpRewrite, OpRewrite)
			tbl.Discard(ctx, b)
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("compact plans again after an overlapping rewrite", func(t *testing.T) {
			// The user's Compact loses the race to another compaction (the background
			// maintainer, say) of the same fragments: it must plan again from the new version
			// and succeed, not report a conflict.
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			hAppend(t, tbl, hRange(110, 5), "a")
			maps.Copy(want, hWant(hRange(100, 15), "a"))
			raced := false
			rep, err := tbl.Compact(ctx, CompactOptions{Progress: func(CompactProgress) {
				if raced {
					return
				}
				raced = true
				other, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{TargetRowsPerFragment: 10})
				if err != nil || other == nil {
					t.Errorf("prepare the competing compaction: %v", err)
					return
				}
				commit(tbl, other)
			}})
			if err != nil || rep.Version == 0 {
				t.Fatalf("compact after losing a race: %+v, %v", rep, err)
			}
			if !raced {
				t.Fatal("the competing compaction never ran")
			}
			if hLatest(t, tbl).Version != rep.Version {
				t.Fatalf("compact committed version %d, latest is %d", rep.Version, hLatest(t, tbl).Version)
			}
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("rewrite after disjoint rewrite", func(t *testing.T) {
			tbl, want := fresh() // fragments of 50 and 50: full, nothing to compact
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			m := hLatest(t, tbl)
			a, _, err := tbl.PrepareCompaction(ctx, m, CompactOptions{})
			if err != nil || a == nil {
				t.Fatalf("prepare a: %v", err)
			}
			// b only rewrites the first fragment, which a delete emptied past the threshold; a
			// merges the two small ones.
			if _, err := tbl.Delete(ctx, expr.Lt("id", 20), nil); err != nil {
				t.Fatal(err)
			}
			b, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{TargetRowsPerFragment: 5})
			if err != nil || b == nil || len(b.Rewrite.OldFragmentIDs()) != 1 {
				t.Fatalf("prepare b: %v", err)
			}
			commit(tbl, b)
			commit(tbl, a)
			for id := int64(0); id < 20; id++ {
				delete(want, id)
			}
			maps.Copy(want, hWant(hRange(100, 10), "a"))
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("append and rewrite both ways", func(t *testing.T) {
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			txn, _, err := tbl.PrepareCompaction(ctx, nil, CompactOptions{})
			if err != nil || txn == nil {
				t.Fatalf("prepare: %v", err)
			}
			hAppend(t, tbl, hRange(200, 5), "b") // append lands between prepare and commit
			commit(tbl, txn)
			frags := writeHFragments(t, tbl, hRange(300, 5))
			stale := hLatest(t, tbl).Version - 2 // an append that read before the rewrite
			commit(tbl, &Transaction{Operation: OpAppend, ReadVersion: stale, Fragments: frags})
			maps.Copy(want, hWant(hRange(100, 10), "a"))
			maps.Copy(want, hWant(hRange(200, 5), "b"))
			maps.Copy(want, hWant(hRange(300, 5), "c"))
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("delete through two rewrites", func(t *testing.T) {
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			d := del(tbl, expr.In("id", 1, 49, 102, 108))
			if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
				t.Fatal(err)
			}
			hAppend(t, tbl, hRange(110, 5), "a")
			if _, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 1000}); err != nil {
				t.Fatal(err)
			}
			if got := len(hLatest(t, tbl).Fragments); got != 1 {
				t.Fatalf("%d fragments after the second compaction", got)
			}
			commit(tbl, d)
			maps.Copy(want, hWant(hRange(100, 15), "a"))
			for _, id := range []int64{1, 49, 102, 108} {
				delete(want, id)
			}
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("delete after a delete and a rewrite of the same rows", func(t *testing.T) {
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			d := del(tbl, expr.In("id", 3, 101, 106))
			if _, err := tbl.Delete(ctx, expr.In("id", 101, 106), nil); err != nil {
				t.Fatal(err)
			}
			// This compaction read the table after the delete: rows 101 and 106 have no new address.
			if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
				t.Fatal(err)
			}
			commit(tbl, d)
			maps.Copy(want, hWant(hRange(100, 10), "a"))
			for _, id := range []int64{3, 101, 106} {
				delete(want, id)
			}
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("upsert after append of the same key", func(t *testing.T) {
			tbl, want := fresh()
			rec := hBatch([]int64{7, 500}, "u")
			defer rec.Release()
			txn, err := tbl.PrepareUpsert(ctx, nil, []arrow.RecordBatch{rec})
			if err != nil {
				t.Fatal(err)
			}
			hAppend(t, tbl, []int64{500}, "appended")                     // the key the upsert inserts
			hAppend(t, tbl, []int64{501}, "appended")                     // unrelated
			if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil { // and move it
				t.Fatal(err)
			}
			commit(tbl, txn)
			maps.Copy(want, hWant([]int64{7, 500}, "u"))
			want[501] = "appended"
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("upsert after upsert of the same key", func(t *testing.T) {
			tbl, want := fresh()
			r1, r2 := hBatch([]int64{7, 600}, "first"), hBatch([]int64{7, 600, 601}, "second")
			defer r1.Release()
			defer r2.Release()
			a, err := tbl.PrepareUpsert(ctx, nil, []arrow.RecordBatch{r1})
			if err != nil {
				t.Fatal(err)
			}
			b, err := tbl.PrepareUpsert(ctx, nil, []arrow.RecordBatch{r2})
			if err != nil {
				t.Fatal(err)
			}
			commit(tbl, a)
			commit(tbl, b) // last writer wins, no duplicates
			maps.Copy(want, hWant([]int64{7, 600, 601}, "second"))
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("upsert after update of the same row", func(t *testing.T) {
			tbl, want := fresh()
			rec := hBatch([]int64{8}, "u")
			defer rec.Release()
			up, err := tbl.PrepareUpsert(ctx, nil, []arrow.RecordBatch{rec})
			if err != nil {
				t.Fatal(err)
			}
			commit(tbl, update(tbl, expr.Lt("id", 10), "x"))
			commit(tbl, up)
			maps.Copy(want, hWant(hRange(0, 10), "x"))
			want[8] = "u"
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
		t.Run("update through a rewrite", func(t *testing.T) {
			tbl, want := fresh()
			hAppend(t, tbl, hRange(100, 5), "a")
			hAppend(t, tbl, hRange(105, 5), "a")
			u := update(tbl, expr.In("id", 0, 99, 101, 109), "x")
			if _, err := tbl.Compact(ctx, CompactOptions{TargetRowsPerFragment: 1000}); err != nil {
				t.Fatal(err)
			}
			commit(tbl, u)
			maps.Copy(want, hWant(hRange(100, 10), "a"))
			maps.Copy(want, hWant([]int64{0, 99, 101, 109}, "x"))
			hRequireRows(t, "rows", hRead(t, tbl, 0), want)
		})
	})
}

// writeHFragments writes ids (tagged "c") into data files without committing them.
func writeHFragments(t testing.TB, tbl *Table, ids []int64) []Fragment {
	t.Helper()
	rec := hBatch(ids, "c")
	defer rec.Release()
	w, err := tbl.NewWriter(t.Context(), hSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	frags, err := w.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return frags
}
