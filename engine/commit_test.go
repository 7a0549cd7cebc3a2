package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// appendCheck is what every concurrent-append test asserts once the writers are done: each
// append landed exactly once, as its own version, and the versions are dense.
func appendCheck(t *testing.T, tbl *Table, appends int, wantIDs []int64) {
	t.Helper()
	ctx := t.Context()
	last := uint64(1 + appends)
	requireDenseVersions(t, tbl, last)
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows() != int64(len(wantIDs)) || len(m.Fragments) != appends {
		t.Fatalf("latest version %d: %d rows in %d fragments, want %d rows in %d", m.Version, m.Rows(), len(m.Fragments), len(wantIDs), appends)
	}
	seenFrag := map[uint64]bool{}
	for _, f := range m.Fragments {
		if seenFrag[f.ID] {
			t.Fatalf("fragment id %d used twice", f.ID)
		}
		seenFrag[f.ID] = true
	}
	requireSameIDs(t, "scan after concurrent appends", scanRows(t, tbl, 0), wantIDs)

	// Every append is one version carrying its own properties, exactly once.
	hist, err := tbl.History(ctx, int(last))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	rebased := 0
	for _, h := range hist {
		if h.Operation == OpCreate {
			continue
		}
		key := h.Properties["writer"] + "/" + h.Properties["append"]
		if v, dup := seen[key]; dup {
			t.Fatalf("append %s landed twice: versions %d and %d", key, v, h.Version)
		}
		seen[key] = h.Version
		if h.ReadVersion != h.Version-1 {
			rebased++
		}
	}
	if len(seen) != appends {
		t.Fatalf("history holds %d distinct appends, want %d", len(seen), appends)
	}
	t.Logf("%d appends, %d of them rebased over a concurrent commit", appends, rebased)
}

