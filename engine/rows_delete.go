package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
)

// Deletions are soft: a deleted row stays in its data file and is masked by the fragment's
// deletion file, _deletions/<fragment>-<version>-<uuid>.bin, a roaring bitmap of deleted row
// offsets. Every change writes a new file holding the whole bitmap (the old one merged in), so a
// committed version's files never change and time travel keeps working. Compaction later drops
// deleted rows for good.

// WriteResult says what a Delete, Update or Upsert did.
type WriteResult struct {
	// Manifest is the version committed, or the version read when there was nothing to commit.
	Manifest *Manifest
	// Committed is false when the operation matched nothing and no version was created.
	Committed bool
	// RowsDeleted counts rows a Delete removed.
	RowsDeleted int64
	// RowsUpdated counts rows an Update rewrote, or rows an Upsert replaced (matched keys).
	RowsUpdated int64
	// RowsInserted counts rows an Upsert inserted (keys the table did not hold).
	RowsInserted int64
}

// readDeletions returns fragment f's deleted offsets (empty when it has no deletion file).
// Deletions returns fragment f's deleted row offsets (empty when it has no deletion file). The
// Iceberg publisher turns them into position deletes (iceberg).
func (t *Table) Deletions(ctx context.Context, f Fragment) (*roaring.Bitmap, error) {
	return t.readDeletions(ctx, f)
}

func (t *Table) readDeletions(ctx context.Context, f Fragment) (*roaring.Bitmap, error) {
	if f.DeletionFile == "" {
		return roaring.New(), nil
	}
	key := t.key(f.DeletionFile)
	b, err := t.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("table %s: read deletion file %s of fragment %d: %w", t.name, key, f.ID, err)
	}
	bm, err := rowset.DecodeBitmap(b)
	if err != nil {
		return nil, fmt.Errorf("table %s: corrupt deletion file %s of fragment %d: %w", t.name, key, f.ID, err)
	}
	return bm, nil
}

// writeDeletions writes bm as a new deletion file of fragment frag for version v and returns
// its table-relative key.
func (t *Table) writeDeletions(ctx context.Context, frag, v uint64, bm *roaring.Bitmap) (string, error) {
	b, err := rowset.EncodeBitmap(bm)
	if err != nil {
		return "", fmt.Errorf("table %s: encode deletions of fragment %d: %w", t.name, frag, err)
	}
	rel := makeDeletionKey(frag, v, uuid.NewString())
	if err := t.store.PutIfAbsent(ctx, t.key(rel), b); err != nil {
		return "", fmt.Errorf("table %s: write deletion file %s: %w", t.name, rel, err)
	}
	return rel, nil
}

// deleteFiles removes table-relative keys that are certainly unreferenced, best effort: what it
// cannot delete stays for cleanup.
func (t *Table) deleteFiles(ctx context.Context, rels []string) {
	for _, rel := range rels {
		if err := t.store.Delete(ctx, t.key(rel)); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.opts.Logger.Warn("could not delete unreferenced file", "table", t.name, "file", rel, "err", err)
		}
	}
}

// resolveBase returns base, or the latest version when base is nil.
func (t *Table) resolveBase(ctx context.Context, base *Manifest) (*Manifest, error) {
	if base != nil {
		return base, nil
	}
	return t.Latest(ctx)
}

// PrepareDelete finds the rows of version base (nil: the latest) for which where is true and
// returns an uncommitted Delete transaction for them. Commit it with Table.Commit; a commit that
// lands after other commits rebases onto them (docs/conflicts.md). The transaction writes no
// files until it commits, so an abandoned one needs no cleanup.
func (t *Table) PrepareDelete(ctx context.Context, base *Manifest, where *expr.Predicate) (*Transaction, error) {
	if where == nil {
		return nil, fmt.Errorf("table %s: delete needs a predicate (use Overwrite with no rows to truncate)", t.name)
	}
	m, err := t.resolveBase(ctx, base)
	if err != nil {
		return nil, err
	}
	if err := where.Validate(m.ArrowSchema()); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	// A partitioned table's partitions decide what they can before any row is read
	// (rows_delete_partition.go).
	rows, scan, err := t.partitionDeletes(ctx, m, where)
	if err != nil {
		return nil, err
	}
	if scan == nil || len(scan) > 0 {
		matched, err := t.matchRows(ctx, m, where, scan)
		if err != nil {
			return nil, err
		}
		rows.Union(matched)
	}
	return &Transaction{Operation: OpDelete, ReadVersion: m.Version, Deleted: rows, base: m}, nil
}

