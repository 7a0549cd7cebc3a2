package engine

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
)

// The change feed: every row a range of versions inserted, deleted or updated, derived from the
// versions' manifests alone. No file is written for it; what it reads is what the versions
// already hold:
//
//   - a fragment a version has and the version before it lacks holds rows the version inserted
//     (its live rows);
//   - a fragment the version before has and the version lacks held rows the version deleted (its
//     live rows in the version before);
//   - a fragment both have whose deletion file changed lost the rows its new deletion file adds
//     to the old one.
//
// The operation of the version decides what the rows mean. A Rewrite (compaction), an index or a
// config version changes no row: it contributes nothing. An Update or an Upsert of a keyed table
// pairs its rows by primary key: a deleted row whose key the version also inserted is an
// update_preimage, the inserted row an update_postimage; an unpaired deleted row is a delete, an
// unpaired inserted row an insert (an upsert of a new key). A MemWAL fold of a keyed table is an
// Upsert that writes one row per key (the newest), so a key upserted several times in one fold is
// one pre-image and one post-image. Every other version (an append, an epoch, a delete, an
// overwrite, an update of a keyless table) is deletes and inserts.
//
// Within a version deletes and pre-images come before inserts and post-images, so applying the
// rows in order to the table as it was before the version gives the version.

// The columns a change feed adds to the table's columns (Delta's names).
const (
	// ChangeTypeColumn (utf8) holds ChangeInsert, ChangeDelete, ChangePreimage or ChangePostimage.
	ChangeTypeColumn = "_change_type"
	// CommitVersionColumn (int64) holds the version that made the change.
	CommitVersionColumn = "_commit_version"
	// CommitTimestampColumn (timestamp[us, UTC]) holds that version's commit time.
	CommitTimestampColumn = "_commit_timestamp"
)

// The values of ChangeTypeColumn.
const (
	ChangeInsert    = "insert"
	ChangeDelete    = "delete"
	ChangePreimage  = "update_preimage"
	ChangePostimage = "update_postimage"
)

var (
	// ErrChangesUnavailable: a change range reaches a version cleanup removed
	// (*ChangesUnavailableError says which versions are still readable).
	ErrChangesUnavailable = errors.New("changes unavailable")
	// ErrInvalidChangeRange: a change range is empty or reversed (from > to, or from 0).
	ErrInvalidChangeRange = errors.New("invalid change range")
)

// ChangesUnavailableError reports a change range that needs a version cleanup removed. It wraps
// ErrChangesUnavailable.
type ChangesUnavailableError struct {
	Table string
	// From is the first version of the range asked for; Missing the version it needs that is
	// gone (From-1 holds the rows From's changes are read against).
	From, Missing uint64
	// Oldest is the oldest from_version a change range can start at now.
	Oldest uint64
}

func (e *ChangesUnavailableError) Error() string {
	return fmt.Sprintf("table %s: changes from version %d need version %d, which cleanup removed; the oldest version changes can be read from is %d",
		e.Table, e.From, e.Missing, e.Oldest)
}

// Unwrap returns ErrChangesUnavailable.
func (e *ChangesUnavailableError) Unwrap() error { return ErrChangesUnavailable }

// ChangeOptions select what Changes reads.
type ChangeOptions struct {
	// From is the first version whose changes are read, >= 1.
	From uint64
	// To is the last one (inclusive); 0: the latest. With To 0 and From past the latest version
	// there is nothing to read yet: the feed is empty.
	To uint64
	// SchemaVersion is the version whose schema the rows are read in (0: To). Rows of versions
	// before a column was added read it as null.
	SchemaVersion uint64
	// Columns are the table columns to return, in order (empty: every column); the change
	// columns follow them.
	Columns []string
	// Filter returns only the change rows for which it is true (on the table columns).
	Filter *expr.Predicate
	// BatchSize is the most rows per batch (default as Scan's).
	BatchSize int64
	// Allocator holds the batches' buffers (default: the table's).
	Allocator memory.Allocator
}

// ChangeRange is the range of versions a change read covers, resolved: To is never 0.
type ChangeRange struct {
	From, To uint64
	// Schema is the manifest whose schema the rows are read in.
	Schema *Manifest
}

// Empty reports whether the range holds no version (From past the latest version).
func (r ChangeRange) Empty() bool { return r.From > r.To }

