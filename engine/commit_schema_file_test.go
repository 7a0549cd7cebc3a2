package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/objstore"
)

// A manifest names its schema's file instead of holding the schema: a commit that keeps the
// schema writes no schema and names the same file, a schema change writes one new file, another
// handle reads the schema from it, and a manifest create that failed after its schema file was
// written (a crash between the two) leaves a file that cleanup removes once no version names it.
func TestManifestNamesItsSchemaFile(t *testing.T) {
	forEachStore(t, func(t *testing.T, real objstore.Store) {
		ctx := t.Context()
		store := &flakyStore{Store: real}
		tbl := createRowsTable(t, store, "sf", nil)
		m := appendIDs(t, tbl, idRange(0, 5), nil)
		raw, err := real.Get(ctx, tbl.key(makeManifestKey(m.Version)))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), `"schema":`) || m.SchemaFile == "" || !strings.Contains(string(raw), m.SchemaFile) {
			t.Fatalf("manifest %s holds its schema or names no file (%q)", raw, m.SchemaFile)
		}
		first := m.SchemaFile
		if got := appendIDs(t, tbl, idRange(5, 5), nil).SchemaFile; got != first {
			t.Fatalf("an append without a schema change names %s, want %s", got, first)
		}

		// A schema change whose manifest create fails: its schema file is written, unreferenced.
		wider := arrow.NewSchema(append(rowsSchema.Fields(), arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), nil)
		store.failKey = tbl.key(makeManifestKey(m.Version + 2))
		merged, changed, err := SchemaForWrite(mustLatest(t, tbl), wider)
		if err != nil || !changed {
			t.Fatalf("merge: %v %v", changed, err)
		}
		txn := &Transaction{Operation: OpAppend}
		if err := txn.SetSchema(merged); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, txn); !errors.Is(err, errFlaky) {
			t.Fatalf("schema change with a failing manifest create: %v", err)
		}
		if n := len(listKeys(t, tbl, schemasDir)); n != 2 {
			t.Fatalf("%d schema files, want the table's and the failed change's", n)
		}
		txn = &Transaction{Operation: OpAppend}
		if err := txn.SetSchema(merged); err != nil {
			t.Fatal(err)
		}
		after, err := tbl.Commit(ctx, txn)
		if err != nil {
			t.Fatal(err)
		}
		if after.SchemaFile == first {
			t.Fatal("a schema change names the old schema file")
		}
		other := openTable(t, real, "sf", nil)
		if got := mustLatest(t, other).ArrowSchema(); got.NumFields() != 4 {
			t.Fatalf("another handle reads schema %s", got)
		}
		recs, err := other.ReadAll(ctx, ScanOptions{Version: after.Version})
		if err != nil {
			t.Fatal(err)
		}
		rows := int64(0)
		for _, r := range recs {
			if r.NumCols() != 4 {
				t.Fatalf("another handle reads %d columns", r.NumCols())
			}
			rows += r.NumRows()
			r.Release()
		}
		if rows != 10 {
			t.Fatalf("another handle reads %d rows, want 10", rows)
		}
		if _, err := tbl.Cleanup(ctx, CleanupPolicy{KeepLast: 1, OlderThan: time.Second, Grace: time.Nanosecond, Now: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if left := listKeys(t, tbl, schemasDir); len(left) != 1 || left[0] != after.SchemaFile {
			t.Fatalf("schema files after cleanup %v, want only %s", left, after.SchemaFile)
		}
	})
}

// TestDamagedSchemaFile: a schema file with one byte changed in storage (a column's name, which
// still decodes as a schema) is refused by every handle that reads it, with ErrCorruptManifest
// naming the file, never read as another schema.
func TestDamagedSchemaFile(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "damaged", nil)
		m := appendIDs(t, tbl, idRange(0, 5), nil)
		key := tbl.key(m.SchemaFile)
		b, err := store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(string(b), "score")
		if i < 0 {
			t.Fatalf("schema file %s does not hold the column name", key)
		}
		b[i] = 'S' // "Score": a valid schema, another column
		if err := store.Put(ctx, key, strings.NewReader(string(b))); err != nil {
			t.Fatal(err)
		}
		other, err := Open(ctx, store, "damaged", nil)
		if err == nil {
			t.Fatalf("opened with the damaged schema: %s", mustLatest(t, other).ArrowSchema())
		}
		if !errors.Is(err, ErrCorruptManifest) || !strings.Contains(err.Error(), key) {
			t.Fatalf("open: %v; want ErrCorruptManifest naming %s", err, key)
		}
		if _, err := Drop(ctx, store, "damaged"); err != nil {
			t.Fatalf("drop of the table with a damaged schema file: %v", err)
		}
	})
}
