package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/parquetfile"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/internal/background"
	"github.com/flight-sink/flight-sink/objstore"
)

// ScanOptions select what a scan reads.
type ScanOptions struct {
	// Version to read; 0 reads the latest.
	Version uint64
	// Columns to project, in the order wanted; empty reads every column.
	Columns []string
	// BatchSize is the most rows per record batch. Default 65,536.
	BatchSize int64
	// BatchBytes is the Arrow bytes a record batch aims at: each batch holds BatchBytes over the
	// Arrow bytes per row of the batch decoded before it, at least one row and at most
	// BatchSize; the scan's first batch holds at most 1,024 rows and BatchBytes over the
	// fragment's bytes per row estimated from the Parquet column chunks of the columns read
	// (uncompressed). Default DefaultScanBatchBytes.
	BatchBytes int64
	// WithRowAddresses makes the scanner report each row's address (Scanner.RowAddresses), as
	// DeleteRows takes them. Not with Filter.
	WithRowAddresses bool
	// Fragments, when not nil, restricts the scan to these fragments of the version (in the
	// version's order); an id the version lacks is ErrFragmentNotFound (scan_filter.go).
	Fragments []uint64
	// Exclude holds row addresses to leave out as if deleted (base rows a MemWAL read supersedes).
	Exclude *rowset.Set
	// Filter, when set, returns only the rows for which it is true, skipping row groups and
	// fragments by their Parquet statistics (scan_filter.go).
	Filter *expr.Predicate
	// Allocator holds the returned batches' buffers (default: the table's Options.Allocator).
	// A pooling allocator (internal/arrowpool) suits a consumer that releases each batch before
	// it reads many more, and keeps no reference into a batch it has released.
	Allocator memory.Allocator
	// Background decodes one column at a time, each batch in a background slot
	// (background.Run), on a local store: for reads no client waits on, such as compaction's.
	// On a remote store a batch's decode waits on range reads, which must not hold a slot, so
	// there it reads as any scan does.
	Background bool
}

// Scan opens a streaming read of one version. Fragments are read one at a time, batch by batch,
// so memory stays bounded by a batch and a file footer whatever the table's size. The caller must
// Release the returned reader.
func (t *Table) Scan(ctx context.Context, o ScanOptions) (*Scanner, error) {
	var m *Manifest
	var err error
	if o.Version == 0 {
		m, err = t.Latest(ctx)
	} else {
		m, err = t.Manifest(ctx, o.Version)
	}
	if err != nil {
		return nil, err
	}
	return t.ScanManifest(ctx, m, o)
}

// ScanManifest is Scan of an already loaded manifest (o.Version is ignored).
func (t *Table) ScanManifest(ctx context.Context, m *Manifest, o ScanOptions) (*Scanner, error) {
	full := m.ArrowSchema()
	fieldIdx := make([]int, 0, full.NumFields())
	if len(o.Columns) == 0 {
		for i := range full.Fields() {
			fieldIdx = append(fieldIdx, i)
		}
	} else {
		seen := make(map[string]bool, len(o.Columns))
		for _, c := range o.Columns {
			if seen[c] {
				return nil, fmt.Errorf("table %s: %w: column %q is projected twice", t.name, arrowschema.ErrSchemaMismatch, c)
			}
			seen[c] = true
			js := full.FieldIndices(c)
			if len(js) == 0 {
				return nil, fmt.Errorf("table %s: %w: no column %q in %s", t.name, arrowschema.ErrSchemaMismatch, c, arrowschema.FieldList(full))
			}
			fieldIdx = append(fieldIdx, js[0])
		}
	}
	fields := make([]arrow.Field, len(fieldIdx))
	for i, j := range fieldIdx {
		fields[i] = full.Field(j)
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 64 * 1024
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultScanBatchBytes
	}
	md := full.Metadata()
	out := arrow.NewSchema(fields, &md)
	if o.Filter != nil && o.WithRowAddresses {
		return nil, fmt.Errorf("table %s: a scan cannot both filter and report row addresses", t.name)
	}
	alloc := o.Allocator
	if alloc == nil {
		alloc = t.opts.Allocator
	}
	frags, err := selectFragments(t.name, m, o.Fragments)
	if err != nil {
		return nil, err
	}
	readIdx, filter, err := planFilter(t.name, full, fieldIdx, out, o.Filter, t.opts.Allocator)
	if err != nil {
		return nil, err
	}
	schema := out
	if filter != nil { // the filter's own columns are read too, and dropped by it
		fields = fields[:0]
		for _, j := range readIdx {
			fields = append(fields, full.Field(j))
		}
		schema = arrow.NewSchema(fields, &md)
	}
	return &Scanner{
		ctx: ctx, t: t, frags: frags, fieldIdx: readIdx, batchSize: o.BatchSize, batchBytes: o.BatchBytes, alloc: alloc,
		schema: schema, out: out, refs: 1, withAddrs: o.WithRowAddresses, filter: filter, exclude: o.Exclude,
		partitions: NewPartitionPruner(m, o.Filter),
		background: o.Background && t.localStore(),
	}, nil
}

