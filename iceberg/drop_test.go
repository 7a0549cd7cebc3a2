package iceberg_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
)

// TestPublishOverDroppedTablesMetadata: Iceberg metadata of a dropped table of the same name (a
// publisher of it committed after the drop removed its metadata) is not built on: the table
// created again publishes its own rows only, every snapshot mirroring one of its versions.
func TestPublishOverDroppedTablesMetadata(t *testing.T) {
	py := python(t)
	for _, se := range storeKinds(t) {
		t.Run(se.name, func(t *testing.T) {
			ctx := context.Background()
			opts := &engine.Options{CleanupRetain: iceberg.Retain}
			old, err := engine.Create(ctx, se.store, "again", testSchema, engine.CreateOptions{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := old.Append(ctx, []arrow.RecordBatch{rows("old", 1, 2, 3)}, nil); err != nil {
				t.Fatal(err)
			}
			mustPublish(t, ctx, old)
			// What the late publisher of the dropped table leaves: its metadata files.
			objs, err := se.store.List(ctx, "again/metadata/", "")
			if err != nil {
				t.Fatal(err)
			}
			late := map[string][]byte{}
			for _, o := range objs {
				if late[o.Key], err = se.store.Get(ctx, o.Key); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := engine.Drop(ctx, se.store, "again"); err != nil {
				t.Fatal(err)
			}
			tb, err := engine.Create(ctx, se.store, "again", testSchema, engine.CreateOptions{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			var latest *engine.Manifest
			for _, id := range []int64{10, 20, 30} { // versions beyond the dropped table's newest
				if latest, err = tb.Append(ctx, []arrow.RecordBatch{rows("new", id)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			for k, b := range late {
				if err := se.store.Put(ctx, k, bytes.NewReader(b)); err != nil {
					t.Fatal(err)
				}
			}
			if rep := mustPublish(t, ctx, tb); rep.To != latest.Version {
				t.Fatalf("published up to version %d, want %d", rep.To, latest.Version)
			}
			verify(t, ctx, py, se, tb)
		})
	}
}
