package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Filtered and partial scans: the part of a scan that reads only some of a version's fragments
// (ScanOptions.Fragments, the endpoints of a parallel read), drops extra rows (ScanOptions.
// Exclude, base rows a MemWAL row supersedes) and applies a row filter (ScanOptions.Filter, the
// "filter" of a DoGet ticket).
//
// A filter is applied in two steps. Before a fragment's rows are decoded, the Parquet statistics
// of each row group (min, max, null count of every column chunk) decide whether any row of it can
// match; a row group that cannot is never read, and a fragment none of whose row groups can is
// skipped after its footer. Then the filter is evaluated on every decoded row and only the rows
// for which it is true are returned. Pruning is conservative: a row group is skipped only when
// its statistics prove that the filter is false or unknown for every row, so a filtered scan
// returns exactly the rows a full scan followed by the filter would.

// ScanStats counts what a scan read and what its filter let it skip.
type ScanStats struct {
	// FragmentsRead counts the fragments whose rows were decoded (at least one row group).
	FragmentsRead int
	// FragmentsSkipped counts the fragments the filter's statistics excluded entirely, and
	// fragments whose every row is deleted or excluded.
	FragmentsSkipped int
	// RowGroupsRead and RowGroupsSkipped count the row groups decoded and pruned.
	RowGroupsRead    int
	RowGroupsSkipped int
}

// Stats returns what the scan has read and skipped so far.
func (s *Scanner) Stats() ScanStats { return s.stats }

// selectFragments returns the fragments of m that ids names, in m's order; ids nil means all.
// An id m does not have is an error wrapping ErrFragmentNotFound.
func selectFragments(table string, m *Manifest, ids []uint64) ([]Fragment, error) {
	if ids == nil {
		return m.Fragments, nil
	}
	want := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := make([]Fragment, 0, len(ids))
	for _, f := range m.Fragments {
		if want[f.ID] {
			out = append(out, f)
			delete(want, f.ID)
		}
	}
	if len(want) > 0 {
		missing := make([]uint64, 0, len(want))
		for id := range want {
			missing = append(missing, id)
		}
		slices.Sort(missing)
		return nil, fmt.Errorf("table %s: %w: version %d has no fragment %v", table, ErrFragmentNotFound, m.Version, missing)
	}
	return out, nil
}

// rowFilter is a bound ScanOptions.Filter: it evaluates the predicate on the batches the scanner
// reads (the projected columns plus the ones only the filter needs) and projects the rows it
// keeps to the scan's output schema.
type rowFilter struct {
	pred  *Predicate
	ev    evaluator
	proj  []int // output column i is read column proj[i]
	out   *arrow.Schema
	alloc memory.Allocator
	// pruneFields are the columns pred reads whose statistics can prune (pruneKind).
	pruneFields map[string]arrow.Field
}

// planFilter extends the read columns fieldIdx (indices into full) with the columns only pred
// reads, and returns them with the bound filter; out is the scan's output schema. A nil pred
// returns fieldIdx unchanged and a nil filter.
func planFilter(table string, full *arrow.Schema, fieldIdx []int, out *arrow.Schema, pred *Predicate, alloc memory.Allocator) ([]int, *rowFilter, error) {
	if pred == nil {
		return fieldIdx, nil, nil
	}
	if err := pred.Validate(full); err != nil {
		return nil, nil, fmt.Errorf("table %s: %w", table, err)
	}
	read := slices.Clone(fieldIdx)
	for _, c := range pred.Columns() {
		j := full.FieldIndices(c)[0] // Validate checked that it exists
		if !slices.Contains(read, j) {
			read = append(read, j)
		}
	}
	fields := make([]arrow.Field, len(read))
	for i, j := range read {
		fields[i] = full.Field(j)
	}
	md := full.Metadata()
	readSchema := arrow.NewSchema(fields, &md)
	ev, err := pred.bind(readSchema)
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: %w: %w", table, ErrInvalidPredicate, err)
	}
	proj := make([]int, len(fieldIdx))
	for i := range fieldIdx {
		proj[i] = i // the output columns come first in read, in order
	}
	pf := make(map[string]arrow.Field)
	for _, c := range pred.Columns() {
		if f := full.Field(full.FieldIndices(c)[0]); pruneKind(f) != 0 {
			pf[c] = f
		}
	}
	return read, &rowFilter{pred: pred, ev: ev, proj: proj, out: out, alloc: alloc, pruneFields: pf}, nil
}

// apply returns the rows of rec (a batch of the read schema, which it releases) for which the
// filter is true, projected to the output schema; nil when none is.
func (f *rowFilter) apply(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	defer rec.Release()
	match, err := matchRows(f.ev, rec)
	if err != nil {
		return nil, fmt.Errorf("evaluate filter %s: %w", f.pred, err)
	}
	keep := make([]int32, 0, len(match))
	for i, ok := range match {
		if ok {
			keep = append(keep, int32(i))
		}
	}
	if len(keep) == 0 {
		return nil, nil
	}
	cols := make([]arrow.Array, len(f.proj))
	for i, j := range f.proj {
		cols[i] = rec.Column(j)
	}
	projected := array.NewRecordBatch(f.out, cols, rec.NumRows())
	if len(keep) == len(match) {
		return projected, nil
	}
	defer projected.Release()
	return selectRows(ctx, f.alloc, projected, keep)
}

