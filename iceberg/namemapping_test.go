package iceberg_test

import (
	"context"
	"encoding/json"
	"path"
	"regexp"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/objstore"
)

const nameMappingKey = "schema.name-mapping.default"

// metadataProperties returns the table properties of tb's newest Iceberg metadata file.
func metadataProperties(t *testing.T, ctx context.Context, store objstore.Store, name string) map[string]string {
	t.Helper()
	_, b, err := iceberg.LatestMetadata(ctx, store, name)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Properties map[string]string `json:"properties"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	return meta.Properties
}

// appendWithoutFieldIDs commits a data file written without Parquet field ids, as the files of
// a table written before tables had field ids are.
func appendWithoutFieldIDs(t *testing.T, ctx context.Context, tb *engine.Table, ids ...int64) {
	t.Helper()
	m, err := tb.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tb.NewWriterFor(arrowschema.StripFieldIDs(m.ArrowSchema()), testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec := rows("legacy", ids...)
	defer rec.Release()
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Commit(ctx, &engine.Transaction{Operation: engine.OpAppend, Fragments: frags}); err != nil {
		t.Fatal(err)
	}
}

// TestNameMappingOnlyForFilesWithoutFieldIDs: a table whose data files carry field ids publishes
// no name mapping (iceberg-rust reads nested columns through one as null); a data file without
// field ids adds the mapping, which stays, and every reader reads both kinds of files; a
// mapping an earlier publisher wrote for files that all carry ids is removed by the next
// publish.
func TestNameMappingOnlyForFilesWithoutFieldIDs(t *testing.T) {
	ctx := context.Background()
	se := storeKinds(t)[0]
	opts := &engine.Options{CleanupRetain: iceberg.Retain}

	tb, err := engine.Create(ctx, se.store, "with_ids", testSchema, engine.CreateOptions{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("a", 1, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, tb)
	if nm, ok := metadataProperties(t, ctx, se.store, "with_ids")[nameMappingKey]; ok {
		t.Fatalf("a table whose files carry field ids publishes a name mapping: %s", nm)
	}

	legacy, err := engine.Create(ctx, se.store, "legacy", testSchema, engine.CreateOptions{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.Append(ctx, []arrow.RecordBatch{rows("a", 1, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, legacy)
	appendWithoutFieldIDs(t, ctx, legacy, 3, 4)
	mustPublish(t, ctx, legacy)
	if _, ok := metadataProperties(t, ctx, se.store, "legacy")[nameMappingKey]; !ok {
		t.Fatalf("a table holding a file without field ids publishes no name mapping")
	}
	if _, err := legacy.Append(ctx, []arrow.RecordBatch{rows("b", 5)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, legacy)
	if _, ok := metadataProperties(t, ctx, se.store, "legacy")[nameMappingKey]; !ok {
		t.Fatalf("the name mapping of a table holding a file without field ids was dropped")
	}
	legacyMapped := legacy

	// An earlier publisher's metadata: the newest file with a name mapping, and no mark.
	loc, b, err := iceberg.LatestMetadata(ctx, se.store, "with_ids")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	meta["properties"].(map[string]any)[nameMappingKey] = `[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["name"]}, {"field-id": 3, "names": ["score"]}]`
	n, err := strconv.Atoi(regexp.MustCompile(`v(\d+)\.metadata\.json$`).FindStringSubmatch(loc)[1])
	if err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := se.store.PutIfAbsent(ctx, path.Join("with_ids", "metadata", "v"+strconv.Itoa(n+1)+".metadata.json"), b); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("c", 6)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, tb)
	if nm, ok := metadataProperties(t, ctx, se.store, "with_ids")[nameMappingKey]; ok {
		t.Fatalf("the name mapping of an earlier publisher stays on a table whose files all carry field ids: %s", nm)
	}
	py := python(t)
	verify(t, ctx, py, se, legacyMapped)
	verify(t, ctx, py, se, tb)
}
