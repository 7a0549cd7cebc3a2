package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
)

// IndexSpec describes an index to create.
type IndexSpec struct {
	// Name of the index, unique in the table. Default "pk".
	Name string
	// Columns to index. Default, and the only columns supported: the table's primary key.
	Columns []string
	// Properties are stamped on the CreateIndex transaction.
	Properties map[string]string
}

// CreateIndex builds a primary-key index over every fragment of the latest version and commits
// it as one CreateIndex transaction. Fragments appended meanwhile are left unindexed (the next
// OptimizeIndices covers them). It fails with ErrCommitConflict if an index of that name exists.
func (t *Table) CreateIndex(ctx context.Context, spec IndexSpec) (*Manifest, error) {
	ctx, span := tracer.Start(ctx, "engine.CreateIndex", trace.WithAttributes(attribute.String("table", t.name)))
	defer span.End()
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = "pk"
	}
	if len(spec.Columns) == 0 {
		spec.Columns = m.PrimaryKey
	}
	if len(m.PrimaryKey) == 0 {
		return nil, fmt.Errorf("table %s: create index %q: the table has no primary key (only primary-key indices exist)", t.name, spec.Name)
	}
	if !slices.Equal(spec.Columns, m.PrimaryKey) {
		return nil, fmt.Errorf("table %s: create index %q on %v: only the primary key %v can be indexed", t.name, spec.Name, spec.Columns, m.PrimaryKey)
	}
	if m.Index(spec.Name) != nil {
		return nil, fmt.Errorf("table %s: index %q already exists: %w", t.name, spec.Name, ErrCommitConflict)
	}
	change := &IndexChange{Name: spec.Name, ID: uuid.NewString(), Kind: IndexPrimaryKey, Columns: spec.Columns}
	if len(m.Fragments) > 0 {
		seg, err := t.buildPKSegment(ctx, m, spec.Columns, m.Fragments, nil)
		if err != nil {
			return nil, err
		}
		change.Added = []IndexSegment{seg}
	}
	return t.commitIndexChange(ctx, m, OpCreateIndex, change, spec.Properties)
}

// OptimizeIndexOptions tune OptimizeIndices. The zero value appends deltas for unindexed
// fragments and merges segments past the default limit.
type OptimizeIndexOptions struct {
	// Names limits the run to these indices; empty means every index.
	Names []string
	// MaxSegments: once an index would have more segments than this, its newest segments are
	// merged into one (see mergePlan). Default 8.
	MaxSegments int
	// MergeAll merges every segment of each index (and its unindexed fragments) into one.
	MergeAll bool
	// Properties are stamped on every OptimizeIndex transaction.
	Properties map[string]string
}

// OptimizeIndexResult says what OptimizeIndices did to one index.
type OptimizeIndexResult struct {
	Name string
	// Version committed, 0 when the index needed nothing.
	Version            uint64
	FragmentsIndexed   int
	SegmentsMerged     int
	EntriesWritten     int64
	SegmentsAfter      int
	UnindexedFragments int
}

// OptimizeIndexReport says what OptimizeIndices did.
type OptimizeIndexReport struct {
	ReadVersion uint64
	Indices     []OptimizeIndexResult
	Duration    time.Duration
}

