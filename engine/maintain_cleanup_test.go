package engine

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestCleanupPolicy(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := hCreate(t, store, "clean", false, &Options{TargetRowsPerFragment: 1000})
		for i := range int64(6) {
			hAppend(t, tbl, hRange(i*10, 10), "a") // versions 2..7
			if i == 0 {
				stale := hOpen(t, store, "clean", nil) // last sees version 2, until used below
				defer func() {
					hRequireRows(t, "stale handle after cleanup", hRead(t, stale, 0), hRead(t, tbl, 0))
				}()
			}
		}
		if _, err := tbl.Delete(ctx, expr.Lt("id", 5), nil); err != nil { // 8
			t.Fatal(err)
		}
		if _, err := tbl.Delete(ctx, expr.Lt("id", 8), nil); err != nil { // 9: replaces 8's deletion file
			t.Fatal(err)
		}
		if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil { // 10: replaces every data file
			t.Fatal(err)
		}
		hAppend(t, tbl, hRange(100, 10), "a") // 11
		want := hRead(t, tbl, 0)
		allData := hKeys(t, tbl, dataDir)

		// Nothing is old enough yet: the default policy keeps a week.
		rep, err := tbl.Cleanup(ctx, CleanupPolicy{})
		if err != nil || len(rep.VersionsRemoved) != 0 || len(rep.FilesRemoved) != 0 {
			t.Fatalf("default cleanup of a fresh table: %+v %v", rep, err)
		}

		// In a minute, keeping the last 2 versions (10, 11): versions 1..9 go, and with them the
		// data files only versions before the compaction referenced, both deletion files and the
		// transaction files of 1..9.
		future := CleanupPolicy{Now: time.Now().Add(time.Minute), OlderThan: 30 * time.Second, KeepLast: 2, Grace: 30 * time.Second}
		dry := future
		dry.DryRun = true
		dryRep, err := tbl.Cleanup(ctx, dry)
		if err != nil {
			t.Fatal(err)
		}
		if len(hKeys(t, tbl, versionsDir)) != 11 || len(hKeys(t, tbl, dataDir)) != len(allData) {
			t.Fatal("a dry run removed files")
		}
		var progressed atomic.Int64
		future.Progress = func(CleanupProgress) { progressed.Add(1) }
		realRep, err := tbl.Cleanup(ctx, future)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(realRep.VersionsRemoved, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("removed versions %v", realRep.VersionsRemoved)
		}
		hRequireSameReport(t, dryRep, realRep)
		if realRep.DataFilesRemoved != 6 || realRep.DeletionFilesRemoved != 2 || realRep.TransactionFilesRemoved != 9 {
			t.Fatalf("report %+v, want 6 data, 2 deletion and 9 transaction files", realRep.OrphanReport)
		}
		if progressed.Load() == 0 {
			t.Fatal("no progress reported")
		}
		if vs, _ := tbl.Versions(ctx); !slices.Equal(vs, []uint64{10, 11}) {
			t.Fatalf("versions left: %v", vs)
		}
		hRequireRows(t, "latest after cleanup", hRead(t, tbl, 0), want)
		at10 := hRead(t, tbl, 10)
		for id := int64(100); id < 110; id++ {
			at10[id] = "a"
		}
		hRequireRows(t, "version 10 after cleanup", at10, want)
		if _, err := tbl.Manifest(ctx, 9); err == nil {
			t.Fatal("version 9 still readable")
		}

		// The latest is never removed, whatever the policy.
		rep, err = tbl.Cleanup(ctx, CleanupPolicy{Now: time.Now().Add(time.Hour), OlderThan: time.Second, KeepLast: 1, Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if vs, _ := tbl.Versions(ctx); !slices.Equal(vs, []uint64{11}) {
			t.Fatalf("versions left: %v (removed %v)", vs, rep.VersionsRemoved)
		}
		hRequireRows(t, "latest after the second cleanup", hRead(t, tbl, 0), want)
		hRequireOnlyReferenced(t, tbl)
	})
}

// hRequireSameReport fails unless a dry run listed exactly what the real run removed.
func hRequireSameReport(t testing.TB, dry, real CleanupReport) {
	t.Helper()
	if !dry.DryRun || real.DryRun {
		t.Fatalf("dry run flags: %v %v", dry.DryRun, real.DryRun)
	}
	if !slices.Equal(dry.VersionsRemoved, real.VersionsRemoved) {
		t.Fatalf("dry run lists versions %v, the real run removed %v", dry.VersionsRemoved, real.VersionsRemoved)
	}
	d, r := slices.Sorted(slices.Values(dry.FilesRemoved)), slices.Sorted(slices.Values(real.FilesRemoved))
	if !slices.Equal(d, r) {
		t.Fatalf("dry run lists %d files, the real run removed %d:\n dry  %v\n real %v", len(d), len(r), d, r)
	}
	dry.DryRun = false
	if dry.OrphanReport != real.OrphanReport {
		t.Fatalf("dry report %+v, real %+v", dry.OrphanReport, real.OrphanReport)
	}
}

