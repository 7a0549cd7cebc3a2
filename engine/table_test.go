package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestCreateAndOpenErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		if _, err := Open(ctx, store, "missing", nil); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("open missing table: got %v, want ErrTableNotFound", err)
		}
		createRowsTable(t, store, "events", nil)
		if _, err := Create(ctx, store, "events", rowsSchema, CreateOptions{}, nil); !errors.Is(err, ErrTableExists) {
			t.Fatalf("create existing table: got %v, want ErrTableExists", err)
		}
		if _, err := Create(ctx, store, "keyed", rowsSchema, CreateOptions{PrimaryKey: []string{"nope"}}, nil); err == nil ||
			!strings.Contains(err.Error(), "nope") {
			t.Fatalf("create with unknown primary key column: got %v, want an error naming it", err)
		}
		tbl, err := Open(ctx, store, "events", nil)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if v := latestVersion(t, tbl); v != 1 {
			t.Fatalf("new table is at version %d, want 1", v)
		}
		m, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !arrowschema.EqualIgnoringFieldIDs(m.ArrowSchema(), rowsSchema) || m.Rows() != 0 || m.Transaction.Operation != OpCreate {
			t.Fatalf("version 1: schema %s, %d rows, operation %s", m.ArrowSchema(), m.Rows(), m.Transaction.Operation)
		}
	})
}

func TestInvalidTableNames(t *testing.T) {
	bad := []string{"", "../x", "..", ".hidden", "a/b", "/abs", `a\b`, "_versions", "a..b", " x", "x y",
		strings.Repeat("a", 129)}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		for _, name := range bad {
			if _, err := Create(ctx, store, name, rowsSchema, CreateOptions{}, nil); !errors.Is(err, ErrInvalidTableName) {
				t.Errorf("Create(%q): got %v, want ErrInvalidTableName", name, err)
			}
			if _, err := Open(ctx, store, name, nil); !errors.Is(err, ErrInvalidTableName) {
				t.Errorf("Open(%q): got %v, want ErrInvalidTableName", name, err)
			}
		}
		objs, err := store.List(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 0 {
			t.Fatalf("invalid names wrote %d objects, first %s", len(objs), objs[0].Key)
		}
		for _, good := range []string{"a", "events", "Events-2024.v1", "x_y", strings.Repeat("a", 128)} {
			if err := ValidateTableName(good); err != nil {
				t.Errorf("ValidateTableName(%q): %v", good, err)
			}
		}
	})
}