// OptimizeIndices brings the table's indices up to date, one OptimizeIndex transaction per index
// that needs one: it appends a delta segment covering the fragments no segment covers and, when
// an index has too many segments, merges its newest ones (dropping entries of rows deleted or
// fragments rewritten since they were indexed). An index that is current commits nothing.
func (t *Table) OptimizeIndices(ctx context.Context, o OptimizeIndexOptions) (OptimizeIndexReport, error) {
	start := time.Now()
	ctx, span := tracer.Start(ctx, "engine.OptimizeIndices", trace.WithAttributes(attribute.String("table", t.name)))
	defer span.End()
	if o.MaxSegments <= 0 {
		o.MaxSegments = 8
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return OptimizeIndexReport{}, err
	}
	rep := OptimizeIndexReport{ReadVersion: m.Version}
	for _, name := range o.Names {
		if m.Index(name) == nil {
			return rep, fmt.Errorf("table %s: no index %q", t.name, name)
		}
	}
	for i := range m.Indices {
		ix := &m.Indices[i]
		if len(o.Names) > 0 && !slices.Contains(o.Names, ix.Name) {
			continue
		}
		res, err := t.optimizeIndex(ctx, m, ix, o)
		rep.Indices = append(rep.Indices, res)
		if err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

func (t *Table) optimizeIndex(ctx context.Context, m *Manifest, ix *Index, o OptimizeIndexOptions) (OptimizeIndexResult, error) {
	res := OptimizeIndexResult{Name: ix.Name, SegmentsAfter: len(ix.Segments)}
	if ix.Kind != IndexPrimaryKey {
		return res, fmt.Errorf("table %s: index %q has kind %q, which this build cannot optimize", t.name, ix.Name, ix.Kind)
	}
	unindexed := ix.UnindexedFragments(m)
	var deltaRows int64
	for _, f := range unindexed {
		deltaRows += f.LiveRows()
	}
	merge := mergePlan(m, ix, len(unindexed) > 0, deltaRows, o.MaxSegments, o.MergeAll)
	if len(unindexed) == 0 && len(merge) == 0 {
		return res, nil
	}
	change := &IndexChange{Name: ix.Name}
	var seg IndexSegment
	var err error
	if len(merge) > 0 {
		seg, err = t.mergePKSegments(ctx, m, ix, merge)
		for _, s := range merge {
			change.Removed = append(change.Removed, s.ID)
		}
	} else {
		seg, err = t.buildPKSegment(ctx, m, ix.Columns, unindexed, nil)
	}
	if err != nil {
		return res, err
	}
	change.Added = []IndexSegment{seg}
	props := cloneMap(o.Properties)
	next, err := t.commitIndexChange(ctx, m, OpOptimizeIndex, change, props)
	if err != nil {
		return res, err
	}
	res.Version = next.Version
	res.FragmentsIndexed = len(unindexed)
	res.SegmentsMerged = len(merge)
	res.EntriesWritten = seg.Entries
	if nix := next.Index(ix.Name); nix != nil {
		res.SegmentsAfter = len(nix.Segments)
		res.UnindexedFragments = len(nix.UnindexedFragments(next))
	}
	return res, nil
}

// commitIndexChange commits an index change prepared against m, removing its segment files when
// the commit certainly failed.
func (t *Table) commitIndexChange(ctx context.Context, m *Manifest, op Operation, change *IndexChange, props map[string]string) (*Manifest, error) {
	props = cloneMap(props)
	if props == nil {
		props = make(map[string]string, 1)
	}
	props[PropIndexName] = change.Name
	txn := &Transaction{Operation: op, ReadVersion: m.Version, Properties: props, Index: change, base: m}
	next, err := t.Commit(ctx, txn)
	if err != nil {
		if CommitDefinitelyFailed(err) {
			t.deleteFiles(ctx, segmentFiles(change.Added))
		}
		return nil, err
	}
	return next, nil
}

// mergePlan picks the segments of ix an optimize merges into one, or none. deltaRows is the
// number of live rows of the unindexed fragments (the delta an optimize adds), delta whether
// there are any.
//
// Segments are merged newest first, size-tiered: the newest segments (with the new delta) are
// merged until the next older segment is at least four times larger than everything merged so
// far and the index is back within maxSegments, so a large segment is rewritten only once the
// newer ones have grown to a quarter of it: an entry is rewritten O(log n) times over its life.
// Nothing is merged while the index stays within maxSegments, unless mergeAll. A segment more
// than half of whose entries are stale (rows of fragments rewritten since, or deleted rows, as far
// as the fragments' row counts tell) is merged whatever its size, to give their memory back.
func mergePlan(m *Manifest, ix *Index, delta bool, deltaRows int64, maxSegments int, mergeAll bool) []IndexSegment {
	segs := ix.Segments
	nDelta := 0
	if delta {
		nDelta = 1
	}
	if mergeAll {
		if len(segs)+nDelta < 2 {
			return nil
		}
		return slices.Clone(segs)
	}
	live := make(map[uint64]int64, len(m.Fragments))
	for _, f := range m.Fragments {
		live[f.ID] = f.LiveRows()
	}
	stale := func(s IndexSegment) bool {
		cov, ok := s.coverage()
		if !ok || s.Entries == 0 {
			return false
		}
		var n int64
		it := cov.Iterator()
		for it.HasNext() {
			n += live[uint64(it.Next())]
		}
		return n*2 < s.Entries
	}
	oldestStale := -1
	for i, s := range segs {
		if stale(s) {
			oldestStale = i
			break
		}
	}
	if len(segs)+nDelta <= maxSegments && oldestStale < 0 {
		return nil
	}
	acc, first := deltaRows, len(segs)
	for i := len(segs) - 1; i >= 0; i-- {
		// Stopping here keeps segments 0..i and adds the merged one.
		if i+2 <= maxSegments && segs[i].Entries >= 4*acc {
			break
		}
		acc += segs[i].Entries
		first = i
	}
	if oldestStale >= 0 && oldestStale < first {
		first = oldestStale
	}
	picked := segs[first:]
	if len(picked)+nDelta < 2 && (len(picked) == 0 || !stale(picked[0])) {
		return nil
	}
	return slices.Clone(picked)
}

// buildPKSegment reads the key columns of frags (fragments of m) and writes a segment holding an
// entry for every live row, covering frags. extra entries, when given, are added (a merge).
func (t *Table) buildPKSegment(ctx context.Context, m *Manifest, cols []string, frags []Fragment, extra []pkEntry) (IndexSegment, error) {
	es, err := t.scanKeyEntries(ctx, m, cols, frags)
	if err != nil {
		return IndexSegment{}, err
	}
	es = append(es, extra...)
	sortEntries(es)
	cover := fragmentBitmap(frags)
	return t.writePKSegment(ctx, es, cover, m.Version)
}

// scanKeyEntries returns a (key, address) entry for every live row of frags.
func (t *Table) scanKeyEntries(ctx context.Context, m *Manifest, cols []string, frags []Fragment) ([]pkEntry, error) {
	if len(frags) == 0 {
		return nil, nil
	}
	var n int64
	for _, f := range frags {
		n += f.LiveRows()
	}
	es := make([]pkEntry, 0, n)
	s, err := t.scanFragments(ctx, m, frags, ScanOptions{Columns: cols, WithRowAddresses: true})
	if err != nil {
		return nil, err
	}
	defer s.Release()
	for s.Next() {
		rec := s.RecordBatch()
		enc, err := expr.NewKeyEncoder(rec, cols)
		if err != nil {
			return nil, fmt.Errorf("table %s: index: %w", t.name, err)
		}
		addrs := s.RowAddresses()
		for i := 0; i < int(rec.NumRows()); i++ {
			k, ok := enc.Key(i)
			if !ok {
				continue // a null key is never looked up
			}
			es = append(es, pkEntry{key: k, addr: addrs[i]})
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return es, nil
}

// mergePKSegments writes one segment holding the still-valid entries of segs (entries of live,
// covered fragments whose rows are not deleted at m) plus entries for every fragment of m that no
// other segment of ix covers (the unindexed ones, and those only a bitmap-less segment held).
func (t *Table) mergePKSegments(ctx context.Context, m *Manifest, ix *Index, segs []IndexSegment) (IndexSegment, error) {
	merged := make(map[string]bool, len(segs))
	for _, s := range segs {
		merged[s.ID] = true
	}
	others := roaring.New() // covered by a segment that stays
	for i := range ix.Segments {
		if merged[ix.Segments[i].ID] {
			continue
		}
		if cov, ok := ix.Segments[i].coverage(); ok {
			others.Or(cov)
		}
	}
	live := liveFragmentBitmap(m)
	byID := fragmentsByID(m)
	cover := roaring.New()
	var es []pkEntry
	for i := range segs {
		seg := &segs[i]
		cov, ok := seg.coverage()
		if !ok {
			continue // nothing it holds is provably complete; its fragments are rescanned
		}
		cov.And(live)
		cov.AndNot(others)
		if cov.IsEmpty() {
			continue
		}
		ps, err := t.loadPKSegment(ctx, seg)
		if err != nil {
			return IndexSegment{}, err
		}
		if !ps.keysCurrent(m, ix.Columns) {
			continue // keys of an older encoding: its fragments are rescanned
		}
		dels := make(map[uint64]*roaring.Bitmap)
		for j := 0; j < ps.len(); j++ {
			addr := ps.addrs[j]
			frag, off := rowset.SplitAddress(addr)
			if frag > rowset.MaxFragmentID || !cov.Contains(uint32(frag)) {
				continue
			}
			d, ok := dels[frag]
			if !ok {
				if d, err = t.cachedDeletions(ctx, byID[frag]); err != nil {
					return IndexSegment{}, err
				}
				dels[frag] = d
			}
			if !d.Contains(off) {
				es = append(es, pkEntry{key: ps.key(j), addr: addr})
			}
		}
		cover.Or(cov)
	}
	var scan []Fragment
	for _, f := range m.Fragments {
		if f.ID <= rowset.MaxFragmentID && !cover.Contains(uint32(f.ID)) && !others.Contains(uint32(f.ID)) {
			scan = append(scan, f)
		}
	}
	fresh, err := t.scanKeyEntries(ctx, m, ix.Columns, scan)
	if err != nil {
		return IndexSegment{}, err
	}
	es = append(es, fresh...)
	cover.Or(fragmentBitmap(scan))
	sortEntries(es)
	return t.writePKSegment(ctx, es, cover, m.Version)
}