// emit makes rec (a conformed batch of the read schema, owned by the scanner) the current batch,
// through the filter when there is one. It reports whether there is a batch to return.
func (s *Scanner) emit(rec arrow.RecordBatch) bool {
	if s.filter == nil {
		s.cur = rec
		return true
	}
	out, err := s.filter.apply(s.ctx, rec)
	if err != nil {
		s.err = fmt.Errorf("table %s: fragment %d: %w", s.t.name, s.openID, err)
		return false
	}
	s.cur = out
	return out != nil
}

// rowGroupRun is a run of consecutive row groups of a data file read by one record reader, and
// the fragment offset of its first row.
type rowGroupRun struct {
	groups []int
	start  int64
}

// planRuns returns the runs of row groups of pr to read: all of them as one run without a
// filter, else the row groups the filter's statistics cannot exclude, grouped into consecutive
// runs (a record reader's batches may span row groups, and deletions are located by offset).
func (s *Scanner) planRuns(pr *file.Reader, fr *pqarrow.FileReader) []rowGroupRun {
	md := pr.MetaData()
	n := md.NumRowGroups()
	if s.filter == nil {
		s.stats.RowGroupsRead += n
		return []rowGroupRun{{start: 0}} // nil groups: every row group
	}
	leaves := make(map[string]int) // top-level leaf column name -> Parquet column index
	for i := range fr.Manifest.Fields {
		if f := &fr.Manifest.Fields[i]; f.IsLeaf() {
			leaves[f.Field.Name] = f.ColIndex
		}
	}
	var runs []rowGroupRun
	var offset int64
	prev := -2
	for g := 0; g < n; g++ {
		rg := md.RowGroup(g)
		rows := rg.NumRows()
		if !mayMatch(s.filter.pred, rg, leaves, s.filter.pruneFields, true) {
			s.stats.RowGroupsSkipped++
			offset += rows
			continue
		}
		s.stats.RowGroupsRead++
		if prev == g-1 && len(runs) > 0 {
			runs[len(runs)-1].groups = append(runs[len(runs)-1].groups, g)
		} else {
			runs = append(runs, rowGroupRun{groups: []int{g}, start: offset})
		}
		prev = g
		offset += rows
	}
	return runs
}

// openRun starts the record reader of the next planned run of the open fragment; false when
// every run has been read.
func (s *Scanner) openRun() (bool, error) {
	if len(s.runs) == 0 {
		return false, nil
	}
	run := s.runs[0]
	s.runs = s.runs[1:]
	if s.rr != nil {
		s.rr.Release()
		s.rr = nil
	}
	rr, err := s.fr.GetRecordReader(s.ctx, s.leafCols, run.groups)
	if err != nil {
		return false, fmt.Errorf("table %s: read fragment %d: %w", s.t.name, s.openID, err)
	}
	s.rr, s.offset = rr, run.start
	return true, nil
}

// withExclusions returns dels plus the offsets of fragment f that exclude holds (dels itself,
// unchanged, when it holds none).
func withExclusions(dels *roaring.Bitmap, exclude *RowSet, f Fragment) *roaring.Bitmap {
	ex := exclude.Offsets(f.ID)
	if ex == nil || ex.IsEmpty() {
		return dels
	}
	return roaring.Or(dels, ex)
}

// LocateKeys returns the addresses of the live rows of version m whose primary key (encoded by
// KeyEncoder) is one of keys: through the primary-key index where it covers a fragment, by
// scanning the key columns elsewhere. A MemWAL read uses it to find the base rows its rows
// supersede.
func (t *Table) LocateKeys(ctx context.Context, m *Manifest, keys map[string]struct{}) (*RowSet, error) {
	rows, _, err := t.lookupKeys(ctx, m, keys)
	return rows, err
}