// scanFragments is ScanManifest restricted to frags (fragments of m).
func (t *Table) scanFragments(ctx context.Context, m *Manifest, frags []Fragment, o ScanOptions) (*Scanner, error) {
	s, err := t.ScanManifest(ctx, m, o)
	if err != nil {
		return nil, err
	}
	s.frags = frags
	return s, nil
}

// Scanner streams the record batches of one version. It implements array.RecordReader.
type Scanner struct {
	ctx        context.Context
	t          *Table
	frags      []Fragment
	fieldIdx   []int
	batchSize  int64
	batchBytes int64
	// rowBytes is the Arrow bytes per row of the last batch decoded (0 before the first): it
	// sizes the batches of the fragments and runs that follow.
	rowBytes   int64
	alloc      memory.Allocator // ScanOptions.Allocator
	schema     *arrow.Schema    // what is read: out plus the columns only the filter needs
	out        *arrow.Schema    // what is returned
	refs       int64
	filter     *rowFilter       // nil: every row
	partitions *PartitionPruner // the filter on the partition tuples; nil: none
	exclude    *rowset.Set
	stats      ScanStats
	background bool // ScanOptions.Background

	next     int // next fragment to open
	file     objstore.ReadAtSeekCloser
	pr       *file.Reader
	fr       *pqarrow.FileReader
	leafCols []int
	openID   uint64        // the open fragment's id
	runs     []rowGroupRun // row groups of the open fragment still to read
	rr       *parquetfile.RecordReader
	cur      arrow.RecordBatch
	err      error
	done     bool

	// Deletions: the open fragment's deleted offsets and the offset of its next raw batch.
	dels   *roaring.Bitmap
	offset int64
	// skip, when it holds a fragment's id, is the set of that fragment's offsets to leave out in
	// place of its deletion file (a change feed reads the rows a version deleted: changes.go).
	skip      map[uint64]*roaring.Bitmap
	withAddrs bool
	addrs     []uint64 // addresses of cur's rows when withAddrs
}

var _ array.RecordReader = (*Scanner)(nil)

// Schema returns the projected schema.
func (s *Scanner) Schema() *arrow.Schema { return s.out }

// Retain increases the reference count.
func (s *Scanner) Retain() { atomic.AddInt64(&s.refs, 1) }

// Release decreases the reference count and closes the scan at zero.
func (s *Scanner) Release() {
	if atomic.AddInt64(&s.refs, -1) == 0 {
		s.closeFragment()
		if s.cur != nil {
			s.cur.Release()
			s.cur = nil
		}
	}
}

// Err returns the first error the scan met.
func (s *Scanner) Err() error { return s.err }

// RecordBatch returns the current batch, valid until the next call to Next.
func (s *Scanner) RecordBatch() arrow.RecordBatch { return s.cur }

// RowAddresses returns the address of each row of the current batch (ScanOptions.
// WithRowAddresses must be set), valid until the next call to Next.
func (s *Scanner) RowAddresses() []uint64 { return s.addrs }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (s *Scanner) Record() arrow.RecordBatch { return s.cur }

// Next advances to the next non-empty batch.
func (s *Scanner) Next() bool {
	if !s.background {
		return s.advance()
	}
	var more bool
	if err := background.Run(s.ctx, func() error { more = s.advance(); return nil }); err != nil {
		s.err = err
		return false
	}
	return more
}

