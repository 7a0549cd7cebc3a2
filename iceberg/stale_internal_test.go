package iceberg

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestSchemaChangeOverNewerMetadata: a publisher that read the metadata at version a and
// publishes a version whose schema grew commits the schema first; when another publisher
// published a newer snapshot meanwhile (no schema change, so the schema commit lands on it),
// the step does not go on from version a over that snapshot, which would add its data files a
// second time (readers read their rows twice, and a later removal of one fails "cannot delete
// data files that do not belong to the table").
func TestSchemaChangeOverNewerMetadata(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	tb, err := engine.Create(ctx, store, "stale", arrow.NewSchema([]arrow.Field{id}, nil), engine.CreateOptions{}, &engine.Options{CleanupRetain: Retain})
	if err != nil {
		t.Fatal(err)
	}
	appendIDs := func(sc *arrow.Schema, ids ...int64) *engine.Manifest {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for i := range sc.NumFields() {
			b.Field(i).(*array.Int64Builder).AppendValues(ids, nil)
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		m, err := tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	p := New(tb, nil)
	appendIDs(arrow.NewSchema([]arrow.Field{id}, nil), 1, 2)
	if _, err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}

	// The slow publisher reads the metadata; another publishes an append; then a version adds
	// a column.
	fio := newStoreIO(ctx, store)
	cat := newStoreCatalog(fio, tb.Name())
	stale, _, err := cat.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub := publishedVersion(stale.Metadata())
	appendIDs(arrow.NewSchema([]arrow.Field{id}, nil), 3)
	if _, err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	grown := appendMerged(t, ctx, tb, arrow.NewSchema([]arrow.Field{id, {Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil), 4)

	if _, _, err := p.step(ctx, fio, cat, stale, pub, grown); err != nil && !errors.Is(err, table.ErrCommitFailed) {
		t.Fatalf("step from version %d: %v", pub, err)
	}
	if _, err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	cur, _, err := cat.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap := cur.CurrentSnapshot()
	if got := snap.Summary.Properties["total-data-files"]; got != strconv.Itoa(len(grown.Fragments)) {
		t.Fatalf("the snapshot of version %s reads %s data files, the version has %d", snap.Summary.Properties[PropVersion], got, len(grown.Fragments))
	}
	if got := snap.Summary.Properties["total-records"]; got != "4" {
		t.Fatalf("the snapshot reads %s rows, want 4", got)
	}
}

// appendMerged appends one row of id to tb the way a merge_schema epoch does: in the table's
// schema merged with sc (every column set to id).
func appendMerged(t *testing.T, ctx context.Context, tb *engine.Table, sc *arrow.Schema, id int64) *engine.Manifest {
	t.Helper()
	base, err := tb.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	merged, changed, err := engine.SchemaForWrite(base, sc)
	if err != nil || !changed {
		t.Fatalf("merge schema: changed %v, %v", changed, err)
	}
	w, err := tb.NewWriterFor(merged, sc)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range sc.NumFields() {
		b.Field(i).(*array.Int64Builder).Append(id)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	txn := &engine.Transaction{Operation: engine.OpAppend, ReadVersion: base.Version, Fragments: frags, FilesDurable: w.Durable}
	if err := txn.SetSchema(merged); err != nil {
		t.Fatal(err)
	}
	m, err := tb.Commit(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