// mayMatch reports whether pred can be want (true or false, never unknown) for some row of row
// group rg, judging by its column statistics: false only when the statistics prove it cannot.
// leaves maps a column name to its Parquet column index; fields holds the columns whose
// statistics may be compared (pruneKind).
func mayMatch(p *Predicate, rg *metadata.RowGroupMetaData, leaves map[string]int, fields map[string]arrow.Field, want bool) bool {
	switch p.Op {
	case PredAnd, PredOr:
		// AND is true when every argument is, false when one is; OR the other way round.
		every := (p.Op == PredAnd) == want
		for _, a := range p.Args {
			m := mayMatch(a, rg, leaves, fields, want)
			if every && !m {
				return false
			}
			if !every && m {
				return true
			}
		}
		return every
	case PredNot:
		return mayMatch(p.Args[0], rg, leaves, fields, !want)
	}
	st := columnStats(rg, leaves, p.Column)
	if st == nil {
		return true // no statistics: anything is possible
	}
	rows := rg.NumRows()
	switch p.Op {
	case PredIsNull, PredIsNotNull:
		if !st.HasNullCount() {
			return true
		}
		someNull, someValue := st.NullCount() > 0, st.NullCount() < rows
		if (p.Op == PredIsNull) == want {
			return someNull
		}
		return someValue
	}
	if st.HasNullCount() && st.NullCount() >= rows {
		return false // every value is null: a comparison is unknown for every row
	}
	field, ok := fields[p.Column]
	if !ok {
		return true
	}
	k := pruneKind(field)
	lo, hi, ok := statRange(st, k)
	if !ok {
		return true
	}
	if p.Op == PredIn {
		if !want {
			return true // conservative: "not in" is rarely provable from a range
		}
		for _, v := range p.Values {
			if v == nil {
				continue
			}
			lit, err := convertLiteral(field, k, v)
			if err != nil {
				return true
			}
			if compareLit(k, lo, lit) <= 0 && compareLit(k, lit, hi) <= 0 {
				return true
			}
		}
		return false
	}
	lit, err := convertLiteral(field, k, p.Value)
	if err != nil {
		return true
	}
	cLo, cHi := compareLit(k, lo, lit), compareLit(k, hi, lit) // lo ? lit, hi ? lit
	op := p.Op
	if !want {
		op = negateOp(op)
	}
	switch op {
	case PredEq:
		return cLo <= 0 && cHi >= 0
	case PredNe:
		return !(cLo == 0 && cHi == 0)
	case PredLt:
		return cLo < 0
	case PredLe:
		return cLo <= 0
	case PredGt:
		return cHi > 0
	case PredGe:
		return cHi >= 0
	}
	return true
}

// negateOp returns the comparison that is true exactly where op is false (for non-null values).
func negateOp(op PredicateOp) PredicateOp {
	switch op {
	case PredEq:
		return PredNe
	case PredNe:
		return PredEq
	case PredLt:
		return PredGe
	case PredLe:
		return PredGt
	case PredGt:
		return PredLe
	case PredGe:
		return PredLt
	}
	return op
}

// columnStats returns the statistics of column name in rg, or nil when the file has no such
// top-level leaf column or no statistics for it.
func columnStats(rg *metadata.RowGroupMetaData, leaves map[string]int, name string) metadata.TypedStatistics {
	ci, ok := leaves[name]
	if !ok {
		return nil
	}
	cc, err := rg.ColumnChunk(ci)
	if err != nil {
		return nil
	}
	if set, err := cc.StatsSet(); err != nil || !set {
		return nil
	}
	st, err := cc.Statistics()
	if err != nil {
		return nil
	}
	return st
}

// statRange returns a column chunk's min and max as literals of kind k. Only kinds whose
// Parquet statistics order like the predicate's comparison are used: signed integers (and
// dates) and strings. Floats (NaN ordering) and unsigned integers (signed physical storage) are
// never pruned on.
func statRange(st metadata.TypedStatistics, k valueKind) (lo, hi literal, ok bool) {
	if !st.HasMinMax() {
		return literal{}, literal{}, false
	}
	switch s := st.(type) {
	case *metadata.Int32Statistics:
		if k == kindInt {
			return literal{i: int64(s.Min())}, literal{i: int64(s.Max())}, true
		}
	case *metadata.Int64Statistics:
		if k == kindInt {
			return literal{i: s.Min()}, literal{i: s.Max()}, true
		}
	case *metadata.ByteArrayStatistics:
		if k == kindString {
			return literal{s: string(s.Min())}, literal{s: string(s.Max())}, true
		}
	}
	return literal{}, literal{}, false
}

// pruneKind returns the comparison kind the statistics of column f are used with, or 0 when
// they are not used (see statRange; timestamps and times may be stored in another unit than the
// column's, so only plain integers and date32 are).
func pruneKind(f arrow.Field) valueKind {
	switch f.Type.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.DATE32:
		return kindInt
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		return kindString
	}
	return 0
}

// compareLit compares two literals of kind k.
func compareLit(k valueKind, a, b literal) int {
	switch k {
	case kindInt:
		return compareOrdered(a.i, b.i)
	case kindString:
		return strings.Compare(a.s, b.s)
	}
	return 0
}

func compareOrdered(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FilterBatch returns the rows of rec for which pred is true (nil when none is), for callers that
// filter rows a Scanner did not read (a MemWAL read). rec must hold every column pred reads; the
// result is the caller's.
func FilterBatch(ctx context.Context, pred *Predicate, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	match, err := pred.Match(rec)
	if err != nil {
		return nil, fmt.Errorf("evaluate filter %s: %w", pred, err)
	}
	bb := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer bb.Release()
	n := 0
	for _, ok := range match {
		bb.Append(ok)
		if ok {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	if n == len(match) {
		rec.Retain()
		return rec, nil
	}
	mask := bb.NewBooleanArray()
	defer mask.Release()
	return compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
}
