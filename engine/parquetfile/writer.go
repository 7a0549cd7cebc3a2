// Package parquetfile writes a table's data files: Parquet files of a table's stored schema,
// column-parallel for flat schemas, in the Parquet shape of schemas pqarrow cannot encode as they
// are, with the table's Arrow schema stored as ARROW:schema so that readers restore its types.
package parquetfile

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"golang.org/x/sync/errgroup"

	"github.com/flight-sink/flight-sink/internal/background"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// Parquet encoding is the sink's CPU bound (zstd and the byte-array encoders), and pqarrow
// encodes one column after another. For tables whose columns are all flat (no struct, list, map,
// dictionary or extension types) a file is written here instead with the columns of each row
// group encoded concurrently: the file has the same schema, metadata and row groups as one from
// pqarrow.FileWriter, only its column chunks are produced in parallel. Nested tables keep
// pqarrow's writer, whose level building handles them.
//
// Rows are buffered until a row group is full; the full row group is encoded by a background
// goroutine, one goroutine per column (at most GOMAXPROCS at once), while the caller goes on
// adding the next row group's batches. Row groups reach the file in order.

// Writer writes one Parquet data file.
type Writer interface {
	// WriteBuffered adds rec's rows (of the file's schema) to the file.
	WriteBuffered(rec arrow.RecordBatch) error
	// Close finishes the file.
	Close() error
}

// flatSchema reports whether every column of s is a primitive leaf, so that its definition
// levels are 1 for a valid value and 0 for a null and it has no repetition levels.
func flatSchema(s *arrow.Schema) bool {
	for _, f := range s.Fields() {
		switch f.Type.(type) {
		case arrow.NestedType, *arrow.DictionaryType, arrow.ExtensionType:
			return false
		}
		if f.Type.ID() == arrow.NULL {
			return false
		}
	}
	return true
}

// NewWriter returns the writer of a Parquet file of schema (of stored types, StoredSchema)
// into out, the one every data file is written with: column-parallel for a flat schema, pqarrow's
// otherwise, in the Parquet shape of a schema with fixed-size lists (shape.go). The file
// stores schema as ARROW:schema. A background writer encodes in background slots
// (background.Run).
func NewWriter(schema *arrow.Schema, out io.Writer, props *parquet.WriterProperties, background bool) (Writer, error) {
	arrProps := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	shape, shaped := ParquetShape(schema)
	if !shaped && flatSchema(schema) && runtime.GOMAXPROCS(0) >= 2 && schema.NumFields() >= 2 {
		w, err := newParallelWriter(schema, out, props, arrProps)
		if err != nil {
			return nil, err
		}
		w.background = background
		return w, nil
	}
	if !shaped {
		// ARROW:schema is appended here, as ArrowSchemaValue makes it, rather than by
		// WithStoreSchema: one form of the stored schema for every data file.
		shape = schema
	}
	w, err := NewShapedWriter(schema, shape, out, props)
	if err != nil || !background {
		return w, err
	}
	return slotWriter{w}, nil
}

// slotWriter is a writer that encodes in the caller's goroutine, run in background slots.
type slotWriter struct{ w *ShapedWriter }

func (s slotWriter) WriteBuffered(rec arrow.RecordBatch) error {
	return background.Run(context.Background(), func() error { return s.w.WriteBuffered(rec) })
}

func (s slotWriter) Close() error {
	return background.Run(context.Background(), s.w.Close)
}

// parallelWriter writes a flat-schema Parquet file with column-parallel row group encoding.
type parallelWriter struct {
	schema   *arrow.Schema
	props    *parquet.WriterProperties
	arrProps pqarrow.ArrowWriterProperties
	fw       *file.Writer
	maxRows  int64

	pending     []arrow.RecordBatch // the open row group's rows
	pendingRows int64

	encoding chan error // result of the row group being encoded in the background, if any
	failed   error
	closed   bool

	background bool // each column's encoding takes a background slot (background.Run)
}

func newParallelWriter(schema *arrow.Schema, out io.Writer, props *parquet.WriterProperties, arrProps pqarrow.ArrowWriterProperties) (*parallelWriter, error) {
	pqSchema, err := pqarrow.ToParquet(schema, props, arrProps)
	if err != nil {
		return nil, err
	}
	// The same key-value metadata pqarrow writes: the schema's own, then the serialized Arrow
	// schema under ARROW:schema, so readers restore the exact Arrow types (time zones, etc.).
	meta := make(metadata.KeyValueMetadata, 0, schema.Metadata().Len()+1)
	for i, k := range schema.Metadata().Keys() {
		if err := meta.Append(k, schema.Metadata().Values()[i]); err != nil {
			return nil, err
		}
	}
	ser, err := ArrowSchemaValue(schema, props.Allocator())
	if err != nil {
		return nil, err
	}
	if err := meta.Append(ArrowSchemaKey, ser); err != nil {
		return nil, err
	}
	fw, err := file.NewParquetWriterWithError(out, pqSchema.Root(), file.WithWriterProps(props), file.WithWriteMetadata(meta))
	if err != nil {
		return nil, err
	}
	return &parallelWriter{schema: schema, props: props, arrProps: arrProps, fw: fw, maxRows: props.MaxRowGroupLength()}, nil
}

