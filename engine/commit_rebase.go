package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// rowRebase carries a row-level transaction (Delete, Update, Upsert, Rewrite) across the
// versions that were committed after the version it read, one version at a time, oldest first.
// checkConflict has already judged each pair by operation; rowRebase looks at the rows:
//
//   - through a Rewrite, the rows ours deletes move to their new addresses (its ChangeOfAddress);
//   - across a Delete/Update/Upsert, rows ours deletes that theirs deleted first are found, and
//     what that means depends on the pair (docs/conflicts.md): harmless for a Delete after a
//     Delete, a lost update for an Update, last-writer-wins for an Upsert;
//   - an Upsert also searches every fragment added since it read the table for the keys it
//     writes, so a key inserted or replaced concurrently is replaced again instead of duplicated;
//   - a Rewrite (ours) refuses another Rewrite of the same fragments, and when it lands carries
//     the deletions made since it read its fragments into its new fragments.
//
// A rowRebase lives for one Commit call; it is not safe for concurrent use.
type rowRebase struct {
	t   *Table
	txn *Transaction

	// Delete/Update/Upsert state, in the address space of prev.
	prev *Manifest   // newest version processed (the read version to begin with)
	rows *rowset.Set // rows to delete
	gone *rowset.Set // rows of rows that a version after the read version deleted already
	// keyScanFrom: fragments with an id at or above it have not been searched for an Upsert's
	// keys yet (ids are never reused, so this is "fragments created since").
	keyScanFrom uint64

	dels map[string]*roaring.Bitmap // deletion files read so far, by path
}

// newRowRebase returns the rebase state of txn, or nil for operations that need none.
// REQUIRES: txn.ReadVersion is set.
func (t *Table) newRowRebase(ctx context.Context, txn *Transaction) (*rowRebase, error) {
	rb := &rowRebase{t: t, txn: txn, dels: make(map[string]*roaring.Bitmap)}
	switch txn.Operation {
	case OpRewrite:
		if txn.Rewrite == nil {
			return nil, fmt.Errorf("table %s: Rewrite transaction without a change-of-address mapping", t.name)
		}
		return rb, nil
	case OpDelete, OpUpdate, OpUpsert:
	default:
		return nil, nil
	}
	read := txn.base
	if read == nil || read.Version != txn.ReadVersion {
		var err error
		if read, err = t.Manifest(ctx, txn.ReadVersion); err != nil {
			if errors.Is(err, ErrVersionNotFound) {
				return nil, fmt.Errorf("table %s: %s read version %d, which cleanup has removed; prepare it again: %w", t.name, txn.Operation, txn.ReadVersion, ErrCommitConflict)
			}
			return nil, err
		}
	}
	rb.prev, rb.rows, rb.gone, rb.keyScanFrom = read, txn.Deleted.Clone(), &rowset.Set{}, read.NextFragmentID
	return rb, nil
}

func (rb *rowRebase) conflict(h HistoryEntry, format string, args ...any) error {
	return &ConflictError{Table: rb.t.name, Operation: rb.txn.Operation, ReadVersion: rb.txn.ReadVersion,
		TheirOp: h.Operation, TheirVersion: h.Version, Reason: fmt.Sprintf(format, args...)}
}