// ResolveChanges checks o's range against the table's versions and resolves it: To 0 becomes
// the latest version, and every version the range needs (From-1 to To) must still be readable.
func (t *Table) ResolveChanges(ctx context.Context, o ChangeOptions) (ChangeRange, error) {
	if o.From == 0 {
		return ChangeRange{}, fmt.Errorf("table %s: %w: from_version must be >= 1", t.name, ErrInvalidChangeRange)
	}
	if o.To != 0 && o.From > o.To {
		return ChangeRange{}, fmt.Errorf("table %s: %w: from_version %d is after to_version %d", t.name, ErrInvalidChangeRange, o.From, o.To)
	}
	latest, err := t.Latest(ctx)
	if err != nil {
		return ChangeRange{}, err
	}
	r := ChangeRange{From: o.From, To: o.To}
	if r.To == 0 {
		r.To = latest.Version
	}
	if r.To > latest.Version {
		return ChangeRange{}, fmt.Errorf("table %s version %d: %w (the latest is %d)", t.name, r.To, ErrVersionNotFound, latest.Version)
	}
	sv := o.SchemaVersion
	if sv == 0 {
		sv = r.To
	}
	if sv > latest.Version {
		return ChangeRange{}, fmt.Errorf("table %s version %d: %w (the latest is %d)", t.name, sv, ErrVersionNotFound, latest.Version)
	}
	if r.Schema, err = t.changeManifest(ctx, r.From, sv); err != nil {
		return ChangeRange{}, err
	}
	if r.Empty() {
		return r, nil
	}
	// The oldest versions the range needs: From, and the one its changes are read against. The
	// versions after them are kept as long as they are (cleanup removes the oldest first).
	if _, err := t.changeManifest(ctx, r.From, r.From); err != nil {
		return ChangeRange{}, err
	}
	if r.From > 1 {
		if _, err := t.changeManifest(ctx, r.From, r.From-1); err != nil {
			return ChangeRange{}, err
		}
	}
	return r, nil
}

// changeManifest reads version v for a change range starting at from; a removed version is a
// *ChangesUnavailableError.
func (t *Table) changeManifest(ctx context.Context, from, v uint64) (*Manifest, error) {
	m, err := t.Manifest(ctx, v)
	if err == nil || !errors.Is(err, ErrVersionNotFound) {
		return m, err
	}
	return nil, t.changesUnavailable(ctx, from, v)
}

// changesUnavailable returns the error of a change range starting at from that needs version
// missing, which is gone.
func (t *Table) changesUnavailable(ctx context.Context, from, missing uint64) error {
	vs, err := t.Versions(ctx)
	if err != nil {
		return err
	}
	e := &ChangesUnavailableError{Table: t.name, From: from, Missing: missing}
	switch {
	case len(vs) == 0:
		return fmt.Errorf("table %s: %w", t.name, ErrTableNotFound)
	case vs[0] == 1:
		e.Oldest = 1 // version 1's changes are read against the empty table
	default:
		e.Oldest = vs[0] + 1
	}
	return e
}

