package engine

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// fileCodecs returns the compression of every column chunk of every data file of version m.
func fileCodecs(t testing.TB, tbl *Table, m *Manifest) []compress.Compression {
	t.Helper()
	var out []compress.Compression
	for _, f := range m.Fragments {
		for _, df := range f.Files {
			b, err := tbl.store.Get(t.Context(), tbl.key(df.Path))
			if err != nil {
				t.Fatal(err)
			}
			pr, err := file.NewParquetReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			md := pr.MetaData()
			for g := 0; g < md.NumRowGroups(); g++ {
				for c := 0; c < md.NumColumns(); c++ {
					cc, err := md.RowGroup(g).ColumnChunk(c)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, cc.Compression())
				}
			}
		}
	}
	return out
}

func wantCodec(t testing.TB, what string, got []compress.Compression, want compress.Compression) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("%s: no column chunks", what)
	}
	for _, c := range got {
		if c != want {
			t.Fatalf("%s: a column chunk is compressed with %v, want %v (all: %v)", what, c, want, got)
		}
	}
}

// TestDataCodecRoundTrip: a table created with each data codec records it in its config, writes
// every column chunk of its data files (appends and compaction's rewrites) with it, and reads
// back what was written. A table without the config key (one created before the option) writes
// zstd.
func TestDataCodecRoundTrip(t *testing.T) {
	t.Parallel()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	codecs := map[DataCodec]compress.Compression{
		CodecZstd: compress.Codecs.Zstd, CodecLZ4Raw: compress.Codecs.Lz4Raw,
		CodecSnappy: compress.Codecs.Snappy, CodecNone: compress.Codecs.Uncompressed,
	}
	for _, name := range append(DataCodecs, "") {
		want := codecs[name]
		if name == "" {
			want = codecs[DefaultDataCodec]
		}
		table := "t_" + string(name)
		tbl, err := Create(t.Context(), store, table, rowsSchema, CreateOptions{Config: map[string]string{ConfigDataCodec: string(name)}}, nil)
		if err != nil {
			t.Fatalf("create with data codec %q: %v", name, err)
		}
		appendIDs(t, tbl, idRange(0, 5000), nil)
		m := appendIDs(t, tbl, idRange(5000, 5000), nil)
		if got := DataCodecOf(m); codecs[got] != want {
			t.Fatalf("codec %q: table config says %q", name, got)
		}
		wantCodec(t, table+" appends", fileCodecs(t, tbl, m), want)
		requireSameIDs(t, table, scanRows(t, tbl, 0), idRange(0, 10_000))
		if _, err := tbl.Compact(t.Context(), CompactOptions{}); err != nil {
			t.Fatal(err)
		}
		if m, err = tbl.Latest(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(m.Fragments) != 1 {
			t.Fatalf("%s: compaction left %d fragments, want 1", table, len(m.Fragments))
		}
		wantCodec(t, table+" compacted", fileCodecs(t, tbl, m), want)
		requireSameIDs(t, table+" compacted", scanRows(t, tbl, 0), idRange(0, 10_000))
	}

	tbl, err := Create(t.Context(), store, "before_option", rowsSchema, CreateOptions{Config: map[string]string{ConfigDataCodec: "lz4_raw"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.UpdateConfig(t.Context(), nil, []string{ConfigDataCodec}, nil); err != nil {
		t.Fatal(err)
	}
	reopened, err := Open(t.Context(), store, "before_option", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := appendIDs(t, reopened, idRange(0, 100), nil)
	wantCodec(t, "a table without the option", fileCodecs(t, reopened, m), compress.Codecs.Zstd)
}

// TestDataCodecRefused: an unknown codec is refused by create and by a config change, with an
// error naming the option and the codecs accepted, and nothing is created.
func TestDataCodecRefused(t *testing.T) {
	t.Parallel()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"brotli", "ZSTD", "lz4", " zstd"} {
		_, err := Create(t.Context(), store, "t", rowsSchema, CreateOptions{Config: map[string]string{ConfigDataCodec: bad}}, nil)
		if err == nil || !strings.Contains(err.Error(), "data_codec") || !strings.Contains(err.Error(), "lz4_raw") {
			t.Fatalf("create with data codec %q: %v, want an error naming data_codec and the codecs", bad, err)
		}
	}
	if vs, err := (&Table{store: store, name: "t", prefix: "t/"}).listVersions(t.Context(), 0); err != nil || len(vs) != 0 {
		t.Fatalf("a refused create left versions %v (%v)", vs, err)
	}
	tbl := createRowsTable(t, store, "ok", nil)
	if _, err := tbl.UpdateConfig(t.Context(), map[string]string{ConfigDataCodec: "gzip"}, nil, nil); err == nil || !strings.Contains(err.Error(), "data_codec") {
		t.Fatalf("config change to gzip: %v, want refused", err)
	}
}

// TestScanBatchBytes: a scan of wide rows yields batches of about BatchBytes (the estimate from
// the column chunks), not BatchSize rows, and reads every row once, in order.
func TestScanBatchBytes(t *testing.T) {
	t.Parallel()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "blob", Type: arrow.BinaryTypes.String},
	}, nil)
	tbl, err := Create(t.Context(), store, "wide", sc, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 rows of about 8 KiB: 16 MiB in one file, to be read in batches of about 1 MiB.
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	rnd := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 8<<10)
	for i := range int64(2000) {
		for j := range blob {
			blob[j] = byte('a' + rnd.IntN(26))
		}
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.StringBuilder).Append(string(blob))
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatal(err)
	}
	const target = 1 << 20
	s, err := tbl.Scan(t.Context(), ScanOptions{BatchBytes: target})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var rows, batches int64
	for s.Next() {
		r := s.RecordBatch()
		if n := arrowschema.RecordBytes(r); n > 2*target {
			t.Fatalf("a batch of %d rows holds %d bytes, want about %d", r.NumRows(), n, target)
		}
		ids := r.Column(0).(*array.Int64)
		for i := range ids.Len() {
			if ids.Value(i) != rows+int64(i) {
				t.Fatalf("row %d has id %d", rows+int64(i), ids.Value(i))
			}
		}
		rows += r.NumRows()
		batches++
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if rows != 2000 || batches < 8 {
		t.Fatalf("read %d rows in %d batches, want 2,000 in about 16", rows, batches)
	}
}

// TestScanBatchBytesRepeatedStrings: a column whose Parquet encoding is far smaller than its Arrow
// form (long strings from a few distinct values, dictionary-encoded) still reads in batches of
// about BatchBytes of Arrow memory: the scan sizes its batches by the bytes per row of what it
// decoded, starting from a small first batch, not by the Parquet estimate alone.
func TestScanBatchBytesRepeatedStrings(t *testing.T) {
	t.Parallel()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String},
	}, nil)
	tbl, err := Create(t.Context(), store, "repeated", sc, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const rows = 200_000
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	for i := range int64(rows) {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.StringBuilder).Append(strings.Repeat(string(rune('a'+i%8)), 200))
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatal(err)
	}
	const target = 1 << 20
	s, err := tbl.Scan(t.Context(), ScanOptions{BatchBytes: target})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var n int64
	for s.Next() {
		r := s.RecordBatch()
		if size := arrowschema.RecordBytes(r); size > 2*target {
			t.Fatalf("the batch at row %d holds %d rows, %d bytes; want about %d", n, r.NumRows(), size, target)
		}
		if id := r.Column(0).(*array.Int64).Value(0); id != n {
			t.Fatalf("the batch at row %d starts with id %d", n, id)
		}
		n += r.NumRows()
	}
	if err := s.Err(); err != nil || n != rows {
		t.Fatalf("read %d rows (%v), want %d", n, err, rows)
	}
}
