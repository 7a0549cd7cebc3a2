package iceberg

import (
	"bytes"
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// dataFile describes one of the table's Parquet files as an Iceberg data file: record count,
// size, and the column statistics (value and null counts, lower and upper bounds) of its footer,
// so that readers prune. Columns resolve by field id when the file carries them, else by name.
//
// The file is described against the part of sc it holds (fileColumns): a file written before a
// schema merge lacks the columns added since, and iceberg-go refuses a file that lacks a column
// holding a required nested field (a map's key, a required list element) even when the column
// itself is optional.
func dataFile(ctx context.Context, fio *storeIO, loc string, sc *iceberg.Schema, props iceberg.Properties) (iceberg.DataFile, error) {
	fsc, err := fileColumns(fio, loc, sc, props)
	if err != nil {
		return nil, err
	}
	df, err := table.FileToDataFile(ctx, fio, loc, fsc, *iceberg.UnpartitionedSpec, 0, props)
	if err != nil {
		return nil, fmt.Errorf("describe data file %s: %w", loc, err)
	}
	return df, nil
}

// fileColumns returns sc pruned to the top-level columns the Parquet file at loc holds, matched by field id
// (or, for a file without field ids, by name through sc's name mapping). It reads the file's
// footer.
func fileColumns(fio *storeIO, loc string, sc *iceberg.Schema, props iceberg.Properties) (*iceberg.Schema, error) {
	f, err := fio.Open(loc)
	if err != nil {
		return nil, fmt.Errorf("open data file %s: %w", loc, err)
	}
	defer f.Close()
	rdr, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("read the footer of %s: %w", loc, err)
	}
	defer rdr.Close()
	asc, err := pqarrow.FromParquet(rdr.MetaData().Schema, nil, rdr.MetaData().KeyValueMetadata())
	if err != nil {
		return nil, fmt.Errorf("arrow schema of %s: %w", loc, err)
	}
	held, err := table.ArrowSchemaToIcebergWithOptions(asc, table.ArrowToIcebergOptions{
		NameMapping: sc.NameMapping(), TableSchema: sc, TableProperties: props,
	})
	if err != nil {
		return nil, fmt.Errorf("iceberg schema of %s: %w", loc, err)
	}
	ids, err := iceberg.IndexByID(held)
	if err != nil {
		return nil, fmt.Errorf("iceberg schema of %s: %w", loc, err)
	}
	var fields []iceberg.NestedField
	for _, f := range sc.Fields() {
		if _, ok := ids[f.ID]; ok {
			fields = append(fields, f)
		}
	}
	var keys []int
	for _, id := range sc.IdentifierFieldIDs {
		if _, ok := ids[id]; ok {
			keys = append(keys, id)
		}
	}
	return iceberg.NewSchemaWithIdentifiers(sc.ID, keys, fields...), nil
}

// fileHasFieldIDs reports whether every top-level column of the Parquet file at loc carries a
// field id (the table's files do since tables have field ids; older ones may not). It reads the
// file's footer.
func fileHasFieldIDs(fio *storeIO, loc string) (bool, error) {
	f, err := fio.Open(loc)
	if err != nil {
		return false, fmt.Errorf("open data file %s: %w", loc, err)
	}
	defer f.Close()
	rdr, err := file.NewParquetReader(f)
	if err != nil {
		return false, fmt.Errorf("read the footer of %s: %w", loc, err)
	}
	defer rdr.Close()
	root := rdr.MetaData().Schema.Root()
	for i := range root.NumFields() {
		if root.Field(i).FieldID() < 0 {
			return false, nil
		}
	}
	return root.NumFields() > 0, nil
}

// writePositionDeletes writes a position-delete file (Iceberg v2) that deletes the rows at
// positions of the data file at dataLoc, and returns it described as an Iceberg delete file.
// Positions are row offsets in the data file, which is what the table's deletion bitmaps hold
// (engine/rows_delete.go): a fragment is one data file.
//
// live: the data file is one the current snapshot reads. The description then names it as the
// referenced data file, which iceberg-go checks the table holds; a data file added in the same
// snapshot is not named (format v2 manifests do not store the field, readers match a position
// delete by its file_path column, and its sequence number equals the data file's, so it applies).
func writePositionDeletes(ctx context.Context, fio *storeIO, tablePrefix, dataLoc string, positions *roaring.Bitmap, live bool) (iceberg.DataFile, error) {
	mem := memory.DefaultAllocator
	b := array.NewRecordBuilder(mem, table.PositionalDeleteArrowSchema)
	defer b.Release()
	paths := b.Field(0).(*array.StringBuilder)
	pos := b.Field(1).(*array.Int64Builder)
	n := int(positions.GetCardinality())
	paths.Reserve(n)
	pos.Reserve(n)
	it := positions.Iterator()
	for it.HasNext() {
		paths.Append(dataLoc)
		pos.Append(int64(it.Next()))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()

	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false))
	fw, err := pqarrow.NewFileWriter(table.PositionalDeleteArrowSchema, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, fmt.Errorf("position deletes for %s: %w", dataLoc, err)
	}
	if err := fw.Write(rec); err != nil {
		fw.Close()
		return nil, fmt.Errorf("position deletes for %s: %w", dataLoc, err)
	}
	if err := fw.Close(); err != nil {
		return nil, fmt.Errorf("position deletes for %s: %w", dataLoc, err)
	}
	meta, err := fw.FileMetadata()
	if err != nil {
		return nil, fmt.Errorf("position deletes for %s: %w", dataLoc, err)
	}
	key := tablePrefix + deletesDir + uuid.NewString() + ".parquet"
	loc := fio.location(key)
	if err := fio.WriteFile(loc, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("write position deletes %s: %w", key, err)
	}
	var ref *string
	if live {
		ref = &dataLoc
	}
	df, err := table.DataFileFromMetadata(table.DataFileArgs{
		Schema: iceberg.PositionalDeleteSchema, Spec: *iceberg.UnpartitionedSpec, Format: iceberg.ParquetFile,
		Metadata: meta, FilePath: loc, FileSize: int64(buf.Len()), Content: iceberg.EntryContentPosDeletes,
		FormatVersion: formatVersion, ReferencedDataFile: ref,
	})
	if err != nil {
		return nil, fmt.Errorf("describe position deletes %s: %w", key, err)
	}
	return df, nil
}