func (s *Scanner) advance() bool {
	if s.cur != nil {
		s.cur.Release()
		s.cur = nil
	}
	for !s.done && s.err == nil {
		if s.rr == nil {
			if s.next >= len(s.frags) {
				s.done = true
				return false
			}
			if f := s.frags[s.next]; f.PhysicalRows > 0 && f.DeletedRows >= f.PhysicalRows {
				s.next++ // every row deleted: nothing to read
				continue
			}
			if !s.partitions.MayMatch(s.frags[s.next]) {
				s.stats.FragmentsPruned++ // its partition cannot match the filter: not opened
				s.next++
				continue
			}
			if err := s.openFragment(s.frags[s.next]); err != nil {
				s.err = err
				return false
			}
			s.next++
			if s.rr == nil {
				continue // the filter's statistics exclude every row group
			}
		}
		if s.rr.Next() {
			rec := s.rr.RecordBatch()
			start := s.offset
			s.offset += rec.NumRows()
			if rec.NumRows() == 0 {
				continue
			}
			keep := liveRows(s.dels, start, rec.NumRows())
			if keep != nil && len(keep) == 0 {
				continue // every row of this batch is deleted
			}
			if s.withAddrs {
				s.addrs = rowAddresses(s.addrs[:0], s.frags[s.next-1].ID, start, rec.NumRows(), keep)
			}
			// Stamp the table's field definitions (names, nullability, metadata, exact types) on
			// the batch.
			conf, err := arrowschema.ConformBatch(s.schema, rec)
			if err != nil {
				s.err = fmt.Errorf("table %s: read fragment %d: %w", s.t.name, s.frags[s.next-1].ID, err)
				return false
			}
			if keep != nil {
				sel, err := arrowschema.TakeRecord(s.alloc, conf, keep)
				conf.Release()
				if err != nil {
					s.err = fmt.Errorf("table %s: apply deletions to fragment %d: %w", s.t.name, s.frags[s.next-1].ID, err)
					return false
				}
				if s.emit(sel) {
					return true
				}
				continue
			}
			if s.emit(conf) {
				return true
			}
			continue
		}
		if err := s.rr.Err(); err != nil {
			s.err = fmt.Errorf("table %s: read fragment %d: %w", s.t.name, s.frags[s.next-1].ID, err)
			return false
		}
		if more, err := s.openRun(); err != nil || more {
			s.err = err
			continue
		}
		s.closeFragment()
	}
	return false
}

func (s *Scanner) openFragment(f Fragment) error {
	if len(f.Files) != 1 {
		return fmt.Errorf("table %s: fragment %d has %d data files; this build reads one per fragment", s.t.name, f.ID, len(f.Files))
	}
	dels, ok := s.skip[f.ID]
	if !ok {
		var err error
		if dels, err = s.t.readDeletions(s.ctx, f); err != nil {
			return err
		}
	}
	s.dels, s.offset = withExclusions(dels, s.exclude, f), 0
	key := s.t.key(f.Files[0].Path)
	r, _, err := objstore.OpenReader(s.ctx, s.t.store, key)
	if err != nil {
		return fmt.Errorf("table %s: open fragment %d: %w", s.t.name, f.ID, err)
	}
	pr, err := file.NewParquetReader(r, file.WithReadProps(parquet.NewReaderProperties(s.alloc)))
	if err != nil {
		r.Close()
		return fmt.Errorf("table %s: open data file %s: %w", s.t.name, key, err)
	}
	props := pqarrow.ArrowReadProperties{BatchSize: s.batchSize} // columns decode in parallel in openRun
	fr, err := pqarrow.NewFileReader(pr, props, s.alloc)
	if err != nil {
		pr.Close()
		return fmt.Errorf("table %s: open data file %s: %w", s.t.name, key, err)
	}
	// GetRecordReader takes leaf (Parquet column) indices; a nested field has several. Columns are
	// found by name: a file holds the table's columns its writer was given (Writer), in table
	// order, and a column it does not hold (added after the file was written, or left out of
	// the write) is read as nulls by arrowschema.ConformBatch.
	inFile := make(map[string]int, len(fr.Manifest.Fields))
	for k := range fr.Manifest.Fields {
		inFile[fr.Manifest.Fields[k].Field.Name] = k
	}
	var cols []int
	for i := range s.fieldIdx {
		if k, ok := inFile[s.schema.Field(i).Name]; ok {
			cols = appendLeaves(cols, &fr.Manifest.Fields[k])
		}
	}
	if len(cols) == 0 {
		cols = appendLeaves(cols, &fr.Manifest.Fields[0]) // for the row count; arrowschema.ConformBatch drops it
	}
	rowBytes, maxChunk := chunkSizes(pr.MetaData(), cols)
	if maxChunk > scanStreamChunkBytes {
		// Column chunks too large to hold whole are read through a buffer of
		// scanStreamBufferBytes each: a batch's decode then holds a page per column, not a chunk.
		// The reader is reopened over the same file and footer (the first one holds nothing else).
		rp := parquet.NewReaderProperties(s.alloc)
		rp.BufferedStreamEnabled, rp.BufferSize = true, scanStreamBufferBytes
		pr, err = file.NewParquetReader(r, file.WithMetadata(pr.MetaData()), file.WithReadProps(rp))
		if err == nil {
			fr, err = pqarrow.NewFileReader(pr, props, s.alloc)
		}
		if err != nil {
			r.Close()
			return fmt.Errorf("table %s: open data file %s: %w", s.t.name, key, err)
		}
	}
	if rowBytes > 0 { // rows per batch: about batchBytes of them (ScanOptions.BatchBytes)
		fr.Props.BatchSize = min(s.batchSize, max(1, s.batchBytes/rowBytes))
	}
	s.file, s.pr, s.fr, s.leafCols, s.openID = r, pr, fr, cols, f.ID
	if s.runs = s.planRuns(pr, fr); len(s.runs) == 0 {
		s.stats.FragmentsSkipped++
		s.closeFragment()
		return nil
	}
	s.stats.FragmentsRead++
	if _, err = s.openRun(); err != nil {
		s.closeFragment()
	}
	return err
}

