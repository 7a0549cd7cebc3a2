package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// fieldIDs returns every field's id by dotted path, nested fields included, in the order
// AssignFieldIDs numbers them. A field without an id maps to 0.
func fieldIDs(sc *arrow.Schema) map[string]int32 {
	out := map[string]int32{}
	var walk func(prefix string, fs []arrow.Field)
	walk = func(prefix string, fs []arrow.Field) {
		for _, f := range fs {
			id, _ := arrowschema.FieldID(f)
			out[prefix+f.Name] = id
			if children, _ := arrowschema.NestedFields(f.Type); children != nil {
				walk(prefix+f.Name+".", children)
			}
		}
	}
	walk("", sc.Fields())
	return out
}

func TestFieldIDsOnCreate(t *testing.T) {
	nested := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.StructOf(
			arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "l", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		), Nullable: true},
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Float64), Nullable: true},
		// A client's own ids (pyarrow keeps them from Parquet files) mean nothing to the table.
		{Name: "x", Type: arrow.PrimitiveTypes.Int8, Nullable: true, Metadata: arrow.NewMetadata([]string{arrowschema.FieldIDKey}, []string{"77"})},
	}, nil)
	tbl, err := Create(t.Context(), mustLocalStore(t), "nested", nested, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := mustLatest(t, tbl)
	// Iceberg's order: a struct's fields first, then each one's children.
	want := map[string]int32{"id": 1, "s": 2, "m": 3, "x": 4, "s.a": 5, "s.l": 6, "s.l.item": 7, "m.key": 8, "m.value": 9}
	got := fieldIDs(m.ArrowSchema())
	for path, id := range want {
		if got[path] != id {
			t.Errorf("field %s: id %d, want %d (all: %v)", path, got[path], id, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	if m.LastFieldID != 9 || m.SchemaID != 0 {
		t.Fatalf("last_field_id %d schema_id %d, want 9 and 0", m.LastFieldID, m.SchemaID)
	}
}

// TestFieldIDsForLegacyTable: a table written before field ids existed gets them on its next
// commit without rewriting its data files; files written afterwards carry them as Parquet field ids.
func TestFieldIDsForLegacyTable(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "legacy", nil)
		legacyFrag := writeLegacyVersion(t, tbl)

		tbl, err := Open(ctx, store, "legacy", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ids := fieldIDs(mustLatest(t, tbl).ArrowSchema()); ids["id"] != 0 {
			t.Fatalf("the legacy version has ids %v", ids)
		}
		m := appendIDs(t, tbl, idRange(10, 5), nil)
		if got := fieldIDs(m.ArrowSchema()); got["id"] != 1 || got["name"] != 2 || got["score"] != 3 {
			t.Fatalf("after the next commit: ids %v, want id=1 name=2 score=3", got)
		}
		if m.LastFieldID != 3 || m.SchemaID != 0 {
			t.Fatalf("last_field_id %d schema_id %d, want 3 and 0 (ids are not a schema change)", m.LastFieldID, m.SchemaID)
		}
		if m.Fragments[0].Files[0].Path != legacyFrag.Files[0].Path {
			t.Fatalf("the legacy data file was rewritten: %v", m.Fragments)
		}
		requireSameIDs(t, "scan", scanRows(t, tbl, 0), append(idRange(0, 5), idRange(10, 5)...))
		if ids := parquetFieldIDs(t, ctx, tbl, m.Fragments[0].Files[0].Path); ids[0] != -1 {
			t.Fatalf("legacy file has field ids %v", ids)
		}
		if ids := parquetFieldIDs(t, ctx, tbl, m.Fragments[1].Files[0].Path); len(ids) != 3 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
			t.Fatalf("new file has Parquet field ids %v, want [1 2 3]", ids)
		}
	})
}

// writeLegacyVersion commits version 2 of tbl the way a build before field ids did: a schema
// without ids, no last_field_id, and one fragment of rows 0..4 written in that schema.
func writeLegacyVersion(t *testing.T, tbl *Table) Fragment {
	t.Helper()
	ctx := t.Context()
	m := mustLatest(t, tbl)
	old := arrowschema.StripFieldIDs(m.ArrowSchema())
	w, err := tbl.NewWriterFor(old, rowsSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec := makeRows(idRange(0, 5))
	defer rec.Release()
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := m.clone()
	next.Version, next.LastFieldID = 2, 0
	sb, err := arrowschema.EncodeSchema(old)
	if err != nil {
		t.Fatal(err)
	}
	next.Schema, next.schema = sb, old
	frags[0].ID = next.NextFragmentID
	next.NextFragmentID++
	next.Fragments = append(next.Fragments, frags[0])
	txn := &Transaction{ID: "legacy", ReadVersion: 1, Operation: OpAppend, Fragments: frags}
	if _, err := tbl.writeTransaction(ctx, txn, next); err != nil {
		t.Fatal(err)
	}
	if err := tbl.putManifest(ctx, next); err != nil {
		t.Fatal(err)
	}
	return frags[0]
}

// parquetFieldIDs returns the Parquet field ids of a data file's top-level columns (-1: none).
func parquetFieldIDs(t *testing.T, ctx context.Context, tbl *Table, rel string) []int32 {
	t.Helper()
	b, err := tbl.Store().Get(ctx, tbl.key(rel))
	if err != nil {
		t.Fatal(err)
	}
	pr, err := file.NewParquetReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	root := pr.MetaData().Schema.Root()
	var ids []int32
	for i := 0; i < root.NumFields(); i++ {
		var n schema.Node = root.Field(i)
		ids = append(ids, n.FieldID())
	}
	return ids
}

func mustLocalStore(t *testing.T) objstore.Store {
	t.Helper()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store
}
