package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/parquetfile"
	"github.com/flight-sink/flight-sink/engine/rowset"
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
	// FragmentsSkipped counts the fragments the filter's statistics excluded entirely (only
	// their footer was read).
	FragmentsSkipped int
	// FragmentsPruned counts the fragments the filter excluded by their partition (a partitioned
	// table, scan_partition.go): none of their files was opened.
	FragmentsPruned int
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
	pred  *expr.Predicate
	bound *expr.Bound
	proj  []int // output column i is read column proj[i]
	out   *arrow.Schema
	alloc memory.Allocator
	// pruneFields are the columns pred reads whose statistics can prune (expr.PrunesOn).
	pruneFields map[string]arrow.Field
}

// planFilter extends the read columns fieldIdx (indices into full) with the columns only pred
// reads, and returns them with the bound filter; out is the scan's output schema. A nil pred
// returns fieldIdx unchanged and a nil filter.
func planFilter(table string, full *arrow.Schema, fieldIdx []int, out *arrow.Schema, pred *expr.Predicate, alloc memory.Allocator) ([]int, *rowFilter, error) {
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
	bound, err := pred.Bind(readSchema)
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: %w: %w", table, expr.ErrInvalidPredicate, err)
	}
	proj := make([]int, len(fieldIdx))
	for i := range fieldIdx {
		proj[i] = i // the output columns come first in read, in order
	}
	pf := make(map[string]arrow.Field)
	for _, c := range pred.Columns() {
		if f := full.Field(full.FieldIndices(c)[0]); expr.PrunesOn(f) {
			pf[c] = f
		}
	}
	return read, &rowFilter{pred: pred, bound: bound, proj: proj, out: out, alloc: alloc, pruneFields: pf}, nil
}

// apply returns the rows of rec (a batch of the read schema, which it releases) for which the
// filter is true, projected to the output schema; nil when none is.
func (f *rowFilter) apply(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	defer rec.Release()
	match, err := f.bound.Match(rec)
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
	return arrowschema.TakeRecord(f.alloc, projected, keep)
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
		if !expr.MayMatch(s.filter.pred, rg, leaves, s.filter.pruneFields, true) {
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
	s.releaseReader()
	parallel := !s.background && len(s.fieldIdx) > 1 && runtime.GOMAXPROCS(0) > 1
	rr, err := parquetfile.NewRecordReader(s.ctx, s.fr, s.leafCols, run.groups, parallel, s.alloc)
	if err != nil {
		return false, fmt.Errorf("table %s: read fragment %d: %w", s.t.name, s.openID, err)
	}
	// Batches of about batchBytes of Arrow memory: by the bytes per row decoded so far, or a
	// first batch of at most scanProbeRows rows (the file's estimate can be many times short).
	first := min(s.fr.Props.BatchSize, scanProbeRows)
	if s.rowBytes > 0 {
		first = parquetfile.BatchRows(s.batchBytes, s.batchSize, s.rowBytes)
	}
	rr.SizeBatches(s.batchBytes, s.batchSize, first)
	s.rr, s.offset = rr, run.start
	return true, nil
}

// withExclusions returns dels plus the offsets of fragment f that exclude holds (dels itself,
// unchanged, when it holds none).
func withExclusions(dels *roaring.Bitmap, exclude *rowset.Set, f Fragment) *roaring.Bitmap {
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
func (t *Table) LocateKeys(ctx context.Context, m *Manifest, keys map[string]struct{}) (*rowset.Set, error) {
	rows, _, err := t.lookupKeys(ctx, m, keys)
	return rows, err
}
