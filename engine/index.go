package engine

import (
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/rowset"
)

// Indices.
//
// An index is recorded in the manifest (Manifest.Indices) as a list of segments: the segment
// built when the index was created and the delta segments OptimizeIndices appended since, or one
// segment that merged them. Every segment knows the fragments it covers (a roaring bitmap of
// fragment ids); its files live under <table>/_indices/<segment id>/ and never change.
//
// A fragment is indexed when some segment covers it. Fragments appended after a segment was
// built are unindexed until OptimizeIndices appends a delta for them; readers of the index scan
// unindexed fragments instead. Rows deleted after a segment was built stay in it and are
// filtered through the fragments' deletion files when the index is read.
//
// Compaction does not rewrite index files. A Rewrite (or Overwrite) removes the fragments it
// replaces from every segment's coverage when its manifest is built (pruneIndexCoverage), so
// their stale entries are never used, and the new fragments are unindexed until the next
// OptimizeIndices indexes them. That keeps a Rewrite's commit free of index work and of index
// conflicts, at the price of re-reading the key columns of the rewritten fragments once; the
// alternative, remapping entries through the change-of-address mapping, would rewrite every
// segment holding a moved row inside the compaction's commit. See docs/indices.md.

// IndexKind names what an index maps.
type IndexKind string

// IndexPrimaryKey maps a primary key (the table's key columns, encoded as Upsert encodes them) to
// the addresses of the rows that hold it.
const IndexPrimaryKey IndexKind = "primary_key"

// Transaction property keys of index transactions.
const (
	// PropIndexName names the index a CreateIndex or OptimizeIndex changes.
	PropIndexName = "flight_sink.index.name"
)

// indicesDir is the directory of index files inside a table, part of the on-disk layout
// (docs/storage.md, docs/indices.md).
const indicesDir = "_indices/"

// Index is one logical index of a table version.
type Index struct {
	// ID identifies the index for its whole life (segments come and go).
	ID   string    `json:"id"`
	Name string    `json:"name"`
	Kind IndexKind `json:"kind"`
	// Columns are the indexed columns, in key order.
	Columns []string `json:"columns"`
	// Segments are the index's parts, oldest first.
	Segments []IndexSegment `json:"segments"`
}

// IndexSegment is one immutable part of an index.
type IndexSegment struct {
	// ID is a UUID; the segment's files live under _indices/<ID>/.
	ID string `json:"id"`
	// Fragments is the roaring bitmap (portable encoding) of the ids of the fragments the segment
	// covers: it holds an entry for every row of those fragments that was live when it was built.
	// A segment without it covers nothing provably (its entries are still usable).
	Fragments []byte `json:"fragments,omitempty"`
	// Files are the segment's files, relative to the table.
	Files []IndexFile `json:"files"`
	// Entries is the number of entries in the segment's files.
	Entries int64 `json:"entries"`
	// BuiltAt is the table version the segment was built from.
	BuiltAt uint64 `json:"built_at_version"`
}

// IndexFile is one file of an index segment, relative to the table.
type IndexFile struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
}

// IndexChange is what a CreateIndex or OptimizeIndex transaction does to one index.
type IndexChange struct {
	// Name of the index changed (created).
	Name string `json:"name"`
	// ID, Kind and Columns define the index (CreateIndex only).
	ID      string    `json:"id,omitempty"`
	Kind    IndexKind `json:"kind,omitempty"`
	Columns []string  `json:"columns,omitempty"`
	// Removed lists the ids of the segments replaced (by a merged segment).
	Removed []string `json:"removed,omitempty"`
	// Added are the new segments, appended after the index's remaining segments.
	Added []IndexSegment `json:"added,omitempty"`
}

// makeIndexKey returns the key, relative to the table, of file name of index segment seg.
func makeIndexKey(seg, name string) string { return indicesDir + seg + "/" + name }

// Index returns the index named name, or nil.
func (m *Manifest) Index(name string) *Index {
	for i := range m.Indices {
		if m.Indices[i].Name == name {
			return &m.Indices[i]
		}
	}
	return nil
}

// primaryKeyIndex returns an index of the table's primary key, or nil.
func (m *Manifest) primaryKeyIndex() *Index {
	if len(m.PrimaryKey) == 0 {
		return nil
	}
	for i := range m.Indices {
		ix := &m.Indices[i]
		if ix.Kind == IndexPrimaryKey && slices.Equal(ix.Columns, m.PrimaryKey) {
			return ix
		}
	}
	return nil
}

// coverage decodes the segment's fragment bitmap; ok is false when it has none (or it is
// unreadable or malformed), which proves nothing.
func (s *IndexSegment) coverage() (bm *roaring.Bitmap, ok bool) {
	if len(s.Fragments) == 0 {
		return nil, false
	}
	bm, err := rowset.DecodeBitmap(s.Fragments)
	if err != nil || bm.Validate() != nil {
		return nil, false // a corrupt bitmap proves nothing (and must not reach roaring's operations)
	}
	return bm, true
}

// Coverage returns the union of the fragment bitmaps of the index's segments: the fragments it
// provably covers. Segments without a bitmap add nothing.
func (ix *Index) Coverage() *roaring.Bitmap {
	out := roaring.New()
	for i := range ix.Segments {
		if bm, ok := ix.Segments[i].coverage(); ok {
			out.Or(bm)
		}
	}
	return out
}

