package streaming

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// dedupeQuery is the query that wrote every epoch of BenchmarkDedupeCheck's tables.
const dedupeQuery = "bench-query"

// BenchmarkDedupeCheck measures deciding whether an incoming (query_id, epoch_id) is a replay,
// through EpochStatus: the same check WriteEpoch runs before it reads an epoch's data, without
// the write. It runs on tables of 100 and 10,000 versions on local disk, with the look-back window
// as long as the table (10,000 is MaxLookback), for the four answers the check gives:
//
//   - replay-watermark: the query's newest epoch, answered by the manifest watermark (O(1));
//   - replay-in-window: the query's oldest epoch, below the watermark, found by scanning the whole
//     window;
//   - new-epoch: the epoch after the watermark, answered by the watermark (O(1));
//   - new-query: a query the table has never seen, which scans the whole window and finds nothing
//     (the first epoch of every new streaming query pays this).
//
// Run it with
//
//	go test ./streaming -run '^$' -bench BenchmarkDedupeCheck -benchtime 20x
func BenchmarkDedupeCheck(b *testing.B) {
	root := b.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, versions := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("versions=%d", versions), func(b *testing.B) {
			name := fmt.Sprintf("history_%d", versions)
			buildEpochHistory(b, root, name, versions)
			// The sink opens its own handle, as a server does; the window covers the whole table.
			sink := NewSink(store, &Options{DefaultLookback: versions})
			defer sink.Close()
			newest := int64(versions - 1) // epochs 1..versions-1 are versions 2..versions
			for _, c := range []struct {
				name      string
				query     string
				epoch     int64
				committed bool
				version   uint64
			}{
				{"replay-watermark", dedupeQuery, newest, true, uint64(versions)},
				{"replay-in-window", dedupeQuery, 1, true, 2},
				{"new-epoch", dedupeQuery, newest + 1, false, 0},
				{"new-query", "another-query", 0, false, 0},
			} {
				b.Run("case="+c.name, func(b *testing.B) {
					check := func() {
						st, err := sink.EpochStatus(b.Context(), name, c.query, c.epoch)
						if err != nil {
							b.Fatalf("epoch status of (%s, %d): %v", c.query, c.epoch, err)
						}
						if st.Committed != c.committed || st.Version != c.version {
							b.Fatalf("epoch status of (%s, %d): committed %v at version %d, want %v at %d",
								c.query, c.epoch, st.Committed, st.Version, c.committed, c.version)
						}
					}
					check() // untimed: also opens and warms the sink's table handle
					b.ReportAllocs()
					for b.Loop() {
						check()
					}
				})
			}
		})
	}
}

// buildEpochHistory creates table name under the local store directory root with versions
// versions: the creation, then one streaming commit per epoch 1..versions-1 of dedupeQuery.
//
// The commits carry no data: the check reads only the watermark and the manifest headers of the
// window, which data would not change, and empty commits keep every manifest small. Each commit
// still fsyncs its files, which makes 10,000 of them take a quarter of a minute on a disk; so the
// table is committed on a RAM file system when there is one and copied into root (unsynced: the
// benchmark only reads it).
func buildEpochHistory(b *testing.B, root, name string, versions int) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	scratch := root
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if scratch, err = os.MkdirTemp("/dev/shm", "flight-sink-bench-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(scratch)
	}
	store, err := objstore.NewLocal(scratch)
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := engine.Create(ctx, store, name, testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for e := int64(1); e < int64(versions); e++ {
		txn := &engine.Transaction{
			Operation:  engine.OpAppend,
			Properties: engine.EpochProperties(epochid.ID{QueryID: dedupeQuery, EpochID: e}, nil),
		}
		if _, err := tbl.Commit(ctx, txn); err != nil {
			b.Fatalf("commit epoch %d: %v", e, err)
		}
	}
	if scratch != root {
		if err := os.CopyFS(filepath.Join(root, name), os.DirFS(filepath.Join(scratch, name))); err != nil {
			b.Fatalf("copy the history of %s to %s: %v", name, root, err)
		}
	}
	b.Logf("built %d versions in %v", versions, time.Since(start).Round(time.Millisecond))
}
