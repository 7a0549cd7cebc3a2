package engine

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/parquetfile"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/internal/background"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// Writer writes record batches into new data files, split into fragments of at most
// Options.TargetRowsPerFragment rows; in a partitioned table every file holds the rows of one
// partition, buffered until Finish (write_partition.go). It commits nothing: Finish returns the fragments for a
// transaction, and files of a writer whose fragments are never committed are unreferenced
// garbage that cleanup reclaims.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	t      *Table
	schema *arrow.Schema // the table schema
	file   *arrow.Schema // the columns files hold: the table's that in has, in table order
	in     *arrow.Schema // the schema of batches given to Write
	target int64         // rows per fragment; Options.TargetRowsPerFragment unless compaction sets it

	codec DataCodec                 // the table's (DataCodecOf), or WithDataCodec's
	props *parquet.WriterProperties // chosen from the first batch
	buf   *bytes.Buffer             // the open file's bytes, from fileBuffers
	fw    parquetfile.Writer
	rows  int64 // rows in the open file

	frags   []Fragment
	written []string // keys of finished files, for Abort
	bytesIn int64
	closed  bool

	landing chan error // the last file's upload, started by FinishLater
	landErr error      // its outcome, once Durable has seen it

	background bool // encode in background slots (InBackground)

	// The partitioned table's state (write_partition.go); spec is empty for an unpartitioned one.
	spec          partition.Spec
	maxPartitions int // partitions one write may hold; 0: no limit
	parts         *partitionBuffer
	tuple         partition.Tuple // the partition of the open file's rows
}

// NewWriter returns a Writer for batches of schema in, which must fit the table's current schema
// without changing it (CheckWriteSchema: omitted nullable columns are written as nulls, narrower
// types widened). Batches are reshaped to the table schema, so column order may differ.
func (t *Table) NewWriter(ctx context.Context, in *arrow.Schema, opts ...WriterOption) (*Writer, error) {
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	if in == nil {
		in = m.ArrowSchema() // e.g. a truncate: no batches, so no schema of their own
	}
	return t.NewWriterFor(m.WriteSchema(), in, opts...)
}

// NewWriterFor returns a Writer that writes files in schema target from batches of schema in.
// Overwrite uses it with a new target schema, and a schema merge with the merged schema
// (MergeSchema): the transaction then carries target as its Schema.
func (t *Table) NewWriterFor(target, in *arrow.Schema, opts ...WriterOption) (*Writer, error) {
	if err := arrowschema.CheckWriteSchema(target, in, nil); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.name, err)
	}
	w := &Writer{t: t, schema: target, file: fileSchema(target, in), in: in, target: t.opts.TargetRowsPerFragment, codec: DefaultDataCodec}
	if m := t.cachedLatest(); m != nil { // the codec is set at create: any version of the table has it
		w.codec = DataCodecOf(m)
	}
	w.spec, w.maxPartitions = t.partitionSpecOf(), t.MaxPartitionsPerWrite(t.cachedLatest())
	for _, o := range opts {
		o(w)
	}
	if err := w.initPartitions(target, in); err != nil {
		return nil, err
	}
	return w, nil
}

// Schema returns the table schema the writer writes.
func (w *Writer) Schema() *arrow.Schema { return w.schema }

// fileSchema returns the schema of the files a writer of batches of schema in writes into a
// table of schema target: target's columns that in has, in target's order. Columns the batches
// omit (nullable ones, CheckWriteSchema) are not written: a reader reads a column a file does
// not hold as nulls (Scanner.openFragment), so a file's size and its footer's cost follow the
// columns written, not the table's width.
func fileSchema(target, in *arrow.Schema) *arrow.Schema {
	if in == nil || in.NumFields() >= target.NumFields() {
		return target
	}
	fields := make([]arrow.Field, 0, in.NumFields())
	for _, f := range target.Fields() {
		if len(in.FieldIndices(f.Name)) > 0 {
			fields = append(fields, f)
		}
	}
	if len(fields) == 0 {
		return target
	}
	md := target.Metadata()
	return arrow.NewSchema(fields, &md)
}