// UnindexedFragments returns the fragments of m that no segment of ix covers, in manifest order.
func (ix *Index) UnindexedFragments(m *Manifest) []Fragment {
	cov := ix.Coverage()
	var out []Fragment
	for _, f := range m.Fragments {
		if f.ID > rowset.MaxFragmentID || !cov.Contains(uint32(f.ID)) {
			out = append(out, f)
		}
	}
	return out
}

// liveFragmentBitmap returns the ids of m's fragments as a bitmap.
func liveFragmentBitmap(m *Manifest) *roaring.Bitmap {
	bm := roaring.New()
	for _, f := range m.Fragments {
		if f.ID <= rowset.MaxFragmentID {
			bm.Add(uint32(f.ID))
		}
	}
	return bm
}

func fragmentBitmap(frags []Fragment) *roaring.Bitmap {
	bm := roaring.New()
	for _, f := range frags {
		if f.ID <= rowset.MaxFragmentID {
			bm.Add(uint32(f.ID))
		}
	}
	return bm
}

func cloneIndices(ix []Index) []Index {
	if ix == nil {
		return nil
	}
	out := make([]Index, len(ix))
	for i, x := range ix {
		x.Columns = slices.Clone(x.Columns)
		x.Segments = slices.Clone(x.Segments) // segment fields are replaced, never mutated
		out[i] = x
	}
	return out
}

func cloneCatchup(c map[string]map[string]uint64) map[string]map[string]uint64 {
	if c == nil {
		return nil
	}
	out := make(map[string]map[string]uint64, len(c))
	for name, shards := range c {
		s := make(map[string]uint64, len(shards))
		for k, v := range shards {
			s[k] = v
		}
		out[name] = s
	}
	return out
}

// applyIndexChange applies a CreateIndex or OptimizeIndex to next (a copy of the newest version).
// It fails with ErrCommitConflict when the change no longer fits: the index was created
// meanwhile (CreateIndex), or it, or a segment the change replaces, is gone (OptimizeIndex).
func applyIndexChange(next *Manifest, txn *Transaction) error {
	c := txn.Index
	if c == nil || c.Name == "" {
		return fmt.Errorf("%s transaction without an index change", txn.Operation)
	}
	if txn.Operation == OpCreateIndex {
		if next.Index(c.Name) != nil {
			return fmt.Errorf("index %q already exists: %w", c.Name, ErrCommitConflict)
		}
		sc := next.ArrowSchema()
		for _, col := range c.Columns {
			if sc != nil && len(sc.FieldIndices(col)) != 1 {
				return fmt.Errorf("index %q: column %q is not in the schema: %w", c.Name, col, ErrCommitConflict)
			}
		}
		next.Indices = append(next.Indices, Index{ID: c.ID, Name: c.Name, Kind: c.Kind,
			Columns: slices.Clone(c.Columns), Segments: slices.Clone(c.Added)})
		return nil
	}
	ix := next.Index(c.Name)
	if ix == nil {
		return fmt.Errorf("index %q no longer exists: %w", c.Name, ErrCommitConflict)
	}
	removed := make(map[string]bool, len(c.Removed))
	for _, id := range c.Removed {
		removed[id] = true
	}
	keep := make([]IndexSegment, 0, len(ix.Segments)+len(c.Added))
	for _, s := range ix.Segments {
		if removed[s.ID] {
			delete(removed, s.ID)
			continue
		}
		keep = append(keep, s)
	}
	if len(removed) > 0 {
		return fmt.Errorf("index %q: %d of the segments this optimize merges were replaced by another optimize: %w", c.Name, len(removed), ErrCommitConflict)
	}
	ix.Segments = append(keep, c.Added...)
	return nil
}

// pruneIndexCoverage restricts every segment's coverage to the fragments of m, dropping segments
// left covering nothing, and drops indices whose columns the schema lost (an Overwrite). A
// fragment id is never reused, so a fragment that left the table never comes back: entries of
// segments for it are stale for good. Segments whose coverage does not change are left
// byte-identical.
func pruneIndexCoverage(m *Manifest) {
	if len(m.Indices) == 0 {
		return
	}
	live := liveFragmentBitmap(m)
	sc := m.ArrowSchema()
	out := m.Indices[:0]
	for _, ix := range m.Indices {
		if sc != nil && !schemaHasColumns(sc, ix.Columns) {
			continue
		}
		segs := ix.Segments[:0:0]
		changed := false
		for _, s := range ix.Segments {
			cov, ok := s.coverage()
			if !ok {
				segs = append(segs, s) // unknown coverage: nothing to prune, nothing proven
				continue
			}
			pruned := roaring.And(cov, live)
			if pruned.GetCardinality() == cov.GetCardinality() {
				segs = append(segs, s)
				continue
			}
			changed = true
			if pruned.IsEmpty() {
				continue // covers nothing any more; its files become unreferenced
			}
			b, err := rowset.EncodeBitmap(pruned)
			if err != nil {
				continue // cannot happen for an in-memory bitmap; dropping is the safe side
			}
			s.Fragments = b
			segs = append(segs, s)
		}
		if changed {
			ix.Segments = segs
		}
		out = append(out, ix)
	}
	m.Indices = out
}

func schemaHasColumns(sc *arrow.Schema, cols []string) bool {
	for _, c := range cols {
		if len(sc.FieldIndices(c)) != 1 {
			return false
		}
	}
	return true
}