// PrepareDeleteRows returns an uncommitted Delete of the given row addresses of version base
// (nil: the latest). Addresses of rows that base already deletes are dropped; an address outside
// every fragment of base is an error.
func (t *Table) PrepareDeleteRows(ctx context.Context, base *Manifest, rows *rowset.Set) (*Transaction, error) {
	m, err := t.resolveBase(ctx, base)
	if err != nil {
		return nil, err
	}
	byID := fragmentsByID(m)
	live := &rowset.Set{}
	for _, id := range rows.Fragments() {
		f, ok := byID[id]
		offs := rows.Offsets(id)
		if !ok {
			return nil, fmt.Errorf("table %s: delete rows: version %d has no fragment %d", t.name, m.Version, id)
		}
		if int64(offs.Maximum()) >= f.PhysicalRows {
			return nil, fmt.Errorf("table %s: delete rows: fragment %d has %d rows, no offset %d", t.name, id, f.PhysicalRows, offs.Maximum())
		}
		dels, err := t.readDeletions(ctx, f)
		if err != nil {
			return nil, err
		}
		live.AddBitmap(id, roaring.AndNot(offs, dels))
	}
	return &Transaction{Operation: OpDelete, ReadVersion: m.Version, Deleted: live, base: m}, nil
}

// Delete removes the rows for which where is true, as one Delete transaction with props. When
// nothing matches, nothing is committed (WriteResult.Committed is false).
func (t *Table) Delete(ctx context.Context, where *expr.Predicate, props map[string]string) (WriteResult, error) {
	txn, err := t.PrepareDelete(ctx, nil, where)
	if err != nil {
		return WriteResult{}, err
	}
	txn.Properties = props
	return t.commitRowChange(ctx, txn)
}

// DeleteRows removes rows by address (fragment id << 32 | row offset), as one Delete
// transaction. Addresses are those of the latest version, as Scanner.RowAddresses reports them.
func (t *Table) DeleteRows(ctx context.Context, rows *rowset.Set, props map[string]string) (WriteResult, error) {
	txn, err := t.PrepareDeleteRows(ctx, nil, rows)
	if err != nil {
		return WriteResult{}, err
	}
	txn.Properties = props
	return t.commitRowChange(ctx, txn)
}

// commitRowChange commits a prepared Delete, Update or Upsert unless it changes nothing, and
// removes its new data files when the commit definitely failed.
func (t *Table) commitRowChange(ctx context.Context, txn *Transaction) (WriteResult, error) {
	res := WriteResult{RowsDeleted: txn.rowsDeleted(), RowsUpdated: txn.rowsUpdated, RowsInserted: txn.rowsInserted}
	if txn.Operation != OpDelete {
		res.RowsDeleted = 0
	}
	if txn.Deleted.IsEmpty() && len(txn.Fragments) == 0 {
		res.Manifest = txn.base
		return res, nil
	}
	m, err := t.Commit(ctx, txn)
	if err != nil {
		if CommitDefinitelyFailed(err) {
			t.Discard(ctx, txn)
		}
		return res, err
	}
	res.Manifest, res.Committed = m, true
	return res, nil
}

// Discard deletes the data files of a prepared transaction that will not be committed, best
// effort. Only call it when the transaction is certainly not committed (never committed, or
// Commit failed and CommitDefinitelyFailed says so).
func (t *Table) Discard(ctx context.Context, txn *Transaction) {
	var rels []string
	for _, f := range txn.Fragments {
		for _, df := range f.Files {
			rels = append(rels, df.Path)
		}
	}
	t.deleteFiles(ctx, rels)
}