// hRequireOnlyReferenced fails unless every data, deletion and transaction file is referenced
// by a retained version.
func hRequireOnlyReferenced(t testing.TB, tbl *Table) {
	t.Helper()
	refs, err := tbl.referencedFiles(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{dataDir, deletionsDir, transactionsDir} {
		for _, k := range hKeys(t, tbl, dir) {
			if !refs[tbl.key(k)] {
				t.Fatalf("%s is referenced by no retained version", k)
			}
		}
	}
	for k := range refs {
		if _, err := tbl.Store().Stat(t.Context(), k); err != nil {
			t.Fatalf("a retained version references %s: %v", k, err)
		}
	}
}

// TestCleanupWhileWriting runs cleanup over and over with a short retention while a writer
// appends, a compactor compacts and readers read the latest version: no read fails, no row is
// lost, and at the end a dry run lists exactly what the real run then removes.
func TestCleanupWhileWriting(t *testing.T) {
	dur := 8 * time.Second
	if testing.Short() {
		dur = 5 * time.Second
	}
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		opts := &Options{TargetRowsPerFragment: 500}
		hCreate(t, store, "cw", false, opts)
		writer, compactor, cleaner := hOpen(t, store, "cw", opts), hOpen(t, store, "cw", opts), hOpen(t, store, "cw", opts)
		// Grace must outlast any write in flight (Cleanup's REQUIRES): a compaction on a loaded
		// machine against S3 can take over a second between writing its file and committing.
		policy := CleanupPolicy{OlderThan: time.Second, KeepLast: 2, Grace: 3 * time.Second}

		var (
			acked    atomic.Int64 // ids [0, acked) are committed
			stop     = make(chan struct{})
			wg       sync.WaitGroup
			errMu    sync.Mutex
			errs     []error
			reads    atomic.Int64
			cleanups atomic.Int64
			removed  atomic.Int64
		)
		fail := func(format string, args ...any) {
			errMu.Lock()
			defer errMu.Unlock()
			errs = append(errs, fmt.Errorf(format, args...))
		}
		loop := func(every time.Duration, fn func() bool) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(every):
					}
					if !fn() {
						return
					}
				}
			}()
		}
		loop(10*time.Millisecond, func() bool {
			n := acked.Load()
			rec := hBatch(hRange(n, 20), "a")
			defer rec.Release()
			if _, err := writer.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
				fail("append: %v", err)
				return false
			}
			acked.Store(n + 20)
			return true
		})
		loop(100*time.Millisecond, func() bool {
			if _, err := compactor.Compact(ctx, CompactOptions{}); err != nil {
				fail("compact: %v", err)
				return false
			}
			return true
		})
		loop(150*time.Millisecond, func() bool {
			rep, err := cleaner.Cleanup(ctx, policy)
			if err != nil {
				fail("cleanup: %v", err)
				return false
			}
			cleanups.Add(1)
			removed.Add(int64(len(rep.FilesRemoved)))
			return true
		})
		for r := range 2 {
			reader := hOpen(t, store, "cw", opts)
			loop(time.Duration(5+r*7)*time.Millisecond, func() bool {
				floor := acked.Load()
				got, err := hReadErr(t, reader, 0)
				if err != nil {
					fail("read: %v", err)
					return false
				}
				for id := int64(0); id < floor; id++ {
					if _, ok := got[id]; !ok {
						fail("read lost row %d (%d rows were acknowledged)", id, floor)
						return false
					}
				}
				reads.Add(1)
				return true
			})
		}
		time.Sleep(dur)
		close(stop)
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
		hRequireRows(t, "final rows", hRead(t, cleaner, 0), hWant(hRange(0, acked.Load()), "a"))
		if removed.Load() == 0 {
			t.Fatalf("%d cleanups removed nothing", cleanups.Load())
		}
		t.Logf("%v: %d rows, %d reads, %d cleanups removed %d files", dur, acked.Load(), reads.Load(), cleanups.Load(), removed.Load())

		// Quiet now: a dry run and a real run at the same reference time agree exactly. Wait out
		// the grace so every file left unreferenced is old enough to go.
		time.Sleep(policy.Grace + 100*time.Millisecond)
		final := policy
		final.Now = time.Now()
		dry := final
		dry.DryRun = true
		dryRep, err := cleaner.Cleanup(ctx, dry)
		if err != nil {
			t.Fatal(err)
		}
		realRep, err := cleaner.Cleanup(ctx, final)
		if err != nil {
			t.Fatal(err)
		}
		hRequireSameReport(t, dryRep, realRep)
		hRequireRows(t, "rows after the final cleanup", hRead(t, writer, 0), hWant(hRange(0, acked.Load()), "a"))
		if vs, _ := cleaner.Versions(ctx); len(vs) != 2 {
			t.Fatalf("%d versions left, policy keeps 2", len(vs))
		}
		hRequireOnlyReferenced(t, cleaner)
	})
}
