package engine

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestMaintainerStreamingHour is a streaming table's first hour at one epoch per second (3,600
// small append epochs) with nothing configured: the default maintenance (background compaction
// once small fragments pile up, cleanup past retention) keeps the manifest small, and every row
// is there exactly once. Epochs commit as fast as they can, which is harder on maintenance than
// one a second: on a loaded machine background compaction falls behind (it once let 78
// fragments pile up), so the test asserts the bound that holds under any load, the fragment
// ceiling (compaction.max_fragments, default 64) plus the one commit in flight, at every
// version including the ones maintenance wrote, not the peak an idle machine happens to reach.
//
// The suite runs 600 epochs (on S3 200); FLIGHT_SINK_MAINTAIN_EPOCHS=3600 runs the full hour.
func TestMaintainerStreamingHour(t *testing.T) {
	epochs := map[string]int{"local": 600, "s3": 200}
	if v := os.Getenv("FLIGHT_SINK_MAINTAIN_EPOCHS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FLIGHT_SINK_MAINTAIN_EPOCHS=%q", v)
		}
		epochs = map[string]int{"local": n, "s3": n}
	}
	const rowsPerEpoch = 10
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		n := epochs["local"]
		if _, isLocal := store.(*objstore.Local); !isLocal {
			n = epochs["s3"]
		}
		tbl := createRowsTable(t, store, "stream", nil)
		mt := NewTableMaintainer(tbl, nil)
		if cfg, err := MaintenanceConfigOf(hLatest(t, tbl)); err != nil || cfg.Mode != MaintenanceBackground {
			t.Fatalf("default maintenance: %+v %v", cfg, err)
		}
		start := time.Now()
		var want []int64
		maxFrags, maxManifest := 0, 0
		for e := 1; e <= n; e++ {
			ids := idRange(int64(e)*rowsPerEpoch, rowsPerEpoch)
			want = append(want, ids...)
			m := appendIDs(t, tbl, ids, EpochProperties(epochid.ID{QueryID: "spark-query", EpochID: int64(e)}, nil))
			if err := mt.MaintainAfterCommit(ctx, m); err != nil {
				t.Fatal(err)
			}
			b, err := encodeManifest(m)
			if err != nil {
				t.Fatal(err)
			}
			maxFrags, maxManifest = max(maxFrags, len(m.Fragments)), max(maxManifest, len(b))
		}
		if err := mt.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		final := hLatest(t, tbl)
		b, _ := encodeManifest(final)
		vs, _ := tbl.Versions(ctx)
		var rewrites int
		if hist, err := tbl.History(ctx, len(vs)); err == nil {
			for _, h := range hist {
				if h.Operation == OpRewrite {
					rewrites++
				}
			}
		}
		t.Logf("%d epochs in %v: fragments max %d final %d; manifest bytes max %d final %d; %d versions, %d compactions",
			n, time.Since(start).Round(time.Millisecond), maxFrags, len(final.Fragments), maxManifest, len(b), len(vs), rewrites)
		// One writer: one commit in flight. Every fragment here is small (10 rows).
		const bound = defaultMaxFragments + 1
		if maxFrags > bound || len(final.Fragments) > bound {
			t.Fatalf("fragments reached %d (final %d), the ceiling allows %d", maxFrags, len(final.Fragments), bound)
		}
		requireFragmentCeiling(t, tbl, bound)
		// 65 fragments and one query's watermark fit well in 32 KiB whatever the history's length.
		if maxManifest > 32<<10 {
			t.Fatalf("manifest grew to %d bytes", maxManifest)
		}
		if wm := final.Streams["spark-query"]; wm.Epoch != int64(n) {
			t.Fatalf("watermark %+v, want epoch %d", wm, n)
		}
		requireSameIDs(t, "rows after the run", scanRows(t, tbl, 0), want)
	})
}