// ChangeSchema returns the schema of a change read of columns (empty: all) of sc: the columns,
// then ChangeTypeColumn, CommitVersionColumn and CommitTimestampColumn.
func ChangeSchema(sc *arrow.Schema, columns []string) (*arrow.Schema, error) {
	for _, name := range []string{ChangeTypeColumn, CommitVersionColumn, CommitTimestampColumn} {
		if len(sc.FieldIndices(name)) > 0 {
			return nil, fmt.Errorf("%w: the table has a column %q, which a change feed adds", arrowschema.ErrSchemaMismatch, name)
		}
	}
	proj, err := arrowschema.ProjectSchema(sc, columns)
	if err != nil {
		return nil, err
	}
	fields := append(slices.Clone(proj.Fields()), changeFields...)
	md := proj.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

var changeFields = []arrow.Field{
	{Name: ChangeTypeColumn, Type: arrow.BinaryTypes.String},
	{Name: CommitVersionColumn, Type: arrow.PrimitiveTypes.Int64},
	{Name: CommitTimestampColumn, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
}

// VersionChanges counts what one version changed (Table.ChangeCounts): rows a change read of it
// returns without a filter, and the data bytes it reads for them.
type VersionChanges struct {
	Version uint64
	Rows    int64
	Bytes   int64
}

// ChangeCounts returns, for every version of r, the rows a change read of it returns (without a
// filter) and the data bytes it reads, from the manifests alone (no data or deletion file is
// read). GetFlightInfo groups versions into endpoints by them.
func (t *Table) ChangeCounts(ctx context.Context, r ChangeRange) ([]VersionChanges, error) {
	if r.Empty() {
		return nil, nil
	}
	prev, err := t.changeBase(ctx, r.From)
	if err != nil {
		return nil, err
	}
	out := make([]VersionChanges, 0, r.To-r.From+1)
	for v := r.From; v <= r.To; v++ {
		cur, err := t.changeManifest(ctx, r.From, v)
		if err != nil {
			return nil, err
		}
		c := VersionChanges{Version: v}
		if changesRows(cur.Transaction.Operation) {
			before := fragmentsByID(prev)
			for _, f := range cur.Fragments {
				old, ok := before[f.ID]
				if !ok {
					c.Rows += f.LiveRows()
					c.Bytes += f.DataBytes()
					continue
				}
				delete(before, f.ID)
				if n := f.DeletedRows - old.DeletedRows; n > 0 && f.PhysicalRows > 0 {
					c.Rows += n
					c.Bytes += f.DataBytes() * n / f.PhysicalRows
				}
			}
			for _, f := range before {
				c.Rows += f.LiveRows()
				c.Bytes += f.DataBytes()
			}
		}
		out = append(out, c)
		prev = cur
	}
	return out, nil
}

// changeBase returns the manifest version from's changes are read against: from-1, or an empty
// version before version 1.
func (t *Table) changeBase(ctx context.Context, from uint64) (*Manifest, error) {
	if from == 1 {
		return &Manifest{}, nil
	}
	return t.changeManifest(ctx, from, from-1)
}

// changesRows reports whether a version of operation op can change rows: compaction, index and
// config versions cannot.
func changesRows(op Operation) bool {
	switch op {
	case OpRewrite, OpCreateIndex, OpOptimizeIndex, OpUpdateConfig:
		return false
	}
	return true
}

// Changes opens a read of the changes of versions o.From..o.To (ResolveChanges): the table
// columns of o.Columns in the schema of o.SchemaVersion, then ChangeTypeColumn,
// CommitVersionColumn and CommitTimestampColumn. The caller must Release the reader. A version
// cleanup removes while the read runs fails it with an error wrapping ErrChangesUnavailable.
func (t *Table) Changes(ctx context.Context, o ChangeOptions) (*ChangeReader, error) {
	r, err := t.ResolveChanges(ctx, o)
	if err != nil {
		return nil, err
	}
	return t.ChangesOf(ctx, r, o)
}

// ChangesOf is Changes of a resolved range (o's range fields are ignored).
func (t *Table) ChangesOf(ctx context.Context, r ChangeRange, o ChangeOptions) (*ChangeReader, error) {
	sc := r.Schema.ArrowSchema()
	out, err := ChangeSchema(sc, o.Columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	if o.Filter != nil {
		if err := o.Filter.Validate(sc); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	alloc := o.Allocator
	if alloc == nil {
		alloc = t.opts.Allocator
	}
	cr := &ChangeReader{ctx: ctx, t: t, rng: r, opts: o, alloc: alloc, schema: out, refs: 1, next: r.From}
	if !r.Empty() {
		if cr.prev, err = t.changeBase(ctx, r.From); err != nil {
			return nil, err
		}
	}
	return cr, nil
}

// ChangeReader streams the changes of a range of versions, version by version. It implements
// array.RecordReader; it is not safe for concurrent use.
type ChangeReader struct {
	ctx    context.Context
	t      *Table
	rng    ChangeRange
	opts   ChangeOptions
	alloc  memory.Allocator
	schema *arrow.Schema
	refs   int64

	next uint64    // the next version to plan
	prev *Manifest // the version before next

	// The version being read: its segments, in order, and the open one's scanner.
	version  *Manifest
	segments []changeSegment
	scan     *Scanner
	kind     string // the open segment's change type

	cur arrow.RecordBatch
	err error
}

// changeSegment is a set of rows of one version that share a change type: fragments with, per
// fragment, the offsets to leave out.
type changeSegment struct {
	kind  string
	frags []Fragment
	skip  map[uint64]*roaring.Bitmap
}

var _ array.RecordReader = (*ChangeReader)(nil)

// Schema returns the schema of every batch: the table columns, then the change columns.
func (c *ChangeReader) Schema() *arrow.Schema { return c.schema }

// Retain increases the reference count.
func (c *ChangeReader) Retain() { atomic.AddInt64(&c.refs, 1) }

// Release decreases the reference count and closes the read at zero.
func (c *ChangeReader) Release() {
	if atomic.AddInt64(&c.refs, -1) == 0 {
		c.closeSegment()
		if c.cur != nil {
			c.cur.Release()
			c.cur = nil
		}
	}
}

// Err returns the first error the read met.
func (c *ChangeReader) Err() error { return c.err }

// RecordBatch returns the current batch, valid until the next call to Next.
func (c *ChangeReader) RecordBatch() arrow.RecordBatch { return c.cur }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (c *ChangeReader) Record() arrow.RecordBatch { return c.cur }

// Next advances to the next non-empty batch.
func (c *ChangeReader) Next() bool {
	if c.cur != nil {
		c.cur.Release()
		c.cur = nil
	}
	for c.err == nil {
		if c.scan != nil {
			if c.scan.Next() {
				rec, err := c.stamp(c.scan.RecordBatch())
				if err != nil {
					c.err = err
					return false
				}
				c.cur = rec
				return true
			}
			if err := c.scan.Err(); err != nil {
				c.err = c.removedFile(err)
				return false
			}
			c.closeSegment()
		}
		if len(c.segments) > 0 {
			if err := c.openSegment(); err != nil {
				c.err = c.removedFile(err)
			}
			continue
		}
		if c.rng.Empty() || c.next > c.rng.To {
			return false
		}
		if err := c.planVersion(); err != nil {
			c.err = c.removedFile(err)
		}
	}
	return false
}

// removedFile maps a data or deletion file cleanup removed during the read to the range being
// unavailable.
func (c *ChangeReader) removedFile(err error) error {
	if errors.Is(err, ErrChangesUnavailable) || !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: %w", c.t.changesUnavailable(c.ctx, c.rng.From, c.next-1), err)
}

func (c *ChangeReader) closeSegment() {
	if c.scan != nil {
		c.scan.Release()
		c.scan = nil
	}
}

// openSegment opens a scanner over the next segment of the version being read.
func (c *ChangeReader) openSegment() error {
	seg := c.segments[0]
	c.segments = c.segments[1:]
	s, err := c.t.scanFragments(c.ctx, c.rng.Schema, seg.frags, ScanOptions{
		Columns: c.opts.Columns, Filter: c.opts.Filter, BatchSize: c.opts.BatchSize, Allocator: c.alloc})
	if err != nil {
		return err
	}
	s.skip = seg.skip
	c.scan, c.kind = s, seg.kind
	return nil
}

// planVersion reads the next version's manifest and splits its changes into segments.
func (c *ChangeReader) planVersion() error {
	cur, err := c.t.changeManifest(c.ctx, c.rng.From, c.next)
	if err != nil {
		return err
	}
	prev := c.prev
	c.prev, c.version = cur, cur
	c.next++
	if !changesRows(cur.Transaction.Operation) {
		return nil
	}
	removed, added, err := c.t.versionDiff(c.ctx, prev, cur)
	if err != nil {
		return err
	}
	op := cur.Transaction.Operation
	if len(cur.PrimaryKey) == 0 || (op != OpUpdate && op != OpUpsert) || removed.empty() || added.empty() {
		c.segments = appendSegment(c.segments, ChangeDelete, removed)
		c.segments = appendSegment(c.segments, ChangeInsert, added)
		return nil
	}
	pairedRemoved, pairedAdded, err := c.t.pairByKey(c.ctx, c.rng.Schema, cur.PrimaryKey, removed, added)
	if err != nil {
		return err
	}
	pre, del := removed.split(pairedRemoved)
	post, ins := added.split(pairedAdded)
	c.segments = appendSegment(c.segments, ChangeDelete, del)
	c.segments = appendSegment(c.segments, ChangePreimage, pre)
	c.segments = appendSegment(c.segments, ChangeInsert, ins)
	c.segments = appendSegment(c.segments, ChangePostimage, post)
	return nil
}

func appendSegment(segs []changeSegment, kind string, rows changeRows) []changeSegment {
	if rows.empty() {
		return segs
	}
	return append(segs, changeSegment{kind: kind, frags: rows.frags, skip: rows.skip})
}

// changeRows are rows of some fragments: per fragment, the offsets to leave out (skip; a
// fragment without an entry leaves out its deleted rows).
type changeRows struct {
	frags []Fragment
	skip  map[uint64]*roaring.Bitmap
	rows  int64
}

func (r changeRows) empty() bool { return r.rows == 0 }

// add adds the rows of f that skip (nil: f's deletions) leaves in; f.DeletedRows must count the
// rows left out.
func (r *changeRows) add(f Fragment, skip *roaring.Bitmap) {
	if f.LiveRows() <= 0 {
		return
	}
	if skip != nil {
		if r.skip == nil {
			r.skip = make(map[uint64]*roaring.Bitmap)
		}
		r.skip[f.ID] = skip
	}
	r.frags = append(r.frags, f)
	r.rows += f.LiveRows()
}

// split divides r into the rows whose addresses are in sel and the others.
func (r changeRows) split(sel *rowset.Set) (in, out changeRows) {
	for _, f := range r.frags {
		skip := r.skip[f.ID] // versionDiff gives every fragment its skip set
		picked := sel.Offsets(f.ID)
		if picked == nil {
			picked = roaring.New() // none of the fragment's rows
		}
		all := roaring.New()
		all.AddRange(0, uint64(f.PhysicalRows))
		live := roaring.AndNot(all, skip)
		inRows := roaring.And(live, picked)
		outRows := roaring.AndNot(live, inRows)
		in.add(selected(f, inRows), roaring.AndNot(all, inRows))
		out.add(selected(f, outRows), roaring.AndNot(all, outRows))
	}
	return in, out
}

// selected returns f counted as holding exactly the rows of keep (its other rows left out).
func selected(f Fragment, keep *roaring.Bitmap) Fragment {
	f.DeletionFile = ""
	f.DeletedRows = f.PhysicalRows - int64(keep.GetCardinality())
	return f
}

// versionDiff returns the rows version cur deleted from prev (removed) and the rows it added
// (added). Every fragment of either side carries an explicit skip set.
func (t *Table) versionDiff(ctx context.Context, prev, cur *Manifest) (removed, added changeRows, err error) {
	before := fragmentsByID(prev)
	for _, f := range cur.Fragments {
		old, ok := before[f.ID]
		if !ok {
			dels, err := t.readDeletions(ctx, f)
			if err != nil {
				return removed, added, err
			}
			added.add(f, dels)
			continue
		}
		delete(before, f.ID)
		if f.DeletionFile == old.DeletionFile {
			continue
		}
		now, err := t.readDeletions(ctx, f)
		if err != nil {
			return removed, added, err
		}
		was, err := t.readDeletions(ctx, old)
		if err != nil {
			return removed, added, err
		}
		gone := roaring.AndNot(now, was)
		if gone.IsEmpty() {
			continue
		}
		all := roaring.New()
		all.AddRange(0, uint64(f.PhysicalRows))
		removed.add(selected(f, gone), roaring.AndNot(all, gone))
	}
	for _, f := range prev.Fragments { // in prev's order
		if _, ok := before[f.ID]; !ok {
			continue
		}
		dels, err := t.readDeletions(ctx, f)
		if err != nil {
			return removed, added, err
		}
		removed.add(f, dels)
	}
	return removed, added, nil
}

// pairByKey returns the removed rows whose primary key is also a key of an added row, and the
// added rows whose key is a key of a removed row: an update's pre-images and post-images. A row
// with a null key column pairs with none.
//
// Both sides' keys are sorted and merged rather than hashed: a version of a million changed keys
// is two sorts of a million entries, where a hash table of them misses the cache on nearly
// every probe. An 8-byte key (the encoding of one integer, float or timestamp column) sorts as
// an integer; two keys pair exactly when their encodings are equal.
func (t *Table) pairByKey(ctx context.Context, m *Manifest, key []string, removed, added changeRows) (preimages, postimages *rowset.Set, err error) {
	var r, a keyedRows
	if err := t.scanChangeKeys(ctx, m, key, removed, r.add); err != nil {
		return nil, nil, err
	}
	if err := t.scanChangeKeys(ctx, m, key, added, a.add); err != nil {
		return nil, nil, err
	}
	preimages, postimages = &rowset.Set{}, &rowset.Set{}
	mergeKeys(r.fixed, a.fixed, func(x, y keyedRow[uint64]) int { return cmp.Compare(x.key, y.key) }, preimages, postimages)
	mergeKeys(r.other, a.other, func(x, y keyedRow[string]) int { return strings.Compare(x.key, y.key) }, preimages, postimages)
	return preimages, postimages, nil
}

// keyedRow is a row's address and its encoded primary key.
type keyedRow[K any] struct {
	key  K
	addr uint64
}

// keyedRows holds rows by encoded key: 8-byte keys as integers (no allocation), others as
// strings.
type keyedRows struct {
	fixed []keyedRow[uint64]
	other []keyedRow[string]
}

func (k *keyedRows) add(addr uint64, key []byte) {
	if len(key) == 8 {
		k.fixed = append(k.fixed, keyedRow[uint64]{binary.BigEndian.Uint64(key), addr})
		return
	}
	k.other = append(k.other, keyedRow[string]{string(key), addr})
}

// mergeKeys sorts r and a by key and adds to pre the rows of r, and to post the rows of a, whose
// key is on both sides.
func mergeKeys[K any](r, a []keyedRow[K], compare func(x, y keyedRow[K]) int, pre, post *rowset.Set) {
	slices.SortFunc(r, compare)
	slices.SortFunc(a, compare)
	for i, j := 0, 0; i < len(r) && j < len(a); {
		switch c := compare(r[i], a[j]); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			k := r[i]
			for ; i < len(r) && compare(r[i], k) == 0; i++ {
				pre.Add(r[i].addr)
			}
			for ; j < len(a) && compare(a[j], k) == 0; j++ {
				post.Add(a[j].addr)
			}
		}
	}
}

// scanChangeKeys calls fn with the address and encoded primary key of every row of rows whose key
// has no null column; the key's bytes are valid until fn returns.
func (t *Table) scanChangeKeys(ctx context.Context, m *Manifest, key []string, rows changeRows, fn func(addr uint64, key []byte)) error {
	s, err := t.scanFragments(ctx, m, rows.frags, ScanOptions{Columns: key, WithRowAddresses: true})
	if err != nil {
		return err
	}
	defer s.Release()
	s.skip = rows.skip
	var buf []byte
	for s.Next() {
		rec := s.RecordBatch()
		enc, err := expr.NewKeyEncoder(rec, key)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		addrs := s.RowAddresses()
		for i := range int(rec.NumRows()) {
			var ok bool
			if buf, ok = enc.AppendKey(buf[:0], i); ok {
				fn(addrs[i], buf)
			}
		}
	}
	return s.Err()
}

// stamp returns rec with the change columns of the open segment appended.
func (c *ChangeReader) stamp(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	cols := make([]arrow.Array, 0, rec.NumCols()+3)
	cols = append(cols, rec.Columns()...)
	kind := constantString(c.alloc, c.kind, n)
	defer kind.Release()
	version := constantInt64(c.alloc, int64(c.version.Version), n)
	defer version.Release()
	ts := constantTimestamp(c.alloc, changeFields[2].Type.(*arrow.TimestampType), arrow.Timestamp(c.version.TimestampNanos/1000), n)
	defer ts.Release()
	cols = append(cols, kind, version, ts)
	return array.NewRecordBatch(c.schema, cols, int64(n)), nil
}

func constantString(mem memory.Allocator, v string, n int) arrow.Array {
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.Reserve(n)
	b.ReserveData(n * len(v))
	for range n {
		b.Append(v)
	}
	return b.NewArray()
}

func constantInt64(mem memory.Allocator, v int64, n int) arrow.Array {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	b.Reserve(n)
	for range n {
		b.UnsafeAppend(v)
	}
	return b.NewArray()
}

func constantTimestamp(mem memory.Allocator, dt *arrow.TimestampType, v arrow.Timestamp, n int) arrow.Array {
	b := array.NewTimestampBuilder(mem, dt)
	defer b.Release()
	b.Reserve(n)
	for range n {
		b.UnsafeAppend(v)
	}
	return b.NewArray()
}