// TestTimeTravel checks that every version reads back exactly what it held, that ManifestAsOf
// picks versions by commit time, and that History is newest first, bounded, and reports a
// removed manifest instead of failing.
func TestTimeTravel(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "tt", nil)
		const appends, per = 5, 10
		manifests := []*Manifest{mustLatest(t, tbl)}
		for k := range int64(appends) {
			m := appendIDs(t, tbl, idRange(k*100, per), map[string]string{"batch": strconv.FormatInt(k, 10)})
			manifests = append(manifests, m)
		}
		last := uint64(appends + 1)
		requireDenseVersions(t, tbl, last)

		// Version v holds the first v-1 appends, from a fresh handle too.
		fresh, err := Open(ctx, store, "tt", nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for v := uint64(1); v <= last; v++ {
			if v > 1 {
				want = append(want, idRange(int64(v-2)*100, per)...)
			}
			requireSameIDs(t, "version "+strconv.FormatUint(v, 10), scanRows(t, fresh, v), want)
			if got := manifests[v-1].Rows(); got != int64(len(want)) {
				t.Fatalf("manifest %d counts %d rows, want %d", v, got, len(want))
			}
		}

		// ManifestAsOf: exact commit times, points between commits, before the first, after the last.
		for i, m := range manifests {
			got, err := fresh.ManifestAsOf(ctx, m.Timestamp())
			if err != nil || got.Version != m.Version {
				t.Fatalf("ManifestAsOf(commit time of %d): version %v, err %v", m.Version, versionOf(got), err)
			}
			if i+1 < len(manifests) {
				mid := m.Timestamp().Add(manifests[i+1].Timestamp().Sub(m.Timestamp()) / 2)
				if got, err := fresh.ManifestAsOf(ctx, mid); err != nil || got.Version != m.Version {
					t.Fatalf("ManifestAsOf(between %d and %d): version %v, err %v", m.Version, m.Version+1, versionOf(got), err)
				}
			}
		}
		if _, err := fresh.ManifestAsOf(ctx, manifests[0].Timestamp().Add(-time.Nanosecond)); !errors.Is(err, ErrVersionNotFound) {
			t.Fatalf("ManifestAsOf(before creation): got %v, want ErrVersionNotFound", err)
		}
		if got, err := fresh.ManifestAsOf(ctx, time.Now().Add(time.Hour)); err != nil || got.Version != last {
			t.Fatalf("ManifestAsOf(future): version %v, err %v", versionOf(got), err)
		}

		// History: newest first, bounded by the lookback.
		hist, err := fresh.History(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 3 {
			t.Fatalf("History(3) returned %d entries", len(hist))
		}
		for i, h := range hist {
			m := manifests[last-1-uint64(i)]
			if h.Missing || h.Version != m.Version || h.Operation != OpAppend || !h.Timestamp.Equal(m.Timestamp()) ||
				h.ReadVersion != m.Version-1 || h.TransactionFile != m.Transaction.File ||
				h.Properties["batch"] != strconv.FormatUint(m.Version-2, 10) {
				t.Fatalf("History(3)[%d] = %+v, want version %d with batch %d", i, h, m.Version, m.Version-2)
			}
		}
		all, err := fresh.History(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != int(last) || all[len(all)-1].Version != 1 || all[len(all)-1].Operation != OpCreate {
			t.Fatalf("History(100) on %d versions: %d entries, oldest %+v", last, len(all), all[len(all)-1])
		}
		if h, err := fresh.History(ctx, 0); err != nil || len(h) != 0 {
			t.Fatalf("History(0): %d entries, err %v", len(h), err)
		}

		// A manifest removed from inside the window (as cleanup would) shows up as Missing.
		const gone = 4
		if err := store.Delete(ctx, tbl.key(makeManifestKey(gone))); err != nil {
			t.Fatal(err)
		}
		hist, err = fresh.History(ctx, 10)
		if err != nil {
			t.Fatalf("History with a removed manifest: %v", err)
		}
		if len(hist) != int(last) {
			t.Fatalf("History(10) returned %d entries, want %d", len(hist), last)
		}
		for _, h := range hist {
			if (h.Version == gone) != h.Missing {
				t.Fatalf("History entry %+v: Missing should be set for version %d only", h, gone)
			}
			if h.Version == 0 {
				t.Fatalf("History entry without a version: %+v", h)
			}
		}
		if _, err := fresh.Scan(ctx, ScanOptions{Version: gone}); !errors.Is(err, ErrVersionNotFound) {
			t.Fatalf("scan of a removed version: got %v, want ErrVersionNotFound", err)
		}
		if got, err := fresh.ManifestAsOf(ctx, manifests[gone-1].Timestamp()); err != nil || got.Version != gone-1 {
			t.Fatalf("ManifestAsOf(time of removed version %d): version %v, err %v; want %d", gone, versionOf(got), err, gone-1)
		}
	})
}