// DefaultScanBatchBytes is the Arrow bytes a scan batch aims at (ScanOptions.BatchBytes): with
// the read-ahead of one DoGet it bounds what a stream holds in bytes, whatever the width of a
// row.
const DefaultScanBatchBytes = 4 << 20

// A data file whose column chunks (compressed) of the columns read exceed scanStreamChunkBytes is
// read through a buffer of scanStreamBufferBytes per column instead of a chunk at a time.
const (
	scanStreamChunkBytes  = 8 << 20
	scanStreamBufferBytes = 1 << 20
)

// chunkSizes returns the uncompressed Parquet bytes per row of leaf columns cols over every row
// group of md (0 when md has no rows), and the largest compressed column chunk among them.
func chunkSizes(md *metadata.FileMetaData, cols []int) (rowBytes, maxChunk int64) {
	var total, rows int64
	for g := 0; g < md.NumRowGroups(); g++ {
		rg := md.RowGroup(g)
		rows += rg.NumRows()
		for _, c := range cols {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				continue
			}
			total += cc.TotalUncompressedSize()
			maxChunk = max(maxChunk, cc.TotalCompressedSize())
		}
	}
	if rows == 0 {
		return 0, maxChunk
	}
	return max(1, total/rows), maxChunk
}

// appendLeaves appends the Parquet leaf column indices under f, in schema order.
func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

// scanProbeRows is the most rows of a scan's first batch, read before any batch has told how many
// Arrow bytes a row of this scan holds (parquetfile.RecordReader.SizeBatches).
const scanProbeRows = 1024

// releaseReader releases the reader of the open run, keeping the bytes per row it measured.
func (s *Scanner) releaseReader() {
	if s.rr == nil {
		return
	}
	if b := s.rr.BytesPerRow(); b > 0 {
		s.rowBytes = b
	}
	s.rr.Release()
	s.rr = nil
}

func (s *Scanner) closeFragment() {
	s.releaseReader()
	if s.pr != nil {
		s.pr.Close() // closes the underlying file too
		s.pr = nil
	}
	s.file, s.fr, s.runs = nil, nil, nil
}

// ReadAll scans o fully into memory; for tests and small tables.
func (t *Table) ReadAll(ctx context.Context, o ScanOptions) ([]arrow.RecordBatch, error) {
	s, err := t.Scan(ctx, o)
	if err != nil {
		return nil, err
	}
	defer s.Release()
	var out []arrow.RecordBatch
	for s.Next() {
		r := s.RecordBatch()
		r.Retain()
		out = append(out, r)
	}
	if err := s.Err(); err != nil {
		for _, r := range out {
			r.Release()
		}
		return nil, err
	}
	return out, nil
}