// advance carries the transaction over version h, which checkConflict has let pass.
func (rb *rowRebase) advance(ctx context.Context, h HistoryEntry) error {
	rowOp := rb.txn.Operation != OpRewrite
	switch h.Operation {
	case OpRewrite:
	case OpDelete, OpUpdate, OpUpsert:
		if !rowOp {
			return nil // a Rewrite carries deletions when it lands (carryDeletions)
		}
	default:
		// Appends move no row and change no deletion file: prev may stay behind them.
		return nil
	}
	cur, err := rb.t.Manifest(ctx, h.Version)
	if err != nil {
		return rb.versionErr(h, err)
	}
	if h.Operation == OpRewrite {
		theirs, err := rb.t.ReadTransaction(ctx, cur)
		if err != nil {
			return err
		}
		if theirs.Rewrite == nil {
			return fmt.Errorf("table %s: Rewrite at version %d has no change-of-address mapping", rb.t.name, h.Version)
		}
		if !rowOp {
			ours := make(map[uint64]bool)
			for _, id := range rb.txn.Rewrite.OldFragmentIDs() {
				ours[id] = true
			}
			for _, id := range theirs.Rewrite.OldFragmentIDs() {
				if ours[id] {
					return rb.conflict(h, "both rewrote fragment %d; compact again from the new version", id)
				}
			}
			return nil
		}
		am, err := resolveCommitted(theirs, cur)
		if err != nil {
			return fmt.Errorf("table %s: Rewrite at version %d: %w", rb.t.name, h.Version, err)
		}
		rows, lost := am.mapRows(rb.rows)
		gone, _ := am.mapRows(rb.gone)
		// A row the Rewrite did not keep was deleted before it read the table; if we had not
		// seen that deletion yet, it happened in a version we never looked at.
		for _, f := range lost.Fragments() {
			unseen := lost.Offsets(f).Clone()
			if g := rb.gone.Offsets(f); g != nil {
				unseen.AndNot(g)
			}
			if !unseen.IsEmpty() && rb.txn.Operation == OpUpdate {
				return rb.conflict(h, "%d rows this update rewrites were deleted before the compaction", unseen.GetCardinality())
			}
		}
		rb.rows, rb.gone, rb.prev = rows, gone, cur
		return nil
	}
	newly, vanished, err := rb.newlyDeleted(ctx, cur, h.Operation)
	if err != nil {
		return err
	}
	// A fragment a Delete dropped whole: its rows are gone (newly), and nothing of this
	// transaction can land in it.
	defer func() {
		for _, id := range vanished {
			rb.rows.Remove(id)
			rb.gone.Remove(id)
		}
	}()
	if n := newly.Len(); n > 0 {
		switch {
		case rb.txn.Operation == OpUpdate:
			return rb.conflict(h, "%d rows this update rewrites were deleted or changed by it; an update would overwrite that change, retry against the new version", n)
		case rb.txn.Operation == OpDelete && h.Operation != OpDelete:
			return rb.conflict(h, "%d rows this delete matched were replaced by it with new values the delete never saw, retry against the new version", n)
		}
		// Delete after Delete: the rows are gone either way. Upsert: last writer wins, and the
		// key search at landing time finds the values theirs wrote.
	}
	rb.gone.Union(newly)
	rb.prev = cur
	return nil
}

func (rb *rowRebase) versionErr(h HistoryEntry, err error) error {
	if errors.Is(err, ErrVersionNotFound) {
		return fmt.Errorf("table %s: version %d was removed while committing; cannot rebase over it: %w", rb.t.name, h.Version, ErrCommitConflict)
	}
	return err
}

// newlyDeleted returns the rows of rb.rows that version cur (committed by operation op) deletes
// and rb.prev did not, and the fragments of rb.rows cur lacks: a Delete drops a fragment it
// leaves without a live row (dropFullyDeleted), every row of it is then newly deleted.
func (rb *rowRebase) newlyDeleted(ctx context.Context, cur *Manifest, op Operation) (*rowset.Set, []uint64, error) {
	out := &rowset.Set{}
	var vanished []uint64
	curFrags, prevFrags := fragmentsByID(cur), fragmentsByID(rb.prev)
	for _, id := range rb.rows.Fragments() {
		cf, ok := curFrags[id]
		if !ok && op == OpDelete {
			x := rb.rows.Offsets(id).Clone()
			if g := rb.gone.Offsets(id); g != nil {
				x.AndNot(g)
			}
			out.AddBitmap(id, x)
			vanished = append(vanished, id)
			continue
		}
		if !ok {
			return nil, nil, fmt.Errorf("table %s: fragment %d vanished at version %d without a Rewrite or Overwrite: %w", rb.t.name, id, cur.Version, ErrCommitConflict)
		}
		if cf.DeletionFile == "" || cf.DeletionFile == prevFrags[id].DeletionFile {
			continue
		}
		bm, err := rb.deletions(ctx, cf)
		if err != nil {
			return nil, nil, err
		}
		x := roaring.And(bm, rb.rows.Offsets(id))
		if g := rb.gone.Offsets(id); g != nil {
			x.AndNot(g)
		}
		out.AddBitmap(id, x)
	}
	return out, vanished, nil
}

func (rb *rowRebase) deletions(ctx context.Context, f Fragment) (*roaring.Bitmap, error) {
	if bm, ok := rb.dels[f.DeletionFile]; ok {
		return bm, nil
	}
	bm, err := rb.t.readDeletions(ctx, f)
	if err != nil {
		return nil, err
	}
	rb.dels[f.DeletionFile] = bm
	return bm, nil
}

// finish completes next (built by apply on top of base) with what the rows require: new
// deletion files for the rows a Delete/Update/Upsert removes, or the deletions a Rewrite carries
// into its new fragments. It returns the files it wrote, which nothing references unless next
// is committed.
func (rb *rowRebase) finish(ctx context.Context, base, next *Manifest) ([]string, error) {
	if rb.txn.Operation == OpRewrite {
		return rb.carryDeletions(ctx, base, next)
	}
	if rb.txn.Operation == OpUpsert {
		if err := rb.searchKeys(ctx, base); err != nil {
			return nil, err
		}
	}
	if rb.txn.Operation == OpDelete && len(next.PartitionSpec) > 0 {
		if err := rb.dropFullyDeleted(ctx, next); err != nil {
			return nil, err
		}
	}
	written, err := rb.t.mergeDeletions(ctx, next, rb.rows)
	if err != nil {
		rb.t.deleteFiles(ctx, written)
		return nil, err
	}
	return written, nil
}

