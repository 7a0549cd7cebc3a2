package iceberg_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/iceberg"
)

// TestBurstPublishedInOneCall: 60 epochs with a delete after every 10 (so catching up splits the
// backlog into steps: removals and deletes cannot share a snapshot) are published by one Publish,
// and every retained snapshot reads as its version in PyIceberg and Polars.
func TestBurstPublishedInOneCall(t *testing.T) {
	py := python(t)
	se := storeKinds(t)[0]
	ctx := context.Background()
	tb, err := engine.Create(ctx, se.store, "burst", testSchema, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, tb)
	for e := range 60 {
		if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("b", int64(2*e), int64(2*e+1))}, nil); err != nil {
			t.Fatal(err)
		}
		if e%10 == 9 {
			p, err := expr.ParsePredicate([]byte(`{"op": "<", "column": "id", "value": ` + strconv.Itoa(2*e) + `}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tb.Delete(ctx, p, nil); err != nil {
				t.Fatal(err)
			}
			if e == 29 { // a compaction in the middle: removals and deletes in one backlog
				if _, err := tb.Compact(ctx, engine.CompactOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	latest, err := tb.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := iceberg.New(tb, nil).Publish(ctx)
	t.Logf("published versions %d..%d in %d snapshots, %v", rep.From, rep.To, rep.Snapshots, time.Since(start))
	if err != nil {
		t.Fatalf("one publish of a %d-version backlog: %v", latest.Version-rep.From, err)
	}
	if rep.To != latest.Version {
		t.Fatalf("one publish reached version %d of %d", rep.To, latest.Version)
	}
	verify(t, ctx, py, se, tb)
}

// TestCreatedTablePublishesEmptySnapshot: a table that was only created publishes a metadata
// file whose current snapshot reads no rows, and a publish's first metadata file already holds
// the table's rows (no metadata file without its snapshot).
func TestCreatedTablePublishesEmptySnapshot(t *testing.T) {
	py := python(t)
	se := storeKinds(t)[0]
	ctx := context.Background()
	tb, err := engine.Create(ctx, se.store, "empty", testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, tb)
	st, err := iceberg.New(tb, nil).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.CurrentSnapshotID == 0 || !strings.HasSuffix(st.MetadataFile, "/v1.metadata.json") {
		t.Fatalf("a created table published %+v; want v1.metadata.json with a current snapshot", st)
	}
	verify(t, ctx, py, se, tb)

	full, err := engine.Create(ctx, se.store, "full", testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Append(ctx, []arrow.RecordBatch{rows("f", 1, 2, 3)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, full)
	if st, err = iceberg.New(full, nil).Status(ctx); err != nil || !strings.HasSuffix(st.MetadataFile, "/v1.metadata.json") {
		t.Fatalf("first publish of a table with rows: %+v, %v; want its rows in v1.metadata.json", st, err)
	}
	verify(t, ctx, py, se, full)
}

// TestPublishAcrossRemovedVersions: a backlog whose versions in between a cleanup removed (here
// one without the retention hook; with it, cleanup keeps the published version but not the
// unpublished ones) cannot be split into one snapshot per version. It is published as one snapshot: deletes of rows in data files the snapshot adds, and
// deletes beside removed data files, each in a bounded time and read back exactly.
func TestPublishAcrossRemovedVersions(t *testing.T) {
	py := python(t)
	se := storeKinds(t)[0]
	ctx := context.Background()
	del := func(tb *engine.Table, pred string) { t.Helper(); deleteWhere(t, ctx, tb, pred) }
	add := func(tb *engine.Table, ids ...int64) {
		t.Helper()
		if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("r", ids...)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	publishAfterCleanup := func(tb *engine.Table) {
		t.Helper()
		// No retention hook (engine.Options without CleanupRetain): every version but the
		// latest goes, the published one included.
		if _, err := tb.Cleanup(ctx, engine.CleanupPolicy{KeepLast: 1, OlderThan: time.Second, Grace: time.Hour, Now: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		latest, err := tb.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := iceberg.New(tb, nil).Publish(pctx)
		if err != nil {
			t.Fatalf("publish after cleanup: %v", err)
		}
		if rep.To != latest.Version {
			t.Fatalf("publish reached version %d of %d", rep.To, latest.Version)
		}
		// The retention hook of the next cleanup expires the snapshots of the removed versions.
		if _, err := iceberg.Retain(ctx, tb, latest.Version, false); err != nil {
			t.Fatal(err)
		}
		verify(t, ctx, py, se, tb)
	}

	// Deletes of rows appended since the published version: the append's version is gone.
	appended, err := engine.Create(ctx, se.store, "appended", testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	add(appended, 1, 2, 3, 4)
	mustPublish(t, ctx, appended)
	add(appended, 5, 6, 7, 8)
	del(appended, `{"op": ">=", "column": "id", "value": 7}`)
	publishAfterCleanup(appended)

	// A data file removed (all its rows deleted) and rows deleted from another, in versions
	// that are gone.
	removed, err := engine.Create(ctx, se.store, "removed", testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	add(removed, 1, 2, 3, 4)
	add(removed, 5, 6, 7, 8)
	mustPublish(t, ctx, removed)
	del(removed, `{"op": "<=", "column": "id", "value": 4}`)
	del(removed, `{"op": "=", "column": "id", "value": 5}`)
	publishAfterCleanup(removed)
}