func TestConcurrentAppends(t *testing.T) {
	const writers, appends, per = 8, 10, 5
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		// appendCheck counts one version and one fragment per append: the ceiling sits above the
		// 80 appends, so no stalled commit compacts in between (TestFragmentCeiling* cover that).
		cfg := MaintenanceConfig{Compaction: CompactionMaintenance{MaxFragments: 2 * writers * appends}}
		tbl, err := Create(ctx, store, "concurrent", rowsSchema, CreateOptions{Config: map[string]string{ConfigMaintenance: encodeConfig(t, cfg)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wantIDs []int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, writers*appends)
		for w := range writers {
			// Half the writers share one handle, half have their own, as separate servers would.
			h := tbl
			if w%2 == 1 {
				var err error
				if h, err = Open(ctx, store, "concurrent", nil); err != nil {
					t.Fatal(err)
				}
			}
			for k := range appends {
				wantIDs = append(wantIDs, idRange(int64(w*1000+k*per), per)...)
			}
			wg.Go(func() {
				<-start
				for k := range appends {
					rec := makeRows(idRange(int64(w*1000+k*per), per))
					props := map[string]string{"writer": strconv.Itoa(w), "append": strconv.Itoa(k)}
					_, err := h.Append(ctx, []arrow.RecordBatch{rec}, props)
					rec.Release()
					if err != nil {
						errs <- fmt.Errorf("writer %d append %d: %w", w, k, err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
		appendCheck(t, tbl, writers*appends, wantIDs)
	})
}

// Environment of TestHelperProcessAppend.
const (
	helperURIEnv     = "FLIGHT_SINK_ENGINE_HELPER_URI"
	helperTableEnv   = "FLIGHT_SINK_ENGINE_HELPER_TABLE"
	helperWriterEnv  = "FLIGHT_SINK_ENGINE_HELPER_WRITER"
	helperAppendsEnv = "FLIGHT_SINK_ENGINE_HELPER_APPENDS"
	helperStartEnv   = "FLIGHT_SINK_ENGINE_HELPER_START" // unix nanos: all children begin together
	processRowsPer   = 5
)

// TestHelperProcessAppend is not a test: TestProcessesAppend runs the test binary as a child
// process with this test selected, and the child appends to the table its environment names.
func TestHelperProcessAppend(t *testing.T) {
	if os.Getenv(helperProcessEnv) != "1" {
		t.Skip("helper process of TestProcessesAppend")
	}
	ctx := t.Context()
	writer, err1 := strconv.Atoi(os.Getenv(helperWriterEnv))
	appends, err2 := strconv.Atoi(os.Getenv(helperAppendsEnv))
	startNanos, err3 := strconv.ParseInt(os.Getenv(helperStartEnv), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("helper environment: %v", err)
	}
	store, err := objstore.Open(ctx, os.Getenv(helperURIEnv), nil)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := Open(ctx, store, os.Getenv(helperTableEnv), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, startNanos)))
	for k := range appends {
		rec := makeRows(idRange(int64(writer*1000+k*processRowsPer), processRowsPer))
		props := map[string]string{"writer": strconv.Itoa(writer), "append": strconv.Itoa(k)}
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, props)
		rec.Release()
		if err != nil {
			t.Fatalf("writer %d append %d: %v", writer, k, err)
		}
	}
}

// TestProcessesAppend runs two OS processes appending to one table at once.
func TestProcessesAppend(t *testing.T) {
	const procs, appends = 2, 10
	targets := []struct {
		name string
		open func(t *testing.T) (uri string, env []string, store objstore.Store)
	}{
		{"local", func(t *testing.T) (string, []string, objstore.Store) {
			dir := t.TempDir()
			s, err := objstore.Open(t.Context(), dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			return dir, nil, s
		}},
		{"s3", func(t *testing.T) (string, []string, objstore.Store) {
			uri, opts := storetest.S3(t)
			s, err := objstore.Open(t.Context(), uri, &opts)
			if err != nil {
				t.Fatal(err)
			}
			return uri, storetest.S3Env(opts), s
		}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			uri, env, store := tg.open(t)
			tbl := createRowsTable(t, store, "procs", nil)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// Children take a moment to start; give them a common start time so they overlap.
			startAt := time.Now().Add(time.Second).UnixNano()
			cmds := make([]*exec.Cmd, procs)
			outs := make([]*lockedBuffer, procs)
			var wantIDs []int64
			for p := range procs {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcessAppend$", "-test.count=1", "-test.v")
				cmd.Env = append(append(os.Environ(), env...),
					helperProcessEnv+"=1",
					helperURIEnv+"="+uri,
					helperTableEnv+"=procs",
					helperWriterEnv+"="+strconv.Itoa(p),
					helperAppendsEnv+"="+strconv.Itoa(appends),
					helperStartEnv+"="+strconv.FormatInt(startAt, 10),
				)
				outs[p] = &lockedBuffer{}
				cmd.Stdout, cmd.Stderr = outs[p], outs[p]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[p] = cmd
				for k := range appends {
					wantIDs = append(wantIDs, idRange(int64(p*1000+k*processRowsPer), processRowsPer)...)
				}
			}
			for p, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Errorf("child %d: %v\n%s", p, err, outs[p].String())
				}
			}
			if t.Failed() {
				t.FailNow()
			}
			appendCheck(t, tbl, procs*appends, wantIDs)
		})
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// TestFaultBeforeManifestWrite injects a crash between the data/transaction writes and the
// manifest create: the version must not move, the rows must never be visible, the files must be
// left unreferenced for cleanup, and the next commit must work.
func TestFaultBeforeManifestWrite(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		injected := errors.New("injected crash before manifest write")
		var fail atomic.Bool
		var hookVersions []uint64
		opts := &Options{
			TargetRowsPerFragment: 20,
			BeforeManifestWrite: func(v uint64) error {
				hookVersions = append(hookVersions, v)
				if fail.Load() {
					return injected
				}
				return nil
			},
		}
		tbl := createRowsTable(t, store, "fault", opts)
		appendIDs(t, tbl, idRange(0, 10), nil) // version 2
		dataBefore := listKeys(t, tbl, dataDir)
		txnsBefore := listKeys(t, tbl, transactionsDir)

		fail.Store(true)
		rec := makeRows(idRange(1000, 50)) // three fragments
		defer rec.Release()
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		fail.Store(false)
		if !errors.Is(err, injected) {
			t.Fatalf("append with a fault before the manifest write: got %v, want the injected error", err)
		}
		if len(hookVersions) != 2 || hookVersions[1] != 3 {
			t.Fatalf("BeforeManifestWrite saw versions %v, want [2 3]", hookVersions)
		}

		fresh, err := Open(ctx, store, "fault", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Table{tbl, fresh} {
			if v := latestVersion(t, h); v != 2 {
				t.Fatalf("latest version after the fault is %d, want 2", v)
			}
			requireSameIDs(t, "scan after the fault", scanRows(t, h, 0), idRange(0, 10))
		}
		requireDenseVersions(t, fresh, 2)

		// The data and transaction files are durable but no manifest references them.
		refs := referencedFiles(t, fresh)
		orphans := 0
		for _, k := range listKeys(t, fresh, dataDir) {
			if !refs[k] {
				orphans++
			}
		}
		if want := len(dataBefore) + 3; len(listKeys(t, fresh, dataDir)) != want || orphans != 3 {
			t.Fatalf("after the fault: %d data files (%d unreferenced), want %d (3 unreferenced)",
				len(listKeys(t, fresh, dataDir)), orphans, want)
		}
		if n := len(listKeys(t, fresh, transactionsDir)); n != len(txnsBefore)+1 {
			t.Fatalf("after the fault: %d transaction files, want %d", n, len(txnsBefore)+1)
		}

		// The next commit takes the version the failed one never reached.
		m := appendIDs(t, tbl, idRange(2000, 10), nil)
		if m.Version != 3 {
			t.Fatalf("commit after the fault got version %d, want 3", m.Version)
		}
		requireSameIDs(t, "scan after recovery", scanRows(t, fresh, 0), append(idRange(0, 10), idRange(2000, 10)...))
		requireDenseVersions(t, fresh, 3)
	})
}

// flakyStore wraps a real store and fails the create of one manifest: either before the create
// reaches the store (the commit did not happen) or after it (it did, but the answer was lost).
type flakyStore struct {
	objstore.Store
	failKey     string
	afterCreate bool
	failed      atomic.Int32
}

var errFlaky = errors.New("connection reset (injected)")

func (s *flakyStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if key == s.failKey && s.failed.Add(1) == 1 {
		if s.afterCreate {
			if err := s.Store.PutIfAbsent(ctx, key, data); err != nil {
				return err
			}
		}
		return errFlaky
	}
	return s.Store.PutIfAbsent(ctx, key, data)
}

// TestCommitUnknownOutcome checks how Commit treats a manifest create whose outcome is unknown.
func TestCommitUnknownOutcome(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		for _, afterCreate := range []bool{false, true} {
			t.Run(fmt.Sprintf("landed=%v", afterCreate), func(t *testing.T) {
				ctx := t.Context()
				name := fmt.Sprintf("unknown-%v", afterCreate)
				createRowsTable(t, store, name, nil)
				fs := &flakyStore{Store: store, failKey: name + "/" + makeManifestKey(2), afterCreate: afterCreate}
				tbl, err := Open(ctx, fs, name, nil)
				if err != nil {
					t.Fatal(err)
				}
				rec := makeRows(idRange(0, 10))
				defer rec.Release()
				m, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
				if afterCreate {
					// The manifest landed and names our transaction: that is a success.
					if err != nil || m.Version != 2 {
						t.Fatalf("append whose manifest landed before the error: version %v, err %v", versionOf(m), err)
					}
					requireSameIDs(t, "scan", scanRows(t, tbl, 0), idRange(0, 10))
					return
				}
				if !errors.Is(err, errFlaky) {
					t.Fatalf("append whose manifest create failed: got %v, want the store error", err)
				}
				if CommitDefinitelyFailed(err) {
					t.Fatalf("CommitDefinitelyFailed(%v) = true for an error of unknown outcome", err)
				}
				// Nothing is visible; the data files are kept, since the engine could not know.
				requireDenseVersions(t, tbl, 1)
				if n := len(listKeys(t, tbl, dataDir)); n != 1 {
					t.Fatalf("%d data files after an unknown outcome, want 1 (left for cleanup)", n)
				}
				if m := appendIDs(t, tbl, idRange(10, 5), nil); m.Version != 2 {
					t.Fatalf("next append got version %d, want 2", m.Version)
				}
			})
		}
	})
}

