package parquetfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// RecordReader reads the record batches of some columns and row groups of a data file, decoding
// its columns in parallel when asked to. It does what pqarrow's record reader does with
// ArrowReadProperties.Parallel, except that every goroutine it starts runs through panics.Recover:
// pqarrow's decode goroutines have no recover, so a panic decoding a column (a corrupt page, a
// bug) would end the process; here it ends the read with an error. Not safe for concurrent use.
type RecordReader struct {
	readers   []*pqarrow.ColumnReader
	schema    *arrow.Schema
	mem       memory.Allocator
	batchSize int64
	parallel  bool
	cur       arrow.RecordBatch
	err       error

	// Sizing by bytes (SizeBatches): the Arrow bytes a batch aims at (0: batchSize rows each),
	// the most rows of one, and the bytes per row of the last batch decoded.
	targetBytes, maxRows, bytesPerRow int64
}

var _ array.RecordReader = (*RecordReader)(nil)

// NewRecordReader returns a reader of the leaf columns cols (all when nil) and row groups
// rowGroups (all when nil) of fr, in batches of fr.Props.BatchSize rows; fr.Props.Parallel must be
// false (the readers open one after another, with no goroutine of pqarrow's). parallel decodes
// the columns of each batch in a goroutine each. mem (memory.DefaultAllocator when nil) holds a
// column's batch when it spans pages that must be joined. Release it when done.
func NewRecordReader(ctx context.Context, fr *pqarrow.FileReader, cols, rowGroups []int, parallel bool, mem memory.Allocator) (*RecordReader, error) {
	if fr.Props.Parallel {
		return nil, errors.New("parquetfile: NewRecordReader of a file reader with Parallel set")
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	md := fr.ParquetReader().MetaData()
	if rowGroups == nil {
		rowGroups = make([]int, md.NumRowGroups())
		for i := range rowGroups {
			rowGroups[i] = i
		}
	}
	if cols == nil {
		cols = make([]int, md.Schema.NumColumns())
		for i := range cols {
			cols[i] = i
		}
	}
	var nrows int64
	for _, rg := range rowGroups {
		if rg < 0 || rg >= md.NumRowGroups() {
			return nil, fmt.Errorf("parquetfile: row group %d of a file of %d", rg, md.NumRowGroups())
		}
		nrows += md.RowGroup(rg).NumRows()
	}
	r := &RecordReader{mem: mem, parallel: parallel}
	err := panics.Recover(nil, "open parquet columns", func() error {
		var err error
		r.readers, r.schema, err = fr.GetFieldReaders(ctx, cols, rowGroups)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(r.readers) == 0 {
		return nil, errors.New("parquetfile: no column to read")
	}
	r.batchSize = nrows
	if fr.Props.BatchSize > 0 {
		r.batchSize = min(fr.Props.BatchSize, int64(bitutil.NextPowerOf2(int(nrows))))
	}
	return r, nil
}

// SizeBatches makes the reader size its batches by their Arrow memory (arrowschema.RecordBytes):
// the next batch holds first rows, and each one after about target bytes, at most maxRows rows,
// by the bytes per row of the batch before it. A Parquet file's encoded size says little of a
// batch's decoded one (a dictionary of long strings decodes to many times its pages), so only
// what was decoded sizes the batches that follow.
func (r *RecordReader) SizeBatches(target, maxRows, first int64) {
	r.targetBytes, r.maxRows, r.batchSize = target, max(1, maxRows), max(1, first)
}

// BytesPerRow returns the Arrow bytes per row of the last batch read; 0 before the first.
func (r *RecordReader) BytesPerRow() int64 { return r.bytesPerRow }

// BatchRows returns the rows of a batch of about target bytes at bytesPerRow bytes a row: at
// least 1 and at most maxRows.
func BatchRows(target, maxRows, bytesPerRow int64) int64 {
	return min(max(1, maxRows), max(1, target/max(1, bytesPerRow)))
}

// Schema returns the schema of the batches.
func (r *RecordReader) Schema() *arrow.Schema { return r.schema }

// Next reads the next batch; false at the end or on an error (Err).
func (r *RecordReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	if r.err != nil || r.readers == nil {
		return false
	}
	cols := make([]arrow.Array, len(r.readers))
	errs := make([]error, len(r.readers))
	read := func(i int) {
		errs[i] = panics.Recover(nil, "decode parquet column "+r.schema.Field(i).Name, func() error {
			var err error
			cols[i], err = r.readColumn(r.readers[i])
			return err
		})
	}
	if r.parallel && len(r.readers) > 1 {
		var wg sync.WaitGroup
		for i := range r.readers {
			wg.Go(func() { read(i) })
		}
		wg.Wait()
	} else {
		for i := range r.readers {
			if read(i); errs[i] != nil {
				break
			}
		}
	}
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for _, err := range errs {
		if err != nil && (r.err == nil || errors.Is(r.err, io.EOF)) {
			r.err = err // the first error that is not the end, else the end
		}
	}
	if r.err != nil {
		return false
	}
	r.cur = array.NewRecordBatch(r.schema, cols, -1)
	if n := r.cur.NumRows(); n > 0 {
		r.bytesPerRow = max(1, arrowschema.RecordBytes(r.cur)/n)
		if r.targetBytes > 0 {
			r.batchSize = BatchRows(r.targetBytes, r.maxRows, r.bytesPerRow)
		}
	}
	return true
}

// readColumn reads the next batch of one column as one array; io.EOF at the end.
func (r *RecordReader) readColumn(cr *pqarrow.ColumnReader) (arrow.Array, error) {
	chunked, err := cr.NextBatch(r.batchSize)
	if err != nil {
		return nil, err
	}
	defer chunked.Release()
	switch chunks := chunked.Chunks(); {
	case chunked.Len() == 0:
		return nil, io.EOF
	case len(chunks) == 1:
		chunks[0].Retain()
		return chunks[0], nil
	default:
		return array.Concatenate(chunks, r.mem)
	}
}

// RecordBatch returns the current batch, valid until the next call to Next or Release.
func (r *RecordReader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record returns the current batch.
//
// Deprecated: Use [RecordReader.RecordBatch] instead.
func (r *RecordReader) Record() arrow.RecordBatch { return r.cur }

// Err returns the error that ended the read, nil at its end.
func (r *RecordReader) Err() error {
	if errors.Is(r.err, io.EOF) {
		return nil
	}
	return r.err
}

// Retain does nothing: a RecordReader has one owner, who releases it.
func (r *RecordReader) Retain() {}

// Release releases the current batch and the column readers.
func (r *RecordReader) Release() {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	for _, cr := range r.readers {
		cr.Release()
	}
	r.readers = nil
}
