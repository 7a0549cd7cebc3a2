package memwal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/objstore"
)

// readAllGeneration reads generation fg and returns its rows as (id, val) strings in order.
func readAllGeneration(t *testing.T, store objstore.Store, paths shardPaths, fg FlushedGeneration, background bool) []string {
	t.Helper()
	var got []string
	err := readGeneration(context.Background(), store, paths, fg, rowsSchema, memory.DefaultAllocator, background, func(b arrow.RecordBatch) error {
		if !b.Schema().Equal(rowsSchema) {
			t.Fatalf("batch schema %s, want %s", b.Schema(), rowsSchema)
		}
		ids, vals := b.Column(0).(*array.Int64), b.Column(1).(*array.String)
		for i := 0; i < int(b.NumRows()); i++ {
			got = append(got, vals.Value(i)+"@"+ids.ValueStr(i))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read generation %d: %v", fg.Generation, err)
	}
	return got
}

// TestGenerationRoundTrip: a flushed generation is an Arrow IPC stream file that reads back
// every row, in order, in the table schema, whether read in the foreground (a merged read) or in
// background slots (a fold).
func TestGenerationRoundTrip(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	paths := newShardPaths("events", testShardID)
	a, b, empty := makeRows(1, 3, "a", 1), makeRows(10, 2, "b", 2), makeRows(0, 0, "", 0)
	defer a.Release()
	defer b.Release()
	defer empty.Release()
	fg, err := writeGeneration(context.Background(), store, paths, 4, rowsSchema, []arrow.RecordBatch{a, empty, b}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	if fg.Rows != 5 || len(fg.Files) != 1 || fg.Files[0].Rows != 5 || !strings.HasSuffix(fg.Files[0].Name, genFileExt) {
		t.Fatalf("generation entry %+v: want 5 rows in one %s file", fg, genFileExt)
	}
	info, err := store.Stat(context.Background(), paths.root+fg.Dir+fg.Files[0].Name)
	if err != nil || info.Size != fg.Files[0].SizeBytes {
		t.Fatalf("file %v, stat err %v: want the size the entry records, %d", info, err, fg.Files[0].SizeBytes)
	}
	want := []string{"a-1@1", "a-2@2", "a-3@3", "b-10@10", "b-11@11"}
	for _, bg := range []bool{false, true} {
		if got := readAllGeneration(t, store, paths, fg, bg); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("background %v: read %v, want %v", bg, got, want)
		}
	}
}

// TestParquetGenerationStillReads: generations flushed before the IPC format are Parquet files;
// a shard manifest listing one still reads (a server upgraded with unfolded generations).
func TestParquetGenerationStillReads(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	paths := newShardPaths("events", testShardID)
	rec := makeRows(5, 4, "old", 1)
	defer rec.Release()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rowsSchema, &buf, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dir := makeGenDir(2)
	name := "legacy" + genParquetExt
	if err := store.Put(context.Background(), paths.root+dir+name, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	fg := FlushedGeneration{Generation: 2, Dir: dir, Rows: 4, Files: []GenerationFile{{Name: name, Rows: 4, SizeBytes: int64(buf.Len())}}}
	want := "old-5@5,old-6@6,old-7@7,old-8@8"
	for _, bg := range []bool{false, true} {
		if got := strings.Join(readAllGeneration(t, store, paths, fg, bg), ","); got != want {
			t.Fatalf("background %v: read %s, want %s", bg, got, want)
		}
	}
}

// FuzzReadGeneration: whatever bytes a generation file holds, reading it gives its rows in the
// table schema or an error wrapping ErrCorrupt; never a panic.
func FuzzReadGeneration(f *testing.F) {
	store, err := objstore.NewLocal(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	paths := newShardPaths("events", testShardID)
	a, b := makeRows(1, 3, "a", 1), makeRows(10, 2, "b", 2)
	fg, err := writeGeneration(context.Background(), store, paths, 1, rowsSchema, []arrow.RecordBatch{a, b}, memory.DefaultAllocator)
	a.Release()
	b.Release()
	if err != nil {
		f.Fatal(err)
	}
	key := paths.root + fg.Dir + fg.Files[0].Name
	good, err := store.Get(context.Background(), key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		err := decodeIPCGeneration(key, data, rowsSchema, memory.DefaultAllocator, stepper(context.Background(), false), func(b arrow.RecordBatch) error {
			if !b.Schema().Equal(rowsSchema) {
				t.Fatalf("batch schema %s, want %s", b.Schema(), rowsSchema)
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
		}
	})
}