func TestOverwrite(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "ow", nil)
		appendIDs(t, tbl, idRange(0, 10), nil)
		appendIDs(t, tbl, idRange(10, 10), nil) // version 3

		rec := makeRows(idRange(100, 5))
		defer rec.Release()
		m, err := tbl.Overwrite(ctx, rowsSchema, []arrow.RecordBatch{rec}, map[string]string{"why": "replace"})
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != 4 || m.Transaction.Operation != OpOverwrite || m.Transaction.Properties["why"] != "replace" {
			t.Fatalf("overwrite committed version %d as %s with %v", m.Version, m.Transaction.Operation, m.Transaction.Properties)
		}
		requireSameIDs(t, "after overwrite", scanRows(t, tbl, 0), idRange(100, 5))
		requireSameIDs(t, "version 3 after overwrite", scanRows(t, tbl, 3), idRange(0, 20))
		if !arrowschema.EqualIgnoringFieldIDs(m.ArrowSchema(), rowsSchema) {
			t.Fatalf("overwrite changed the schema to %s", m.ArrowSchema())
		}

		// An empty overwrite truncates.
		m, err = tbl.Overwrite(ctx, rowsSchema, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != 5 || m.Rows() != 0 || len(m.Fragments) != 0 {
			t.Fatalf("empty overwrite: version %d, %d rows in %d fragments", m.Version, m.Rows(), len(m.Fragments))
		}
		if ids := scanRows(t, tbl, 0); len(ids) != 0 {
			t.Fatalf("scan after truncate returned %d rows", len(ids))
		}
		m = appendIDs(t, tbl, idRange(200, 3), nil)
		requireSameIDs(t, "append after truncate", scanRows(t, tbl, 0), idRange(200, 3))
		if len(m.Fragments) != 1 || m.Fragments[0].ID <= 2 {
			t.Fatalf("fragment ids must never be reused after a truncate: %+v", m.Fragments)
		}
	})
}

