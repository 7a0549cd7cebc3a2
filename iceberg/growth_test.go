package iceberg_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestMetadataGrowth measures a 1-second-trigger table's Iceberg metadata after
// FLIGHT_SINK_ICEBERG_EPOCHS one-row appends, each published (skipped when unset: it is a
// measurement, docs/iceberg.md quotes it). Manifests merge (commit.manifest-merge.enabled), so
// what grows is the snapshot list of the metadata file, which cleanup's expiry bounds.
func TestMetadataGrowth(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLIGHT_SINK_ICEBERG_EPOCHS"))
	if n <= 0 {
		t.Skip("set FLIGHT_SINK_ICEBERG_EPOCHS to measure")
	}
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "growth", testSchema, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
	if err != nil {
		t.Fatal(err)
	}
	p := iceberg.New(tb, nil)
	start := time.Now()
	report := func(i int) {
		objs, err := store.List(ctx, "growth/metadata/", "")
		if err != nil {
			t.Fatal(err)
		}
		var total, newest, manifests, lists, deletes int64
		files := 0
		st, err := p.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			total += o.Size
			files++
			switch name := o.Key[strings.LastIndex(o.Key, "/")+1:]; {
			case strings.HasSuffix(st.MetadataFile, "/"+name):
				newest = o.Size
			case strings.HasPrefix(name, "snap-"):
				lists++
			case strings.HasSuffix(name, ".avro"):
				manifests++
			case strings.HasSuffix(name, ".parquet"):
				deletes++
			}
		}
		t.Logf("after %d epochs (%.0fs): metadata/ %d files, %d bytes; newest metadata.json %d bytes; %d manifest lists, %d manifests; %d snapshots",
			i, time.Since(start).Seconds(), files, total, newest, lists, manifests, st.Snapshots)
	}
	for i := 1; i <= n; i++ {
		if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("g", int64(i))}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
		if i%600 == 0 || i == n {
			report(i)
		}
	}
	// Cleanup with a short retention expires the snapshots with their versions.
	if _, err := tb.Cleanup(ctx, engine.CleanupPolicy{OlderThan: time.Second, KeepLast: 100, Grace: time.Second, Now: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	t.Log("after cleanup keeping the last 100 versions:")
	report(n)
}