func mustLatest(t testing.TB, tbl *Table) *Manifest {
	t.Helper()
	m, err := tbl.Latest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func versionOf(m *Manifest) any {
	if m == nil {
		return nil
	}
	return m.Version
}

// TestCorruptManifest plants a bad manifest as the newest version and checks that every read of
// it fails with the right sentinel and the file's name, and that nothing commits on top of it.
func TestCorruptManifest(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(good []byte) []byte
		want    error
		history bool // whether History's header read must fail too
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, ErrCorruptManifest, false},
		{"truncated-header", func(b []byte) []byte { return b[:20] }, ErrCorruptManifest, true},
		{"empty", func([]byte) []byte { return []byte{} }, ErrCorruptManifest, true},
		{"garbage", func([]byte) []byte { return []byte("\x00\xffnot a manifest at all\n") }, ErrCorruptManifest, true},
		{"wrong-json", func([]byte) []byte { return []byte(`[1,2,3]`) }, ErrCorruptManifest, true},
		{"format-99", func(b []byte) []byte {
			out := bytes.Replace(b, []byte(fmt.Sprintf(`"format_version":%d,`, FormatVersion)), []byte(`"format_version":99,`), 1)
			if bytes.Equal(out, b) {
				panic("manifest does not start with this build's format_version")
			}
			return out
		}, ErrUnsupportedFormat, true},
	}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				name := "c-" + tc.name
				tbl := createRowsTable(t, store, name, nil)
				appendIDs(t, tbl, idRange(0, 10), nil)
				appendIDs(t, tbl, idRange(10, 10), nil) // tbl has now seen version 3

				// Version 4 is committed by another handle, then its bytes go bad.
				other, err := Open(ctx, store, name, nil)
				if err != nil {
					t.Fatal(err)
				}
				appendIDs(t, other, idRange(20, 10), nil)
				key := tbl.key(makeManifestKey(4))
				good, err := store.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Put(ctx, key, bytes.NewReader(tc.corrupt(good))); err != nil {
					t.Fatal(err)
				}
				dataBefore := len(listKeys(t, tbl, dataDir))
				txnsBefore := len(listKeys(t, tbl, transactionsDir))

				check := func(what string, err error) {
					t.Helper()
					if !errors.Is(err, tc.want) {
						t.Fatalf("%s: got %v, want an error wrapping %v", what, err, tc.want)
					}
					if !strings.Contains(err.Error(), makeManifestKey(4)) {
						t.Fatalf("%s: error %q does not name the file %s", what, err, makeManifestKey(4))
					}
				}
				_, err = Open(ctx, store, name, nil)
				check("Open", err)
				_, err = tbl.Latest(ctx)
				check("Latest", err)
				_, err = tbl.Manifest(ctx, 4)
				check("Manifest(4)", err)
				_, err = tbl.Scan(ctx, ScanOptions{})
				check("Scan(latest)", err)
				if tc.history {
					_, err = tbl.HistoryFrom(ctx, 4, 2)
					check("HistoryFrom(4)", err)
				}

				// Nothing commits on top of the bad version.
				rec := makeRows(idRange(100, 5))
				defer rec.Release()
				if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err == nil {
					t.Fatal("append on top of a bad manifest succeeded")
				}
				if _, err := tbl.Commit(ctx, &Transaction{Operation: OpAppend}); err == nil {
					t.Fatal("commit on top of a bad manifest succeeded")
				}
				if _, err := tbl.Overwrite(ctx, rowsSchema, nil, nil); err == nil {
					t.Fatal("overwrite on top of a bad manifest succeeded")
				}
				requireDenseVersions(t, tbl, 4)
				if n := len(listKeys(t, tbl, dataDir)); n != dataBefore {
					t.Fatalf("failed writes left %d new data files", n-dataBefore)
				}
				if n := len(listKeys(t, tbl, transactionsDir)); n != txnsBefore {
					t.Fatalf("failed writes left %d new transaction files", n-txnsBefore)
				}
				// Older versions stay readable.
				requireSameIDs(t, "version 3", scanRows(t, tbl, 3), idRange(0, 20))
			})
		}
	})
}

// TestHistoryLargeProperties commits transactions whose properties do not fit History's first
// ranged read of a manifest: History must read on and still return them whole.
func TestHistoryLargeProperties(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := createRowsTable(t, store, "bigprops", nil)
		big := map[string]string{}
		for i := range 40 {
			big[fmt.Sprintf("key-%02d", i)] = strings.Repeat(string(rune('a'+i%26)), 500)
		}
		m := appendIDs(t, tbl, idRange(0, 3), big)
		appendIDs(t, tbl, idRange(3, 3), map[string]string{"small": "1"})
		hist, err := tbl.History(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 3 || hist[1].Version != m.Version || len(hist[1].Properties) != len(big) ||
			hist[1].Properties["key-39"] != big["key-39"] || hist[0].Properties["small"] != "1" {
			t.Fatalf("history with %d bytes of properties: %d entries, version %d has %d properties",
				40*500, len(hist), hist[1].Version, len(hist[1].Properties))
		}
	})
}