// TestTruncateWithoutSchema truncates with Overwrite(nil schema, no batches): there is no data to
// describe, so no schema should be needed, and certainly no panic.
func TestTruncateWithoutSchema(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := createRowsTable(t, store, "trunc", nil)
		appendIDs(t, tbl, idRange(0, 10), nil)
		var m *Manifest
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Overwrite(nil schema, no batches) panicked: %v", p)
				}
			}()
			m, err = tbl.Overwrite(t.Context(), nil, nil, nil)
		}()
		if err != nil {
			t.Fatalf("truncate without a schema: %v", err)
		}
		if m.Version != 3 || m.Rows() != 0 || !arrowschema.EqualIgnoringFieldIDs(m.ArrowSchema(), rowsSchema) {
			t.Fatalf("truncate: version %d with %d rows and schema %s", m.Version, m.Rows(), m.ArrowSchema())
		}
	})
}

// writeFragments writes ids as data files without committing them.
func writeFragments(t testing.TB, tbl *Table, ids []int64) []Fragment {
	_, frags := writeRows(t, tbl, ids, false)
	return frags
}

// writeRows writes ids with a new writer of tbl and finishes it (with FinishLater if later).
func writeRows(t testing.TB, tbl *Table, ids []int64, later bool) (*Writer, []Fragment) {
	t.Helper()
	w, err := tbl.NewWriter(t.Context(), rowsSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec := makeRows(ids)
	defer rec.Release()
	if err := w.Write(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	finish := w.Finish
	if later {
		finish = w.FinishLater
	}
	frags, err := finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return w, frags
}

// commitEpoch writes ids and commits them as streaming epoch (q, e).
func commitEpoch(t testing.TB, tbl *Table, q string, e int64, ids []int64) (*Manifest, error) {
	t.Helper()
	frags := writeFragments(t, tbl, ids)
	return tbl.Commit(t.Context(), &Transaction{
		Operation: OpAppend, Properties: EpochProperties(epochid.ID{QueryID: q, EpochID: e}, nil), Fragments: frags,
	})
}

func requireEpochCommitted(t testing.TB, err error, q string, e, watermark int64, version uint64) {
	t.Helper()
	var ece *epochid.CommittedError
	if !errors.As(err, &ece) || !errors.Is(err, epochid.ErrCommitted) {
		t.Fatalf("epoch %s/%d: got %v, want an *epochid.CommittedError", q, e, err)
	}
	if ece.QueryID != q || ece.EpochID != e || ece.WatermarkEpoch != watermark || ece.Version != version {
		t.Fatalf("epoch %s/%d: error %+v, want watermark %d at version %d", q, e, ece, watermark, version)
	}
	if !CommitDefinitelyFailed(err) {
		t.Fatalf("CommitDefinitelyFailed(%v) = false", err)
	}
}

func TestStreamingWatermark(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "wm", nil)
		stale, err := Open(ctx, store, "wm", nil) // has seen version 1 only
		if err != nil {
			t.Fatal(err)
		}
		m, err := commitEpoch(t, tbl, "q", 5, idRange(0, 10))
		if err != nil {
			t.Fatal(err)
		}
		if wm := m.Streams["q"]; m.Version != 2 || wm.Epoch != 5 || wm.Version != 2 {
			t.Fatalf("epoch 5: version %d, watermark %+v", m.Version, wm)
		}
		if p := m.Transaction.Properties; p[PropQueryID] != "q" || p[PropEpochID] != "5" {
			t.Fatalf("epoch 5 transaction properties: %v", p)
		}
		txns := len(listKeys(t, tbl, transactionsDir))

		// A replay of epoch 5 is refused, from the committing handle and from a stale one.
		for _, h := range []*Table{tbl, stale} {
			_, err := commitEpoch(t, h, "q", 5, idRange(100, 10))
			requireEpochCommitted(t, err, "q", 5, 5, 2)
		}
		requireDenseVersions(t, tbl, 2)
		if n := len(listKeys(t, tbl, transactionsDir)); n != txns {
			t.Fatalf("refused epochs wrote %d transaction files", n-txns)
		}

		// A replay through Append also deletes the data files it wrote for the refused commit.
		dataBefore := len(listKeys(t, tbl, dataDir))
		replay := makeRows(idRange(100, 10))
		defer replay.Release()
		_, err = tbl.Append(ctx, []arrow.RecordBatch{replay}, EpochProperties(epochid.ID{QueryID: "q", EpochID: 5}, nil))
		requireEpochCommitted(t, err, "q", 5, 5, 2)
		if n := len(listKeys(t, tbl, dataDir)); n != dataBefore {
			t.Fatalf("a refused replay left %d data files behind", n-dataBefore)
		}

		m, err = commitEpoch(t, stale, "q", 6, idRange(10, 10))
		if err != nil {
			t.Fatal(err)
		}
		if wm := m.Streams["q"]; m.Version != 3 || wm.Epoch != 6 || wm.Version != 3 {
			t.Fatalf("epoch 6: version %d, watermark %+v", m.Version, wm)
		}
		// An epoch below the watermark is refused too.
		_, err = commitEpoch(t, tbl, "q", 4, idRange(200, 1))
		requireEpochCommitted(t, err, "q", 4, 6, 3)

		// Another query has its own watermark; a plain append keeps both.
		if _, err := commitEpoch(t, tbl, "r", 1, idRange(20, 5)); err != nil {
			t.Fatal(err)
		}
		m = appendIDs(t, tbl, idRange(30, 5), nil)
		if m.Streams["q"].Epoch != 6 || m.Streams["r"].Epoch != 1 || m.Streams["r"].Version != 4 {
			t.Fatalf("watermarks after a plain append: %+v", m.Streams)
		}
		reopened, err := Open(ctx, store, "wm", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustLatest(t, reopened).Streams["q"]; got.Epoch != 6 {
			t.Fatalf("watermark of q after reopening: %+v", got)
		}
		requireSameIDs(t, "rows of the committed epochs", scanRows(t, reopened, 0),
			append(append(idRange(0, 20), idRange(20, 5)...), idRange(30, 5)...))
	})
}

