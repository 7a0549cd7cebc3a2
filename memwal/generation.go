package memwal

import (
	"bytes"
	"context"
	"fmt"
	"runtime"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/objstore"
)

// Generation files are Parquet with the engine's trade-offs: zstd at level 1 (fast, and the rows
// are rewritten by compaction soon anyway), no dictionary encoding, statistics on.
const (
	genZstdLevel       = 1
	genMaxRowGroupRows = 128 * 1024
)

// writeGeneration writes batches (in schema) as generation g's Parquet file under the shard and
// returns its manifest entry without the WAL range. Nothing references the file until the shard
// manifest lists the generation; a file of a flush that never committed is garbage.
func writeGeneration(ctx context.Context, store objstore.Store, paths shardPaths, g uint64, schema *arrow.Schema,
	batches []arrow.RecordBatch, alloc memory.Allocator) (FlushedGeneration, error) {
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(genZstdLevel),
		parquet.WithDictionaryDefault(false),
		parquet.WithMaxRowGroupLength(genMaxRowGroupRows),
		parquet.WithAllocator(alloc),
		parquet.WithStats(true),
	)
	var buf bytes.Buffer
	fw, err := engine.NewParquetWriter(schema, &buf, props) // the data files' writer, as compaction re-reads them
	if err != nil {
		return FlushedGeneration{}, fmt.Errorf("memwal generation %d: open parquet writer: %w", g, err)
	}
	var rows int64
	for _, b := range batches {
		if b.NumRows() == 0 {
			continue
		}
		if err := fw.WriteBuffered(b); err != nil {
			fw.Close()
			return FlushedGeneration{}, fmt.Errorf("memwal generation %d: encode parquet: %w", g, err)
		}
		rows += b.NumRows()
	}
	if err := fw.Close(); err != nil {
		return FlushedGeneration{}, fmt.Errorf("memwal generation %d: finish parquet: %w", g, err)
	}
	dir := makeGenDir(g)
	name := uuid.NewString() + genFileExt
	size := int64(buf.Len())
	if err := store.Put(ctx, paths.root+dir+name, bytes.NewReader(buf.Bytes())); err != nil {
		return FlushedGeneration{}, fmt.Errorf("memwal generation %d: write %s: %w", g, dir+name, err)
	}
	return FlushedGeneration{Generation: g, Dir: dir, Rows: rows,
		Files: []GenerationFile{{Name: name, Rows: rows, SizeBytes: size}}}, nil
}

// readGeneration calls fn with every batch of generation fg, in order, in schema. A batch is
// valid only during its call; fn retains it to keep it. A generation whose files are gone
// (compaction merged and deleted it) fails with an error wrapping objstore.ErrNotFound.
func readGeneration(ctx context.Context, store objstore.Store, paths shardPaths, fg FlushedGeneration, schema *arrow.Schema,
	alloc memory.Allocator, fn func(arrow.RecordBatch) error) error {
	for _, f := range fg.Files {
		key := paths.root + fg.Dir + f.Name
		if err := readParquet(ctx, store, key, schema, alloc, fn); err != nil {
			return fmt.Errorf("memwal generation %d: %w", fg.Generation, err)
		}
	}
	return nil
}

func readParquet(ctx context.Context, store objstore.Store, key string, schema *arrow.Schema, alloc memory.Allocator,
	fn func(arrow.RecordBatch) error) error {
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
	// Columns decode in parallel (compaction folds and merged reads wait on this).
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024, Parallel: schema.NumFields() > 1 && runtime.GOMAXPROCS(0) > 1}, alloc)
	if err != nil {
		return fmt.Errorf("open %s: %w", key, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
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
		b, err := engine.ConformBatch(schema, rec)
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