// matchRows returns the addresses of the live rows of m (of fragments frags; nil: all) for which
// where is true. It reads only the columns where needs.
func (t *Table) matchRows(ctx context.Context, m *Manifest, where *expr.Predicate, frags []uint64) (*rowset.Set, error) {
	if err := where.Validate(m.ArrowSchema()); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	s, err := t.ScanManifest(ctx, m, ScanOptions{Columns: where.Columns(), WithRowAddresses: true, Fragments: frags})
	if err != nil {
		return nil, err
	}
	defer s.Release()
	bound, err := where.Bind(s.Schema())
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	rows := &rowset.Set{}
	for s.Next() {
		match, err := bound.Match(s.RecordBatch())
		if err != nil {
			return nil, fmt.Errorf("table %s: evaluate %s: %w", t.name, where, err)
		}
		addrs := s.RowAddresses()
		for i, ok := range match {
			if ok {
				rows.Add(addrs[i])
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

func fragmentsByID(m *Manifest) map[uint64]Fragment {
	out := make(map[uint64]Fragment, len(m.Fragments))
	for _, f := range m.Fragments {
		out[f.ID] = f
	}
	return out
}

// mergeDeletions writes, for every fragment of next that rows touches, a new deletion file
// holding its current deletions plus rows, and points the fragment at it. It returns the files
// it wrote. A fragment rows names that next lacks is an error: rebasing must have resolved every
// address to a fragment of next.
func (t *Table) mergeDeletions(ctx context.Context, next *Manifest, rows *rowset.Set) ([]string, error) {
	idx := make(map[uint64]int, len(next.Fragments))
	for i, f := range next.Fragments {
		idx[f.ID] = i
	}
	var written []string
	for _, id := range rows.Fragments() {
		i, ok := idx[id]
		if !ok {
			return written, fmt.Errorf("table %s: version %d has no fragment %d to delete rows from: %w", t.name, next.Version-1, id, ErrCommitConflict)
		}
		f := next.Fragments[i]
		offs := rows.Offsets(id)
		if int64(offs.Maximum()) >= f.PhysicalRows {
			return written, fmt.Errorf("table %s: fragment %d has %d rows, cannot delete offset %d", t.name, id, f.PhysicalRows, offs.Maximum())
		}
		dels, err := t.readDeletions(ctx, f)
		if err != nil {
			return written, err
		}
		before := dels.GetCardinality()
		dels.Or(offs)
		if dels.GetCardinality() == before {
			continue // every row was deleted already
		}
		rel, err := t.writeDeletions(ctx, id, next.Version, dels)
		if err != nil {
			return written, err
		}
		written = append(written, rel)
		f.DeletionFile, f.DeletedRows = rel, int64(dels.GetCardinality())
		next.Fragments[i] = f
	}
	return written, nil
}

// bitmapOfRange returns a bitmap holding [0, n).
func bitmapOfRange(n int64) *roaring.Bitmap {
	bm := roaring.New()
	bm.AddRange(0, uint64(n))
	return bm
}

// liveRows returns the indices, relative to start, of the rows in [start, start+n) of a fragment
// that dels does not delete; nil (not empty) means all of them, so a scan can pass the batch on
// untouched.
func liveRows(dels *roaring.Bitmap, start, n int64) []int32 {
	if dels == nil || dels.IsEmpty() || n == 0 {
		return nil
	}
	end := uint32(start + n - 1)
	deleted := dels.Rank(end)
	if start > 0 {
		deleted -= dels.Rank(uint32(start - 1))
	}
	if deleted == 0 {
		return nil
	}
	keep := make([]int32, 0, n-int64(deleted))
	it := dels.Iterator()
	it.AdvanceIfNeeded(uint32(start))
	for i := int64(0); i < n; i++ {
		off := uint32(start + i)
		if it.HasNext() && it.PeekNext() == off {
			it.Next()
			continue
		}
		keep = append(keep, int32(i))
	}
	return keep
}

// rowAddresses appends to dst the addresses of the rows of a batch of n rows at offset start of
// fragment frag, restricted to keep when it is not nil.
func rowAddresses(dst []uint64, frag uint64, start, n int64, keep []int32) []uint64 {
	if keep == nil {
		for i := int64(0); i < n; i++ {
			dst = append(dst, rowset.Address(frag, uint32(start+i)))
		}
		return dst
	}
	for _, i := range keep {
		dst = append(dst, rowset.Address(frag, uint32(start+int64(i))))
	}
	return dst
}