// TestEpochRace commits the same epoch from several handles at once: exactly one wins.
func TestEpochRace(t *testing.T) {
	const racers = 4
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		createRowsTable(t, store, "race", nil)
		handles := make([]*Table, racers)
		frags := make([][]Fragment, racers)
		for i := range handles {
			h, err := Open(ctx, store, "race", nil)
			if err != nil {
				t.Fatal(err)
			}
			handles[i] = h
			frags[i] = writeFragments(t, h, idRange(int64(i*100), 3))
		}
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i, h := range handles {
			wg.Go(func() {
				_, errs[i] = h.Commit(ctx, &Transaction{
					Operation: OpAppend, Properties: EpochProperties(epochid.ID{QueryID: "q", EpochID: 7}, nil), Fragments: frags[i],
				})
			})
		}
		wg.Wait()
		winners := 0
		for i, err := range errs {
			switch {
			case err == nil:
				winners++
			case errors.Is(err, epochid.ErrCommitted):
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("%d racers committed epoch 7, want exactly 1", winners)
		}
		requireDenseVersions(t, handles[0], 2)
		if ids := scanRows(t, handles[0], 0); len(ids) != 3 {
			t.Fatalf("table holds %d rows, want the winner's 3", len(ids))
		}
	})
}

func TestStreamWatermarkRetention(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		tbl := createRowsTable(t, store, "ret", &Options{StreamWatermarkRetention: time.Millisecond})
		if _, err := commitEpoch(t, tbl, "idle", 1, idRange(0, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		m, err := commitEpoch(t, tbl, "busy", 1, idRange(1, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.Streams["idle"]; ok || m.Streams["busy"].Epoch != 1 {
			t.Fatalf("watermarks after the retention passed: %+v, want only busy", m.Streams)
		}
	})
}

// TestConcurrentCreate creates one table from several handles at once: exactly one wins.
func TestConcurrentCreate(t *testing.T) {
	const racers = 4
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() {
				_, errs[i] = Create(t.Context(), store, "once", rowsSchema, CreateOptions{}, nil)
			})
		}
		wg.Wait()
		winners := 0
		for i, err := range errs {
			switch {
			case err == nil:
				winners++
			case errors.Is(err, ErrTableExists):
			default:
				t.Errorf("creator %d: %v", i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("%d creators succeeded, want exactly 1", winners)
		}
		tbl, err := Open(t.Context(), store, "once", nil)
		if err != nil {
			t.Fatal(err)
		}
		requireDenseVersions(t, tbl, 1)
	})
}
