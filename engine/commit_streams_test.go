package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
)

// A table that has seen many streaming queries keeps at most StreamWatermarksInManifest
// watermarks in each manifest; the others are in the archive, read through StreamWatermark by
// this handle and a new one: a replay of an archived query's last epoch is refused as committed,
// its next epoch commits and brings it back into the manifest, and cleanup removes the archives
// no retained version names while keeping the one the latest names.
func TestStreamWatermarksBeyondTheManifestBound(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		const bound, queries = 8, 40
		tbl := createRowsTable(t, store, "wm", &Options{StreamWatermarksInManifest: bound})
		for i := range queries {
			m, err := commitEpoch(t, tbl, fmt.Sprintf("q%02d", i), 3, idRange(int64(i), 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Streams) > bound {
				t.Fatalf("version %d carries %d watermarks, the bound is %d", m.Version, len(m.Streams), bound)
			}
		}
		archives := listKeys(t, tbl, streamsDir)
		if len(archives) < 2 {
			t.Fatalf("%d archives written for %d queries past a bound of %d", len(archives), queries, bound)
		}
		for _, h := range []*Table{tbl, openTable(t, store, "wm", &Options{StreamWatermarksInManifest: bound})} {
			m := mustLatest(t, h)
			for i := range queries {
				q := fmt.Sprintf("q%02d", i)
				wm, ok, err := h.StreamWatermark(t.Context(), m, q)
				if err != nil || !ok || wm.Epoch != 3 || wm.Version != uint64(i+2) {
					t.Fatalf("watermark of %s: %+v %v %v, want epoch 3 at version %d", q, wm, ok, err, i+2)
				}
			}
		}
		// q00 is archived: its replay is refused, its next epoch lands and is carried again.
		m := mustLatest(t, tbl)
		if _, hot := m.Streams["q00"]; hot || m.StreamsArchive == "" {
			t.Fatalf("q00 still in the manifest (%v) or no archive (%q)", hot, m.StreamsArchive)
		}
		_, err := commitEpoch(t, tbl, "q00", 3, idRange(100, 1))
		requireEpochCommitted(t, err, "q00", 3, 3, 2)
		m, err = commitEpoch(t, tbl, "q00", 4, idRange(100, 1))
		if err != nil {
			t.Fatal(err)
		}
		if wm := m.Streams["q00"]; wm.Epoch != 4 {
			t.Fatalf("q00 after its next epoch: %+v", wm)
		}

		// Cleanup of every version but the latest keeps only the archive the latest names.
		if _, err := tbl.Cleanup(t.Context(), CleanupPolicy{KeepLast: 1, OlderThan: time.Second, Grace: time.Nanosecond,
			Now: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		left := listKeys(t, tbl, streamsDir)
		if len(left) != 1 || left[0] != m.StreamsArchive {
			t.Fatalf("archives after cleanup %v, want only %s", left, m.StreamsArchive)
		}
		if wm, ok, err := tbl.StreamWatermark(t.Context(), m, "q01"); err != nil || !ok || wm.Epoch != 3 {
			t.Fatalf("q01 after cleanup: %+v %v %v", wm, ok, err)
		}
		if !strings.HasPrefix(m.StreamsArchive, streamsDir) {
			t.Fatalf("archive key %q", m.StreamsArchive)
		}
	})
}

func openTable(t testing.TB, store objstore.Store, name string, opts *Options) *Table {
	t.Helper()
	tbl, err := Open(t.Context(), store, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// A commit that wrote its watermark archive and stopped before its manifest (a crash between
// the two) leaves an archive no version names: the table's watermarks are those of the version
// before, the next commit writes an archive of its own, and cleanup removes the orphan.
func TestStreamsArchiveWithoutItsManifest(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		const bound = 4
		crash := false
		opts := &Options{StreamWatermarksInManifest: bound, BeforeManifestWrite: func(uint64) error {
			if crash {
				return errCrash
			}
			return nil
		}}
		tbl := createRowsTable(t, store, "wmcrash", opts)
		for i := range bound {
			if _, err := commitEpoch(t, tbl, fmt.Sprintf("q%d", i), 1, idRange(int64(i), 1)); err != nil {
				t.Fatal(err)
			}
		}
		crash = true
		if _, err := commitEpoch(t, tbl, "q-crash", 1, idRange(10, 1)); !errors.Is(err, errCrash) {
			t.Fatalf("commit with the crash: %v", err)
		}
		crash = false
		orphans := listKeys(t, tbl, streamsDir)
		if len(orphans) != 1 {
			t.Fatalf("archives after the crash: %v, want the one written before it", orphans)
		}
		m := mustLatest(t, tbl)
		if m.StreamsArchive != "" || len(m.Streams) != bound {
			t.Fatalf("latest after the crash names archive %q and %d watermarks", m.StreamsArchive, len(m.Streams))
		}
		m, err := commitEpoch(t, tbl, "q-crash", 1, idRange(10, 1))
		if err != nil {
			t.Fatal(err)
		}
		if m.StreamsArchive == "" || m.StreamsArchive == orphans[0] {
			t.Fatalf("the commit after the crash names archive %q (orphan %s)", m.StreamsArchive, orphans[0])
		}
		if _, err := tbl.Cleanup(t.Context(), CleanupPolicy{KeepLast: 1, OlderThan: time.Second, Grace: time.Nanosecond,
			Now: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if left := listKeys(t, tbl, streamsDir); len(left) != 1 || left[0] != m.StreamsArchive {
			t.Fatalf("archives after cleanup %v, want only %s", left, m.StreamsArchive)
		}
		for i := range bound {
			if wm, ok, err := tbl.StreamWatermark(t.Context(), m, fmt.Sprintf("q%d", i)); err != nil || !ok || wm.Epoch != 1 {
				t.Fatalf("q%d: %+v %v %v", i, wm, ok, err)
			}
		}
	})
}

var errCrash = errors.New("crash before the manifest")