// TestStaleHandleAfterCleanup keeps a handle idle while other writers move the table on and old
// versions are removed (as a retention cleanup does, the newest ones kept). The idle handle's
// cached version is gone: it must still find the true latest version and commit after it, never
// re-create a removed version number on top of its stale state.
func TestStaleHandleAfterCleanup(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "stale", nil)
		appendIDs(t, tbl, idRange(0, 5), nil)
		appendIDs(t, tbl, idRange(5, 5), nil) // tbl has seen version 3
		other, err := Open(ctx, store, "stale", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range int64(5) {
			appendIDs(t, other, idRange(10+k*5, 5), nil) // versions 4..8
		}
		for v := uint64(1); v <= 5; v++ {
			if err := store.Delete(ctx, tbl.key(makeManifestKey(v))); err != nil {
				t.Fatal(err)
			}
		}

		if v := latestVersion(t, tbl); v != 8 {
			t.Fatalf("stale handle: Latest is version %d, want 8", v)
		}
		m := appendIDs(t, tbl, idRange(100, 5), nil)
		if m.Version != 9 {
			t.Fatalf("stale handle committed version %d, want 9", m.Version)
		}
		requireSameIDs(t, "after the stale handle's append", scanRows(t, other, 0),
			append(idRange(0, 35), idRange(100, 5)...))
		vs, err := other.Versions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(vs) != "[6 7 8 9]" {
			t.Fatalf("versions after cleanup and one more commit: %v, want [6 7 8 9]", vs)
		}
	})
}

// TestManifestDataBytes: a version's DataBytes is the stored size of its fragments' data files,
// and a fragment's the size of its own.
func TestManifestDataBytes(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createRowsTable(t, store, "bytes", nil)
	if n := mustLatest(t, tbl).DataBytes(); n != 0 {
		t.Fatalf("an empty table holds %d data bytes", n)
	}
	appendIDs(t, tbl, idRange(0, 100), nil)
	m := appendIDs(t, tbl, idRange(100, 1000), nil)
	var total int64
	for _, f := range m.Fragments {
		var stored int64
		for _, df := range f.Files {
			oi, err := store.Stat(t.Context(), tbl.key(df.Path))
			if err != nil {
				t.Fatal(err)
			}
			stored += oi.Size
		}
		if f.DataBytes() != stored || stored == 0 {
			t.Errorf("fragment %d: DataBytes %d, stored %d", f.ID, f.DataBytes(), stored)
		}
		total += stored
	}
	if m.DataBytes() != total {
		t.Errorf("DataBytes %d, stored %d", m.DataBytes(), total)
	}
}

// TestCompactionPlanReportMatchesCompaction: what a plan reports (a dry run) is what the
// compaction of that version then reports, but for what only running it tells.
func TestCompactionPlanReportMatchesCompaction(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tbl := createRowsTable(t, store, "plan", nil)
	for i := range int64(4) {
		appendIDs(t, tbl, idRange(i*10, 10), nil)
	}
	if _, err := tbl.Delete(t.Context(), expr.In("id", 3, 14, 15), nil); err != nil {
		t.Fatal(err)
	}
	m := mustLatest(t, tbl)
	planned := tbl.PlanCompaction(m, CompactOptions{}).Report()
	txn, done, err := tbl.PrepareCompaction(t.Context(), m, CompactOptions{})
	if err != nil || txn == nil {
		t.Fatalf("prepare compaction: %v, %v", txn, err)
	}
	tbl.Discard(t.Context(), txn)
	done.FragmentsAdded, done.BytesWritten, done.Duration = 0, 0, 0
	if planned != done || planned.RowsRewritten != 37 || planned.DeletedRowsDropped != 3 || planned.BytesRead != m.DataBytes() {
		t.Fatalf("plan reports %+v, the compaction %+v", planned, done)
	}
}
