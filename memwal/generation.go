package memwal

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/parquetfile"
	"github.com/flight-sink/flight-sink/internal/background"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// A generation file is an Arrow IPC stream of the memtable's batches, in the table schema,
// uncompressed: writing one is a copy of buffers the memtable already holds, and reading one back
// decodes nothing. A generation is read only by this package (merged reads, the fold into the base
// table) and lives until the next fold, which encodes its rows into the table's Parquet data files:
// a Parquet generation (zstd; readers accept one) would pay that encode twice, on the same cores
// as the puts (docs/storage.md).
//
// writeGeneration writes batches (in schema) as generation g's file under the shard and returns
// its manifest entry without the WAL range. Nothing references the file until the shard manifest
// lists the generation; a file of a flush that never committed is garbage.
func writeGeneration(ctx context.Context, store objstore.Store, paths shardPaths, g uint64, schema *arrow.Schema,
	batches []arrow.RecordBatch, alloc memory.Allocator) (FlushedGeneration, error) {
	var size, rows int64
	for _, b := range batches {
		size += arrowschema.RecordBytes(b)
	}
	// No background slot (engine.RunInBackground) for this copy: it is short, and puts held back
	// by the backlog wait for it, so it must not queue behind a fold's or compaction's steps.
	var buf bytes.Buffer
	buf.Grow(int(size) + 64<<10) // the buffers, their padding and one message header per batch
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(alloc))
	for _, b := range batches {
		if b.NumRows() == 0 {
			continue
		}
		if err := w.Write(b); err != nil {
			w.Close()
			return FlushedGeneration{}, fmt.Errorf("memwal generation %d: encode: %w", g, err)
		}
		rows += b.NumRows()
	}
	if err := w.Close(); err != nil {
		return FlushedGeneration{}, fmt.Errorf("memwal generation %d: encode: %w", g, err)
	}
	dir := makeGenDir(g)
	name := uuid.NewString() + genFileExt
	if err := store.Put(ctx, paths.root+dir+name, bytes.NewReader(buf.Bytes())); err != nil {
		return FlushedGeneration{}, fmt.Errorf("memwal generation %d: write %s: %w", g, dir+name, err)
	}
	return FlushedGeneration{Generation: g, Dir: dir, Rows: rows,
		Files: []GenerationFile{{Name: name, Rows: rows, SizeBytes: int64(buf.Len())}}}, nil
}

// readGeneration calls fn with every batch of generation fg, in order, in schema. A batch is
// valid only during its call; fn retains it to keep it. A generation whose files are gone
// (a fold merged and deleted it) fails with an error wrapping objstore.ErrNotFound. A
// background read (a fold's) decodes each batch of an IPC generation in a background slot
// (engine.RunInBackground), and calls fn outside it.
func readGeneration(ctx context.Context, store objstore.Store, paths shardPaths, fg FlushedGeneration, schema *arrow.Schema,
	alloc memory.Allocator, background bool, fn func(arrow.RecordBatch) error) error {
	for _, f := range fg.Files {
		key := paths.root + fg.Dir + f.Name
		read := readIPCGeneration
		if strings.HasSuffix(f.Name, genParquetExt) {
			read = readParquet
		}
		if err := read(ctx, store, key, schema, alloc, background, fn); err != nil {
			return fmt.Errorf("memwal generation %d: %w", fg.Generation, err)
		}
	}
	return nil
}

// readIPCGeneration reads a generation file written by writeGeneration. Its bytes are checked as
// the WAL's are (wal.OpenIPC) and every batch must fit schema: a file that does not is ErrCorrupt.
func readIPCGeneration(ctx context.Context, store objstore.Store, key string, schema *arrow.Schema, alloc memory.Allocator,
	background bool, fn func(arrow.RecordBatch) error) error {
	b, err := store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return decodeIPCGeneration(key, b, schema, alloc, stepper(ctx, background), fn)
}

// decodeIPCGeneration calls fn with each batch of the generation file b (named key), in schema;
// step runs each decoding step (stepper).
func decodeIPCGeneration(key string, b []byte, schema *arrow.Schema, alloc memory.Allocator, step func(func() error) error,
	fn func(arrow.RecordBatch) error) error {
	var r *arrowschema.CheckedIPCReader
	if err := step(func() (err error) { r, err = wal.OpenIPC(key, b, alloc); return err }); err != nil {
		return err
	}
	defer r.Release()
	if !arrowschema.EqualIgnoringFieldIDs(schema, r.Schema()) {
		// A generation flushed before a schema merge is read through the current schema.
		if err := arrowschema.CheckWriteSchema(schema, r.Schema(), nil); err != nil {
			return fmt.Errorf("%w: %s: schema %s does not fit the table's %s: %v", ErrCorrupt, key, r.Schema(), schema, err)
		}
	}
	for {
		var rec arrow.RecordBatch
		err := step(func() error {
			if !r.Next() {
				return nil
			}
			var err error
			if rec, err = arrowschema.ConformColumnsOrByName(schema, r.RecordBatch()); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
			}
			return nil
		})
		if err != nil {
			return err // corrupt, or the context ended while waiting for a slot
		}
		if rec == nil {
			break
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return nil
}

// readParquet reads a Parquet generation file (readers accept them; flushes write Arrow IPC).
func readParquet(ctx context.Context, store objstore.Store, key string, schema *arrow.Schema, alloc memory.Allocator,
	_ bool, fn func(arrow.RecordBatch) error) error {
	r, _, err := objstore.OpenReader(ctx, store, key)
	if err != nil {
		return fmt.Errorf("open %s: %w", key, err)
	}
	pr, err := file.NewParquetReader(r)
	if err != nil {
		r.Close()
		return fmt.Errorf("open %s: %w", key, err)
	}
	defer pr.Close()
	// Columns decode in parallel. No background slot even for a fold: decoding reads ranges from
	// the store as it goes, and a slot is never held across a store's round trip.
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024}, alloc)
	if err != nil {
		return fmt.Errorf("open %s: %w", key, err)
	}
	rr, err := parquetfile.NewRecordReader(ctx, fr, nil, nil, schema.NumFields() > 1 && runtime.GOMAXPROCS(0) > 1, alloc)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		if rec.NumRows() == 0 {
			continue
		}
		// Stamp the table's field definitions (names, nullability, metadata, exact types) on the
		// batch.
		b, err := arrowschema.ConformBatch(schema, rec)
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		err = fn(b)
		b.Release()
		if err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return nil
}

// stepper returns what runs one decoding step of a read: in a background slot for a background
// read, inline otherwise.
func stepper(ctx context.Context, inBackground bool) func(func() error) error {
	if inBackground {
		return func(f func() error) error { return background.Run(ctx, f) }
	}
	return func(f func() error) error { return f() }
}
