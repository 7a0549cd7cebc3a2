package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
	"github.com/flight-sink/flight-sink/streaming"
)

// Shape of the table makeFragmentedTable builds: smallAppends appends of rowsPerAppend rows,
// ids 0 .. smallAppends*rowsPerAppend-1, then two deletes by predicate.
const (
	smallAppends  = 40
	rowsPerAppend = 10
)

// isDeleted are the ids makeFragmentedTable deletes: id < 25 (two fragments entirely, half of
// the third), then 100, 101, 205 and 399 (a fifth of one fragment, a tenth of two others).
func isDeleted(id int64) bool {
	return id < 25 || id == 100 || id == 101 || id == 205 || id == 399
}

// makeFragmentedTable creates table name in store from many small appends and two deletes, and
// returns the ids it holds afterwards, ascending.
func makeFragmentedTable(t *testing.T, store objstore.Store, name string) []int64 {
	t.Helper()
	ctx := context.Background()
	tbl, err := engine.Create(ctx, store, name, testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var want []int64
	for i := range int64(smallAppends) {
		ids := make([]int64, rowsPerAppend)
		for j := range ids {
			ids[j] = i*rowsPerAppend + int64(j)
			if !isDeleted(ids[j]) {
				want = append(want, ids[j])
			}
		}
		rec := makeBatch(t, ids...)
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	for _, where := range []*expr.Predicate{expr.Lt("id", 25), expr.In("id", 100, 101, 205, 399)} {
		if _, err := tbl.Delete(ctx, where, nil); err != nil {
			t.Fatalf("delete %s: %v", where, err)
		}
	}
	return want
}

// openLatest opens table name afresh (no cached state from the test's writes) and returns its
// latest version.
func openLatest(t *testing.T, store objstore.Store, name string) (*engine.Table, *engine.Manifest) {
	t.Helper()
	tbl, err := engine.Open(context.Background(), store, name, nil)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	m, err := tbl.Latest(context.Background())
	if err != nil {
		t.Fatalf("latest of %s: %v", name, err)
	}
	return tbl, m
}

// scanIDs reads every row of the latest version of table name through the engine and returns
// the ids, ascending. Every row must carry the name makeBatch gives it.
func scanIDs(t *testing.T, store objstore.Store, name string) []int64 {
	t.Helper()
	tbl, _ := openLatest(t, store, name)
	s, err := tbl.Scan(context.Background(), engine.ScanOptions{})
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	defer s.Release()
	var ids []int64
	for s.Next() {
		rec := s.RecordBatch()
		idCol := rec.Column(0).(*array.Int64)
		nameCol := rec.Column(1).(*array.String)
		for i := range int(rec.NumRows()) {
			if nameCol.Value(i) != "row" {
				t.Fatalf("row id %d has name %q, want \"row\"", idCol.Value(i), nameCol.Value(i))
			}
			ids = append(ids, idCol.Value(i))
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	slices.Sort(ids)
	return ids
}

func decodeJSON[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return v
}

// TestMaintenanceCLI runs compact and cleanup as processes, on local disk and on S3.
func TestMaintenanceCLI(t *testing.T) {
	bin := buildCLI(t)
	t.Run("compact", func(t *testing.T) { testCompact(t, bin) })
	t.Run("cleanup", func(t *testing.T) {
		root := t.TempDir()
		store, err := objstore.NewLocal(root)
		if err != nil {
			t.Fatal(err)
		}
		testCleanup(t, bin, nil, store, filepath.Join(root, "events"))
	})
	t.Run("cleanup-stages", func(t *testing.T) { testCleanupExpiresStages(t, bin) })
	t.Run("bad-arguments", func(t *testing.T) { testMaintenanceBadArguments(t, bin) })
	t.Run("s3", func(t *testing.T) { testMaintenanceS3(t, bin) })
}

// testCompact compacts a table of many small, partly deleted fragments: dry run, flags, the
// real run (fewer fragments, same rows) and a run with nothing left to do.
func testCompact(t *testing.T, bin string) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	want := makeFragmentedTable(t, store, "events")
	uri := filepath.Join(root, "events")
	_, before := openLatest(t, store, "events")
	if len(before.Fragments) < smallAppends-2 {
		t.Fatalf("the table has %d fragments, want about %d small ones", len(before.Fragments), smallAppends)
	}

	t.Run("dry-run", func(t *testing.T) {
		d := decodeJSON[compactJSON](t, runCLI(t, bin, nil, "compact", "--dry-run", "--json", uri).mustSucceed(t).stdout)
		// 400 rows are far below the default target: every fragment is one group.
		if !d.DryRun || d.ReadVersion != before.Version || d.Version != 0 || d.Groups != 1 || len(d.Plan) != 1 {
			t.Fatalf("dry run = %+v, want one group planned on version %d", d, before.Version)
		}
		if d.FragmentsRemoved != len(before.Fragments) || len(d.Plan[0].Fragments) != len(before.Fragments) ||
			d.RowsRewritten != int64(len(want)) || d.Plan[0].Rows != int64(len(want)) || d.BytesRead <= 0 {
			t.Errorf("dry run = %+v, want all %d fragments and %d rows", d, len(before.Fragments), len(want))
		}
		txt := runCLI(t, bin, nil, "compact", "--dry-run", uri).mustSucceed(t).stdout
		for _, w := range []string{"compaction plan for events", "dry run", "GROUP", "rows to rewrite:"} {
			if !strings.Contains(txt, w) {
				t.Errorf("dry-run text lacks %q:\n%s", w, txt)
			}
		}
		if _, m := openLatest(t, store, "events"); m.Version != before.Version {
			t.Errorf("a dry run committed version %d", m.Version)
		}
	})

	t.Run("flags-reach-the-plan", func(t *testing.T) {
		// With 10-row fragments as the target only fragments with deletions are candidates: ids
		// 0-29 (two fragments entirely deleted, one half; one run of neighbours) and 100-109 (a
		// fifth deleted) make two groups; 200-209 and 390-399 (a tenth deleted each) join only
		// when the deleted share allowed drops below a tenth.
		for _, c := range []struct {
			share  string
			groups int
		}{{"0.1", 2}, {"0.05", 4}} {
			d := decodeJSON[compactJSON](t, runCLI(t, bin, nil, "compact", "--dry-run", "--json",
				"--target-rows", "10", "--max-deleted-share", c.share, uri).mustSucceed(t).stdout)
			if d.Groups != c.groups {
				t.Errorf("--max-deleted-share %s: %d groups, want %d: %+v", c.share, d.Groups, c.groups, d.Plan)
			}
		}
	})

	t.Run("compact", func(t *testing.T) {
		r := runCLI(t, bin, nil, "compact", "--json", "--progress=always", uri)
		if r.code != 0 || !strings.Contains(r.stderr, "compacting") {
			t.Fatalf("exit %d, stderr %q: want a progress bar on stderr", r.code, r.stderr)
		}
		d := decodeJSON[compactJSON](t, r.stdout)
		if d.DryRun || d.ReadVersion != before.Version || d.Version != before.Version+1 || d.Groups != 1 {
			t.Fatalf("report = %+v, want version %d from one group", d, before.Version+1)
		}
		if d.FragmentsRemoved != len(before.Fragments) || d.FragmentsAdded != 1 || d.RowsRewritten != int64(len(want)) ||
			d.DeletedRowsDropped == 0 || d.BytesWritten <= 0 {
			t.Errorf("report = %+v, want %d fragments into 1, %d rows", d, len(before.Fragments), len(want))
		}
		_, after := openLatest(t, store, "events")
		if after.Version != d.Version || len(after.Fragments) != 1 || after.Fragments[0].DeletedRows != 0 {
			t.Errorf("after compaction: version %d, fragments %+v; want version %d, one fragment without deletions",
				after.Version, after.Fragments, d.Version)
		}
		if got := scanIDs(t, store, "events"); !slices.Equal(got, want) {
			t.Errorf("rows changed by compaction: got %d ids %v, want %d", len(got), got, len(want))
		}
		h := decodeJSON[flightsvc.HistoryResult](t, runCLI(t, bin, nil, "history", "--json", "--limit=1", uri).mustSucceed(t).stdout)
		if h.Versions[0].Operation != string(engine.OpRewrite) {
			t.Errorf("latest operation %s, want %s", h.Versions[0].Operation, engine.OpRewrite)
		}
	})

	t.Run("nothing-to-compact", func(t *testing.T) {
		out := runCLI(t, bin, nil, "compact", uri).mustSucceed(t).stdout
		if !strings.HasPrefix(out, "nothing to compact in events at version ") {
			t.Errorf("second compaction printed:\n%s", out)
		}
	})

	t.Run("text-report", func(t *testing.T) {
		makeFragmentedTable(t, store, "other")
		out := runCLI(t, bin, nil, "compact", filepath.Join(root, "other")).mustSucceed(t).stdout
		for _, w := range []string{"compacted other: committed version", "fragments:", "removed, 1 added", "rows rewritten:", "bytes written:"} {
			if !strings.Contains(out, w) {
				t.Errorf("compact text lacks %q:\n%s", w, out)
			}
		}
	})
}

// testCleanup runs cleanup, dry and real, on table "events" of store, reached by the binary as
// uri with env.
func testCleanup(t *testing.T, bin string, env []string, store objstore.Store, uri string) {
	ctx := context.Background()
	want := makeFragmentedTable(t, store, "events")
	tbl, _ := openLatest(t, store, "events")
	// Compaction leaves every earlier data and deletion file to versions cleanup will remove;
	// one more delete gives the latest version a deletion file of its own.
	if _, err := tbl.Compact(ctx, engine.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Delete(ctx, expr.Eq("id", 300), nil); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(id int64) bool { return id == 300 })
	_, latest := openLatest(t, store, "events")

	// Nothing is old enough for the defaults (a week of versions, a day of grace).
	d := decodeJSON[cleanupJSON](t, runCLI(t, bin, env, "cleanup", "--json", uri).mustSucceed(t).stdout)
	if len(d.VersionsRemoved) != 0 || len(d.FilesRemoved) != 0 || d.BytesRemoved != 0 {
		t.Fatalf("default cleanup of a fresh table removed %+v", d)
	}

	time.Sleep(1100 * time.Millisecond) // past --older-than 1s and --grace 1s
	policy := []string{"--older-than", "1s", "--grace", "1s"}

	dry := decodeJSON[cleanupJSON](t, runCLI(t, bin, env, append([]string{"cleanup", "--dry-run", "--json", uri}, policy...)...).mustSucceed(t).stdout)
	var wantVersions []uint64
	for v := uint64(1); v < latest.Version; v++ {
		wantVersions = append(wantVersions, v)
	}
	if !dry.DryRun || dry.LatestVersion != latest.Version || !slices.Equal(dry.VersionsRemoved, wantVersions) {
		t.Fatalf("dry run: dry %v, latest %d, versions %v; want every version before %d",
			dry.DryRun, dry.LatestVersion, dry.VersionsRemoved, latest.Version)
	}
	if dry.DataFilesRemoved != smallAppends || dry.DeletionFilesRemoved == 0 || dry.TransactionFilesRemoved != len(wantVersions) ||
		len(dry.FilesRemoved) != dry.DataFilesRemoved+dry.DeletionFilesRemoved+dry.TransactionFilesRemoved || dry.BytesRemoved <= 0 {
		t.Errorf("dry run would remove %+v; want the %d appended data files, deletion files and %d transaction files",
			dry, smallAppends, len(wantVersions))
	}
	for _, f := range dry.FilesRemoved {
		if _, err := store.Stat(ctx, "events/"+f); err != nil {
			t.Errorf("after the dry run, %s: %v", f, err)
		}
	}
	// The text of a dry run lists the same files.
	txt := runCLI(t, bin, env, append([]string{"cleanup", "--dry-run", uri}, policy...)...).mustSucceed(t).stdout
	_, list, _ := strings.Cut(txt, "\nfiles to remove:\n")
	if listed := strings.Fields(list); !slices.Equal(listed, dry.FilesRemoved) || !strings.Contains(txt, "dry run") {
		t.Errorf("dry-run text lists %d files, JSON %d:\n%s", len(listed), len(dry.FilesRemoved), txt)
	}

	r := runCLI(t, bin, env, append([]string{"cleanup", "--json", "--progress=always", uri}, policy...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "removing versions") || !strings.Contains(r.stderr, "removing files") {
		t.Fatalf("exit %d, stderr %q: want progress bars for both phases", r.code, r.stderr)
	}
	done := decodeJSON[cleanupJSON](t, r.stdout)
	if done.DryRun || !slices.Equal(done.VersionsRemoved, dry.VersionsRemoved) || !slices.Equal(done.FilesRemoved, dry.FilesRemoved) ||
		done.BytesRemoved != dry.BytesRemoved || done.DataFilesRemoved != dry.DataFilesRemoved ||
		done.DeletionFilesRemoved != dry.DeletionFilesRemoved || done.TransactionFilesRemoved != dry.TransactionFilesRemoved {
		t.Fatalf("the real run removed other things than the dry run listed:\nreal %+v\ndry  %+v", done, dry)
	}
	for _, f := range done.FilesRemoved {
		if _, err := store.Stat(ctx, "events/"+f); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s still there after cleanup (stat: %v)", f, err)
		}
	}
	check, m := openLatest(t, store, "events")
	if m.Version != latest.Version {
		t.Errorf("latest version %d after cleanup, want %d", m.Version, latest.Version)
	}
	for _, v := range done.VersionsRemoved {
		if _, err := check.Manifest(ctx, v); !errors.Is(err, engine.ErrVersionNotFound) {
			t.Errorf("version %d after cleanup: %v, want %v", v, err, engine.ErrVersionNotFound)
		}
	}
	if got := scanIDs(t, store, "events"); !slices.Equal(got, want) {
		t.Errorf("latest version after cleanup reads %d ids %v, want %d", len(got), got, len(want))
	}

	again := runCLI(t, bin, env, append([]string{"cleanup", uri}, policy...)...).mustSucceed(t).stdout
	if !hasRow(again, "versions", "removed:", "0", "(-)") || !hasRow(again, "files", "removed:", "0") {
		t.Errorf("a second cleanup printed:\n%s", again)
	}
}

// testMaintenanceBadArguments: bad flags and missing tables fail with one line and exit 1, and
// touch nothing.
func testMaintenanceBadArguments(t *testing.T, bin string) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeFragmentedTable(t, store, "events")
	uri := filepath.Join(root, "events")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"compact", "--target-rows", "0", uri}, "--target-rows"},
		{nil, []string{"compact", "--max-deleted-share", "0", uri}, "--max-deleted-share"},
		{nil, []string{"compact", "--max-deleted-share", "1.5", uri}, "--max-deleted-share"},
		{nil, []string{"compact", "--max-deleted-share", "NaN", uri}, "--max-deleted-share"},
		{nil, []string{"compact", "--max-deleted-share", "lots", uri}, "--max-deleted-share"},
		{nil, []string{"compact"}, "TABLE_URI"},
		{nil, []string{"compact", filepath.Join(root, "nope")}, "table not found"},
		{nil, []string{"cleanup", "--older-than", "500ms", uri}, "--older-than"},
		{nil, []string{"cleanup", "--older-than", "soon", uri}, "--older-than"},
		{nil, []string{"cleanup", "--keep-last", "0", uri}, "--keep-last"},
		{[]string{"FLIGHT_SINK_CLEANUP_KEEP_LAST=-2"}, []string{"cleanup", uri}, "--keep-last"},
		{nil, []string{"cleanup", "--grace", "0s", uri}, "--grace"},
		{nil, []string{"cleanup", "--stage-ttl", "0s", uri}, "--stage-ttl"},
		{nil, []string{"cleanup", "--dry-run"}, "TABLE_URI"},
		{nil, []string{"cleanup", filepath.Join(root, "nope")}, "table not found"},
		{nil, []string{"cleanup", "s3://bucket"}, "no table"},
	} {
		runCLI(t, bin, c.env, c.args...).mustFail(t, c.want)
	}
	// Nothing above touched the table.
	if _, m := openLatest(t, store, "events"); m.Version != smallAppends+3 {
		t.Errorf("latest version %d, want %d", m.Version, smallAppends+3)
	}
}