// dropFullyDeleted removes from next, a version of a partitioned table, the fragments the Delete
// leaves without a live row, and their rows from rb.rows: a delete of whole partitions changes
// the manifest only, it writes no deletion file.
func (rb *rowRebase) dropFullyDeleted(ctx context.Context, next *Manifest) error {
	drop := make(map[uint64]bool)
	byID := fragmentsByID(next)
	for _, id := range rb.rows.Fragments() {
		f, ok := byID[id]
		if !ok {
			continue // mergeDeletions reports it
		}
		offs := rb.rows.Offsets(id)
		if int64(offs.GetCardinality())+f.DeletedRows < f.PhysicalRows {
			continue
		}
		dels, err := rb.t.readDeletions(ctx, f)
		if err != nil {
			return err
		}
		if int64(roaring.Or(dels, offs).GetCardinality()) >= f.PhysicalRows {
			drop[id] = true
		}
	}
	if len(drop) == 0 {
		return nil
	}
	kept := next.Fragments[:0:0]
	for _, f := range next.Fragments {
		if drop[f.ID] {
			rb.rows.Remove(f.ID)
			continue
		}
		kept = append(kept, f)
	}
	next.Fragments = kept
	return nil
}

// searchKeys adds to rb.rows every live row of base's fragments created since the last search
// whose primary key the Upsert writes.
func (rb *rowRebase) searchKeys(ctx context.Context, base *Manifest) error {
	var frags []Fragment
	for _, f := range base.Fragments {
		if f.ID >= rb.keyScanFrom {
			frags = append(frags, f)
		}
	}
	if len(frags) == 0 {
		return nil
	}
	keys, err := rb.t.upsertKeys(ctx, rb.txn, base)
	if err != nil {
		return err
	}
	found, err := rb.t.findKeys(ctx, base, frags, keys)
	if err != nil {
		return err
	}
	rb.rows.Union(found)
	rb.keyScanFrom = base.NextFragmentID
	return nil
}

// carryDeletions maps the rows deleted from the Rewrite's old fragments since it read them into
// its new fragments of next and writes their deletion files (a Rewrite that lands after a
// Delete/Update keeps those deletions: docs/conflicts.md, carry).
func (rb *rowRebase) carryDeletions(ctx context.Context, base, next *Manifest) ([]string, error) {
	am, err := resolveCommitted(rb.txn, next)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", rb.t.name, err)
	}
	byID := fragmentsByID(base)
	moved := &rowset.Set{}
	for _, g := range rb.txn.Rewrite.Groups {
		for _, o := range g.Old {
			bf, ok := byID[o.ID]
			if !ok {
				return nil, fmt.Errorf("table %s: fragment %d that this Rewrite replaces is gone: %w", rb.t.name, o.ID, ErrCommitConflict)
			}
			kept := am.old[o.ID].kept
			if bf.LiveRows() == int64(kept.GetCardinality()) {
				continue // deletions only grow: same count, same rows
			}
			bm, err := rb.deletions(ctx, bf)
			if err != nil {
				return nil, err
			}
			am.mapOffsets(o.ID, roaring.And(bm, kept), moved)
		}
	}
	written, err := rb.t.mergeDeletions(ctx, next, moved)
	if err != nil {
		rb.t.deleteFiles(ctx, written)
		return nil, err
	}
	return written, nil
}

// resolveCommitted resolves a Rewrite's mapping against manifest m, which holds its new
// fragments (found by their data files) with the ids they were committed under.
func resolveCommitted(txn *Transaction, m *Manifest) (*addressMap, error) {
	byPath := make(map[string]uint64, len(m.Fragments))
	for _, f := range m.Fragments {
		if len(f.Files) > 0 {
			byPath[f.Files[0].Path] = f.ID
		}
	}
	newFrags := make([]Fragment, len(txn.Fragments))
	for i, f := range txn.Fragments {
		if len(f.Files) == 0 {
			return nil, fmt.Errorf("rewrite fragment %d has no data file", i)
		}
		id, ok := byPath[f.Files[0].Path]
		if !ok {
			return nil, fmt.Errorf("version %d does not hold the rewritten data file %s", m.Version, f.Files[0].Path)
		}
		f.ID = id
		newFrags[i] = f
	}
	return txn.Rewrite.resolve(newFrags)
}