// WriteBuffered adds rec's rows; a row group is encoded once it holds MaxRowGroupLength rows.
// rec is retained until its row group is written.
func (p *parallelWriter) WriteBuffered(rec arrow.RecordBatch) error {
	if p.closed {
		return fmt.Errorf("parquet writer: write after close")
	}
	if !rec.Schema().Equal(p.schema) {
		return fmt.Errorf("parquet writer: record schema %s does not match the file's %s", rec.Schema(), p.schema)
	}
	for off := int64(0); off < rec.NumRows(); {
		n := min(rec.NumRows()-off, p.maxRows-p.pendingRows)
		part := rec
		if off != 0 || n != rec.NumRows() {
			part = rec.NewSlice(off, off+n)
		} else {
			part.Retain()
		}
		p.pending = append(p.pending, part)
		p.pendingRows += n
		off += n
		if p.pendingRows >= p.maxRows {
			if err := p.flushRowGroup(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushRowGroup hands the open row group to the background encoder, after the previous one
// finished (row groups are appended to the file in order, and at most one waits in memory
// besides the one being filled).
func (p *parallelWriter) flushRowGroup() error {
	if err := p.wait(); err != nil {
		return err
	}
	recs := p.pending
	p.pending, p.pendingRows = nil, 0
	if len(recs) == 0 {
		return nil
	}
	done := make(chan error, 1)
	p.encoding = done
	go func() {
		done <- panics.Recover(nil, "encode parquet row group", func() error { return p.encodeRowGroup(recs) })
	}()
	return nil
}

// wait waits for the row group being encoded, if any, and returns the first error seen.
func (p *parallelWriter) wait() error {
	if p.encoding != nil {
		if err := <-p.encoding; err != nil && p.failed == nil {
			p.failed = err
		}
		p.encoding = nil
	}
	return p.failed
}

// encodeRowGroup writes recs as one row group, each column encoded by its own goroutine into the
// row group's buffered column writer; closing the row group then writes the chunks in order.
func (p *parallelWriter) encodeRowGroup(recs []arrow.RecordBatch) error {
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	rgw, err := p.fw.AppendBufferedRowGroupChecked()
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range p.schema.Fields() {
		encode := func() error {
			return panics.Recover(nil, "encode parquet column "+f.Name, func() error { return p.encodeColumn(rgw, i, f, recs) })
		}
		if p.background {
			g.Go(func() error { return background.Run(context.Background(), encode) })
		} else {
			g.Go(encode)
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if p.background { // writing the chunks out copies the whole row group
		return background.Run(context.Background(), rgw.Close)
	}
	return rgw.Close()
}

// encodeColumn encodes column i (field f) of recs into the row group's column writer.
func (p *parallelWriter) encodeColumn(rgw file.BufferedRowGroupWriter, i int, f arrow.Field, recs []arrow.RecordBatch) error {
	cw, err := rgw.Column(i)
	if err != nil {
		return err
	}
	// A write context per goroutine: it holds scratch buffers.
	ctx := pqarrow.NewArrowWriteContext(context.Background(), &p.arrProps)
	var levels []int16
	for _, r := range recs {
		col := r.Column(i)
		var def []int16
		if f.Nullable {
			levels = definitionLevels(levels, col)
			def = levels
		}
		if err := pqarrow.WriteArrowToColumn(ctx, cw, col, def, nil, f.Nullable); err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
	}
	// Encode and compress the column's last page here too, not in the sequential
	// rgw.Close. Not for a dictionary column: its data pages wait for the dictionary
	// page, which Close writes first.
	if !p.props.DictionaryEnabledFor(cw.Descr().Path()) {
		if fl, ok := cw.(interface{ FlushBufferedDataPages() error }); ok {
			if err := fl.FlushBufferedDataPages(); err != nil {
				return fmt.Errorf("column %s: %w", f.Name, err)
			}
		}
	}
	return nil
}

// definitionLevels returns the definition levels of a flat nullable column: 1 for a value, 0 for
// a null, in buf when it is large enough.
func definitionLevels(buf []int16, col arrow.Array) []int16 {
	n := col.Len()
	if cap(buf) < n {
		buf = make([]int16, n)
	}
	buf = buf[:n]
	if col.NullN() == 0 {
		for i := range buf {
			buf[i] = 1
		}
		return buf
	}
	for i := range buf {
		if col.IsValid(i) {
			buf[i] = 1
		} else {
			buf[i] = 0
		}
	}
	return buf
}

// Close encodes the last row group and writes the footer.
func (p *parallelWriter) Close() error {
	if p.closed {
		return p.failed
	}
	p.closed = true
	if err := p.flushRowGroup(); err != nil {
		p.release()
		return err
	}
	if err := p.wait(); err != nil {
		return err
	}
	if err := p.fw.Close(); err != nil {
		p.failed = err
	}
	return p.failed
}

// abort stops the writer without finishing the file: it waits for a row group in flight and
// releases the buffered rows.
// Abort stops w without finishing its file. It reports whether w no longer writes into its
// output (a column-parallel writer waits for its encoder); the output of a writer it reports
// false for may still be referenced by w and must not be reused.
func Abort(w Writer) bool {
	if pw, ok := w.(*parallelWriter); ok {
		pw.abort()
		return true
	}
	return false
}

func (p *parallelWriter) abort() {
	p.closed = true
	_ = p.wait()
	p.release()
}

func (p *parallelWriter) release() {
	for _, r := range p.pending {
		r.Release()
	}
	p.pending, p.pendingRows = nil, 0
}