// testMaintenanceS3 runs both commands on the test S3 server, reached through the standard AWS
// environment alone.
func testMaintenanceS3(t *testing.T, bin string) {
	s3URI, opts := storetest.S3(t)
	store, err := objstore.NewS3(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// The binary reaches the server through the standard AWS environment and nothing else.
	env := storetest.S3Env(opts)
	uri := s3URI + "/events"

	t.Run("compact", func(t *testing.T) {
		want := makeFragmentedTable(t, store, "compacted")
		_, before := openLatest(t, store, "compacted")
		d := decodeJSON[compactJSON](t, runCLI(t, bin, env, "compact", "--json", s3URI+"/compacted").mustSucceed(t).stdout)
		_, after := openLatest(t, store, "compacted")
		if d.Version != before.Version+1 || after.Version != d.Version || len(after.Fragments) != 1 || len(before.Fragments) < 2 {
			t.Errorf("compaction on S3: report %+v, fragments %d -> %d", d, len(before.Fragments), len(after.Fragments))
		}
		if got := scanIDs(t, store, "compacted"); !slices.Equal(got, want) {
			t.Errorf("rows changed by compaction on S3: got %d ids, want %d", len(got), len(want))
		}
	})

	t.Run("cleanup", func(t *testing.T) {
		testCleanup(t, bin, env, store, uri)
	})
}

// testCleanupExpiresStages: the CLI's cleanup expires stages as the servers' does (engine
// Table.Cleanup with --stage-ttl; streaming's TestEveryCleanupPathExpiresStages covers the action
// and the maintainer). A stage older than the TTL is removed; a fresh one is kept, its data file
// too although it is older than --grace, and a server still commits it.
func testCleanupExpiresStages(t *testing.T, bin string) {
	ctx := t.Context()
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	sink := streaming.NewSink(store, &streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	defer sink.Close()
	epoch := func(q string, e int64, part *streaming.Partition, ids ...int64) streaming.Ack {
		t.Helper()
		rec := makeBatch(t, ids...)
		src, err := array.NewRecordReader(testSchema, []arrow.RecordBatch{rec})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		ack, err := sink.WriteEpoch(ctx, streaming.EpochRequest{Table: "events", QueryID: q, EpochID: e, Partition: part, Create: &streaming.CreateSpec{}}, src)
		if err != nil {
			t.Fatalf("epoch %s/%d: %v", q, e, err)
		}
		return ack
	}
	epoch("setup", 0, nil, 1)
	fresh := epoch("q", 1, &streaming.Partition{ID: 0}, 10, 11).Stage
	tbl, err := sink.Table(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	old := engine.Stage{QueryID: "q", EpochID: 1, Mode: "append", PartitionID: 1, Created: time.Now().Add(-48 * time.Hour)}
	if err := tbl.WriteStage(ctx, &old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the fresh stage's data file is past --grace 1s

	uri := filepath.Join(root, "events")
	dry := decodeJSON[cleanupJSON](t, runCLI(t, bin, nil, "cleanup", "--dry-run", "--json", "--grace", "1s", uri).mustSucceed(t).stdout)
	if dry.StagesExpired != 1 || len(dry.FilesRemoved) != 0 || dry.Policy.StageTTL != "24h0m0s" {
		t.Fatalf("dry run: %+v; want the old stage to expire, nothing else", dry)
	}
	if _, err := tbl.ReadStage(ctx, old.Token); err != nil {
		t.Fatalf("after the dry run, the old stage: %v", err)
	}
	done := decodeJSON[cleanupJSON](t, runCLI(t, bin, nil, "cleanup", "--json", "--grace", "1s", uri).mustSucceed(t).stdout)
	if done.StagesExpired != 1 || len(done.FilesRemoved) != 0 {
		t.Fatalf("cleanup: %+v; want the old stage expired and the fresh stage's data file kept", done)
	}
	if _, err := tbl.ReadStage(ctx, old.Token); !errors.Is(err, engine.ErrStageNotFound) {
		t.Fatalf("after cleanup, the old stage: %v, want %v", err, engine.ErrStageNotFound)
	}
	ack, err := sink.CommitStaged(ctx, streaming.CommitStagedRequest{Table: "events", QueryID: "q", EpochID: 1, Mode: streaming.ModeAppend, Stages: []string{fresh}})
	if err != nil || ack.Status != streaming.StatusCommitted || ack.Rows != 2 {
		t.Fatalf("commit of the kept stage: %+v %v", ack, err)
	}
	if got := scanIDs(t, store, "events"); !slices.Equal(got, []int64{1, 10, 11}) {
		t.Fatalf("rows after the commit: %v", got)
	}
	again := runCLI(t, bin, nil, "cleanup", "--grace", "1s", uri).mustSucceed(t).stdout
	if !hasRow(again, "stages", "expired:", "0") {
		t.Errorf("a second cleanup printed:\n%s", again)
	}
}