// Write appends rec. rec must have the schema given to NewWriter.
func (w *Writer) Write(ctx context.Context, rec arrow.RecordBatch) error {
	if w.closed {
		return fmt.Errorf("table %s: write after finish", w.t.name)
	}
	if !rec.Schema().Equal(w.in) {
		if err := arrowschema.CheckWriteSchema(w.schema, rec.Schema(), nil); err != nil {
			return fmt.Errorf("table %s: %w", w.t.name, err)
		}
		return fmt.Errorf("table %s: %w: batch schema changed within one write: %s", w.t.name, arrowschema.ErrSchemaMismatch, arrowschema.SchemaDiff(w.in, rec.Schema()))
	}
	if rec.NumRows() == 0 {
		return nil
	}
	conf, err := arrowschema.ConformToTable(w.file, rec)
	if err != nil {
		return fmt.Errorf("table %s: %w", w.t.name, err)
	}
	defer conf.Release()
	if w.parts != nil {
		return w.bufferPartitions(ctx, conf)
	}
	return w.writeRows(ctx, conf)
}

// writeRows writes conf (a batch of the file schema) into the open file, opening one when none
// is and closing each at the target row count.
func (w *Writer) writeRows(ctx context.Context, conf arrow.RecordBatch) error {
	target := w.target
	var off int64
	for off < conf.NumRows() {
		if w.fw == nil {
			if err := w.openFile(conf); err != nil {
				return err
			}
		}
		n := conf.NumRows() - off
		if room := target - w.rows; n > room {
			n = room
		}
		part := conf
		if off != 0 || n != conf.NumRows() {
			part = conf.NewSlice(off, off+n)
		}
		err := w.fw.WriteBuffered(part)
		if part != conf {
			part.Release()
		}
		if err != nil {
			return fmt.Errorf("table %s: encode parquet: %w", w.t.name, err)
		}
		w.rows += n
		off += n
		if w.rows >= target {
			if err := w.closeFile(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// dictionaryPays decides per column whether dictionary encoding is worth its cost, from a sample:
// only string and binary columns with at most one distinct value in four. Dictionary encoding of
// every column costs 2-4x in encode speed for little gain on numeric data.
func dictionaryPays(rec arrow.RecordBatch) []bool {
	out := make([]bool, rec.NumCols())
	const sample = 4096
	for i, col := range rec.Columns() {
		n := col.Len()
		if n > sample {
			n = sample
		}
		if n == 0 {
			continue
		}
		var get func(int) string
		switch a := col.(type) {
		case *array.String:
			get = a.Value
		case *array.LargeString:
			get = a.Value
		case *array.Binary:
			get = func(i int) string { return string(a.Value(i)) }
		default:
			continue
		}
		seen := make(map[string]struct{}, n/4+1)
		for j := 0; j < n && len(seen) <= n/4; j++ {
			if col.IsValid(j) {
				seen[get(j)] = struct{}{}
			}
		}
		out[i] = len(seen) <= n/4
	}
	return out
}

func (w *Writer) openFile(sample arrow.RecordBatch) error {
	if w.props == nil {
		opts := append(w.codec.writerProperties(),
			parquet.WithDictionaryDefault(false),
			parquet.WithMaxRowGroupLength(w.t.opts.MaxRowGroupRows),
			parquet.WithAllocator(w.t.opts.Allocator),
			parquet.WithStats(true),
		)
		for i, use := range dictionaryPays(sample) {
			if use {
				opts = append(opts, parquet.WithDictionaryFor(w.file.Field(i).Name, true))
			}
		}
		w.props = parquet.NewWriterProperties(opts...)
	}
	if w.buf == nil {
		w.buf = getFileBuffer()
	}
	w.buf.Reset()
	fw, err := parquetfile.NewWriter(w.file, w.buf, w.props, w.background)
	if err != nil {
		return fmt.Errorf("table %s: open parquet writer: %w", w.t.name, err)
	}
	w.fw = fw
	w.rows = 0
	return nil
}

func (w *Writer) closeFile(ctx context.Context) error {
	key, err := w.sealFile()
	if err != nil {
		return err
	}
	put := func() error { return w.t.store.Put(ctx, key, bytes.NewReader(w.buf.Bytes())) }
	if w.background && w.t.localStore() { // a local write copies the whole file; a remote one waits on the network
		err = background.Run(ctx, put)
	} else {
		err = put()
	}
	if err != nil {
		return fmt.Errorf("table %s: write data file %s: %w", w.t.name, key, err)
	}
	w.written = append(w.written, key)
	return nil
}

// sealFile finishes encoding the open file into w.buf, records its fragment and returns the key
// it is to be stored under.
func (w *Writer) sealFile() (string, error) {
	if err := w.fw.Close(); err != nil {
		return "", fmt.Errorf("table %s: finish parquet file: %w", w.t.name, err)
	}
	w.fw = nil
	rel := makeDataKey(uuid.NewString())
	size := int64(w.buf.Len())
	w.bytesIn += size
	w.frags = append(w.frags, Fragment{Files: []DataFile{{Path: rel, SizeBytes: size}}, PhysicalRows: w.rows, Partition: w.tuple})
	w.rows = 0
	return w.t.key(rel), nil
}

// Finish flushes the last file and returns the fragments written, in order. The files are
// durable when Finish returns.
func (w *Writer) Finish(ctx context.Context) ([]Fragment, error) {
	if w.closed {
		return w.frags, nil
	}
	if err := w.flushPartitions(ctx); err != nil {
		return nil, err
	}
	w.closed = true
	defer w.releaseBuffer()
	if w.fw != nil && w.rows > 0 {
		if err := w.closeFile(ctx); err != nil {
			return nil, err
		}
	}
	return w.frags, nil
}

// FinishLater is Finish, except that the last file is still being uploaded when it returns: the
// caller prepares its commit (reads the latest version, writes the transaction file) while the
// file lands, which on a local disk saves one file's fsyncs per epoch. The fragments must not be
// referenced by a manifest before Durable reports the file stored: set the transaction's
// FilesDurable to w.Durable and Commit waits for it before its commit point.
func (w *Writer) FinishLater(ctx context.Context) ([]Fragment, error) {
	if w.closed {
		return w.frags, nil
	}
	if err := w.flushPartitions(ctx); err != nil {
		return nil, err
	}
	w.closed = true
	if w.fw == nil || w.rows == 0 {
		w.releaseBuffer()
		return w.frags, nil
	}
	key, err := w.sealFile()
	if err != nil {
		w.releaseBuffer()
		return nil, err
	}
	w.written = append(w.written, key) // before it lands: Abort waits for the upload, then deletes
	buf := w.buf
	w.buf = nil
	w.landing = make(chan error, 1)
	go func() {
		err := panics.Recover(w.t.opts.Logger, "store data file", func() error {
			return w.t.store.Put(ctx, key, bytes.NewReader(buf.Bytes()))
		})
		putFileBuffer(buf) // the store has the bytes (or failed); nothing reads buf any more
		if err != nil {
			err = fmt.Errorf("table %s: write data file %s: %w", w.t.name, key, err)
		}
		w.landing <- err
	}()
	return w.frags, nil
}

// Durable waits until every file the writer wrote is stored and returns the upload's error, if
// any. It returns at once after Finish.
func (w *Writer) Durable(ctx context.Context) error {
	if w.landing != nil {
		select {
		case w.landErr = <-w.landing:
			w.landing = nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return w.landErr
}

// fileBuffers recycles the buffers data files are encoded into: a file is tens of megabytes,
// and growing a fresh buffer for every epoch (zeroing and copying it at every doubling) costs
// more than encoding small ones. A channel, not a sync.Pool: every garbage collection empties a
// sync.Pool, and a sink under load collects often.
var fileBuffers = make(chan *bytes.Buffer, 4)

// maxPooledBuffer keeps unusually large buffers out of the pool.
const maxPooledBuffer = 256 << 20

func getFileBuffer() *bytes.Buffer {
	select {
	case b := <-fileBuffers:
		return b
	default:
		return new(bytes.Buffer)
	}
}

func (w *Writer) releaseBuffer() {
	if w.buf != nil {
		putFileBuffer(w.buf)
	}
	w.buf = nil
}

func putFileBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		b.Reset()
		select {
		case fileBuffers <- b:
		default:
		}
	}
}

// BytesWritten returns the size of the data files written so far.
func (w *Writer) BytesWritten() int64 { return w.bytesIn }

// Abort deletes the files written so far, best effort. Files it cannot delete stay unreferenced
// and cleanup reclaims them later.
func (w *Writer) Abort(ctx context.Context) {
	w.closed = true
	w.parts.release()
	_ = w.Durable(context.WithoutCancel(ctx)) // an upload still running would land after the delete
	if parquetfile.Abort(w.fw) {              // waits for its encoder, so nothing writes into the buffer any more
		w.fw = nil
	}
	if w.fw == nil {
		w.releaseBuffer() // an open file writer may still reference the buffer
	}
	for _, k := range w.written {
		if err := w.t.store.Delete(ctx, k); err != nil {
			w.t.opts.Logger.Warn("abort write: could not delete data file", "table", w.t.name, "file", k, "err", err)
		}
	}
	w.written = nil
}

// zstdLevel is the zstd level of data files: level 1 (the encoder's fastest) encodes about twice
// as fast as the default level 3 for files a few percent larger, the right trade for a sink whose
// data is compacted later anyway.
const zstdLevel = 1
