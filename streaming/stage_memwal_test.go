package streaming

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// stageKV stages partition part, attempt attempt, of epoch e of table through s and returns its
// token.
func stageKV(t testing.TB, s *Sink, table, q string, e int64, mode Mode, create *CreateSpec, part, attempt int64, pairs ...any) string {
	t.Helper()
	var recs []arrow.RecordBatch
	if len(pairs) > 0 {
		recs = append(recs, kv(pairs...))
	}
	ack, err := s.WriteEpoch(context.Background(), EpochRequest{Table: table, QueryID: q, EpochID: e, Mode: mode, Create: create,
		Partition: &Partition{ID: part, Attempt: attempt}}, kvSource(t, recs...))
	if err != nil || ack.Status != StatusStaged || ack.Stage == "" {
		t.Fatalf("stage epoch %d p%d a%d: %+v %v", e, part, attempt, ack, err)
	}
	return ack.Stage
}

// commitKV commits the stages of epoch e through s and wants status and the MemWAL route.
func commitKV(t testing.TB, s *Sink, table, q string, e int64, mode Mode, status Status, stages ...string) Ack {
	t.Helper()
	ack, err := s.CommitStaged(context.Background(), CommitStagedRequest{Table: table, QueryID: q, EpochID: e, Mode: mode, Stages: stages})
	if err != nil || ack.Status != status || ack.Route != RouteMemWAL {
		t.Fatalf("commit epoch %d: %+v %v, want %s through MemWAL", e, ack, err, status)
	}
	return ack
}

func latestVersion(t testing.TB, s *Sink, table string) uint64 {
	t.Helper()
	tbl, err := s.Table(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.Latest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m.Version
}

// wantKV fails unless the table holds exactly want (id -> value), each id once.
func wantKV(t testing.TB, s *Sink, table string, want map[int64]string) {
	t.Helper()
	got := readKV(t, s, table)
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for id, v := range want {
		if vs := got[id]; len(vs) != 1 || vs[0] != v {
			t.Fatalf("id %d: %v, want [%s] (rows %v)", id, vs, v, got)
		}
	}
}

// A multi-writer epoch on a MemWAL table: its parts are invisible until the commit, which lands
// the parts it names (one attempt per partition: the retried one, not the failed one) as one
// MemWAL put and no base version; a replayed commit is a duplicate, from the WAL and, after a
// flush and a fold, from the shard's watermark; a part of the committed epoch staged again and
// committed is a duplicate too; every row is there once.
func TestStagedEpochLandsInMemWAL(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, &Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	spec := memwalSpec(2)
	p0 := stageKV(t, s, "m", "q", 0, ModeAppend, spec, 0, 0, 1, "a", 2, "a")
	stageKV(t, s, "m", "q", 0, ModeAppend, spec, 1, 0, 3, "failed") // an attempt that failed after its DoPut
	p1 := stageKV(t, s, "m", "q", 0, ModeAppend, spec, 1, 1, 3, "a", 4, "a")
	p2 := stageKV(t, s, "m", "q", 0, ModeAppend, spec, 2, 0) // an empty partition
	p3 := stageKV(t, s, "m", "q", 0, ModeAppend, spec, 3, 0, 5, "a")
	before := latestVersion(t, s, "m")
	wantKV(t, s, "m", map[int64]string{})
	if st, err := s.EpochStatus(ctx, "m", "q", 0); err != nil || st.Committed {
		t.Fatalf("epoch_status before the commit: %+v %v", st, err)
	}

	if ack := commitKV(t, s, "m", "q", 0, ModeAppend, StatusCommitted, p3, p1, p0, p2); ack.Rows != 5 {
		t.Fatalf("commit: %+v, want 5 rows", ack)
	}
	if v := latestVersion(t, s, "m"); v != before {
		t.Fatalf("the commit made base version %d (was %d): it should be a MemWAL put", v, before)
	}
	all := map[int64]string{1: "a", 2: "a", 3: "a", 4: "a", 5: "a"}
	wantKV(t, s, "m", all)
	tbl, _ := s.Table(ctx, "m")
	if _, err := tbl.ReadStage(ctx, p0); !errors.Is(err, engine.ErrStageNotFound) {
		t.Fatalf("stage record after the commit: %v, want it removed", err)
	}
	if st, err := s.EpochStatus(ctx, "m", "q", 0); err != nil || !st.Committed {
		t.Fatalf("epoch_status after the commit: %+v %v", st, err)
	}

	commitKV(t, s, "m", "q", 0, ModeAppend, StatusDuplicate, p3, p1, p0, p2) // from the WAL
	again := stageKV(t, s, "m", "q", 0, ModeAppend, spec, 0, 2, 1, "a", 2, "a")
	commitKV(t, s, "m", "q", 0, ModeAppend, StatusDuplicate, again)
	commitKV(t, s, "m", "q", 1, ModeAppend, StatusCommitted, stageKV(t, s, "m", "q", 1, ModeAppend, spec, 0, 0, 6, "b"))
	if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FoldMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	commitKV(t, s, "m", "q", 1, ModeAppend, StatusDuplicate, stageKV(t, s, "m", "q", 1, ModeAppend, spec, 0, 1, 6, "b"))
	all[6] = "b"
	wantKV(t, s, "m", all)

	// An epoch whose parts were staged and never committed (the driver aborted it) shows nothing.
	stageKV(t, s, "m", "q", 2, ModeAppend, spec, 0, 0, 7, "c")
	wantKV(t, s, "m", all)
}

// A staged update epoch on a keyed MemWAL table lands as an upsert through the shards: the table
// holds the latest value of each key once; the same epoch on a keyed table without shards is
// refused at its commit.
func TestStagedUpdateEpochUpsertsThroughMemWAL(t *testing.T) {
	s, _ := newSink(t, nil)
	spec := memwalSpec(2, "id")
	commitKV(t, s, "k", "q", 0, ModeUpdate, StatusCommitted,
		stageKV(t, s, "k", "q", 0, ModeUpdate, spec, 0, 0, 1, "a", 2, "a"),
		stageKV(t, s, "k", "q", 0, ModeUpdate, spec, 1, 0, 3, "a"))
	e1 := []string{
		stageKV(t, s, "k", "q", 1, ModeUpdate, spec, 0, 0, 2, "b"),
		stageKV(t, s, "k", "q", 1, ModeUpdate, spec, 1, 0, 3, "b", 4, "b"),
	}
	wantKV(t, s, "k", map[int64]string{1: "a", 2: "a", 3: "a"})
	commitKV(t, s, "k", "q", 1, ModeUpdate, StatusCommitted, e1...)
	commitKV(t, s, "k", "q", 1, ModeUpdate, StatusDuplicate, e1...)
	wantKV(t, s, "k", map[int64]string{1: "a", 2: "b", 3: "b", 4: "b"})

	keyed := &CreateSpec{PrimaryKey: []string{"id"}}
	tok := stageKV(t, s, "plain", "q", 0, ModeAppend, keyed, 0, 0, 1, "a")
	commitKV2 := func(mode Mode, stages ...string) error {
		_, err := s.CommitStaged(context.Background(), CommitStagedRequest{Table: "plain", QueryID: "q", EpochID: 0, Mode: mode, Stages: stages})
		return err
	}
	if err := commitKV2(ModeAppend, tok); err != nil {
		t.Fatal(err)
	}
	_, err := s.WriteEpoch(context.Background(), EpochRequest{Table: "plain", QueryID: "q", EpochID: 1, Mode: ModeUpdate,
		Partition: &Partition{}}, kvSource(t, kv(1, "b")))
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a staged update part on a keyed table without shards: %v, want ErrUnsupported", err)
	}
}

// Two servers on one root: the parts of an epoch reach both, the commit lands at one and its
// replay at the other is a duplicate; the next epoch commits at the other server. Every row is
// there once, read through either server.
func TestStagedMemWALEpochAcrossServers(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := NewSink(store, nil), NewSink(store, nil)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	spec := memwalSpec(2)
	e0 := []string{
		stageKV(t, a, "m", "q", 0, ModeAppend, spec, 0, 0, 1, "a"),
		stageKV(t, b, "m", "q", 0, ModeAppend, spec, 1, 0, 2, "a"),
	}
	commitKV(t, b, "m", "q", 0, ModeAppend, StatusCommitted, e0...)
	commitKV(t, a, "m", "q", 0, ModeAppend, StatusDuplicate, e0...)
	e1 := []string{
		stageKV(t, b, "m", "q", 1, ModeAppend, spec, 0, 0, 3, "b"),
		stageKV(t, a, "m", "q", 1, ModeAppend, spec, 1, 0, 4, "b"),
	}
	commitKV(t, a, "m", "q", 1, ModeAppend, StatusCommitted, e1...)
	commitKV(t, b, "m", "q", 1, ModeAppend, StatusDuplicate, e1...)
	for _, s := range []*Sink{a, b} {
		wantKV(t, s, "m", map[int64]string{1: "a", 2: "a", 3: "b", 4: "b"})
	}
}

const stageHelperEnv = "FLIGHT_SINK_STAGE_HELPER_ROOT"

// TestHelperProcessStagedMemWAL is not a test: run by TestStagedMemWALEpochSurvivesKill as a
// server process on the root in stageHelperEnv. It stages the four parts of epoch 0 and prints
// each token, stages and commits epoch 1 and prints COMMITTED, then waits to be killed.
func TestHelperProcessStagedMemWAL(t *testing.T) {
	root := os.Getenv(stageHelperEnv)
	if root == "" {
		t.Skip("helper process")
	}
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(store, nil)
	for p := int64(0); p < 4; p++ {
		os.Stdout.WriteString("STAGED " + stageKV(t, s, "m", "q", 0, ModeAppend, memwalSpec(2), p, 0, int(p), "e0") + "\n")
	}
	commitKV(t, s, "m", "q", 1, ModeAppend, StatusCommitted,
		stageKV(t, s, "m", "q", 1, ModeAppend, nil, 0, 0, 10, "e1"), stageKV(t, s, "m", "q", 1, ModeAppend, nil, 1, 0, 11, "e1"))
	os.Stdout.WriteString("COMMITTED\n")
	time.Sleep(time.Hour)
}

// A server process killed (SIGKILL) after it acknowledged the four parts of epoch 0 and the
// commit of epoch 1 through MemWAL: on the same root a new server sees nothing of epoch 0, its
// commit lands every part once, the replayed commit of epoch 1 is a duplicate (the killed
// writer's WAL holds it), and every row is there once.
func TestStagedMemWALEpochSurvivesKill(t *testing.T) {
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessStagedMemWAL$", "-test.count=1")
	cmd.Env = append(os.Environ(), stageHelperEnv+"="+root)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var tokens []string
	committed := false
	sc := bufio.NewScanner(stdout)
	for !committed && sc.Scan() {
		line := sc.Text()
		if tok, ok := strings.CutPrefix(line, "STAGED "); ok {
			tokens = append(tokens, tok)
		}
		committed = line == "COMMITTED"
	}
	if !committed || len(tokens) != 4 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper stopped after %d parts (committed %v): %s", len(tokens), committed, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no shard closes, no lease is given up
		t.Fatal(err)
	}
	_ = cmd.Wait()

	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(store, nil)
	t.Cleanup(s.Close)
	wantKV(t, s, "m", map[int64]string{10: "e1", 11: "e1"})
	commitKV(t, s, "m", "q", 1, ModeAppend, StatusDuplicate, "00000000-0000-4000-8000-000000000000")
	if ack := commitKV(t, s, "m", "q", 0, ModeAppend, StatusCommitted, tokens...); ack.Rows != 4 {
		t.Fatalf("commit after the kill: %+v, want 4 rows", ack)
	}
	commitKV(t, s, "m", "q", 0, ModeAppend, StatusDuplicate, tokens...)
	wantKV(t, s, "m", map[int64]string{0: "e0", 1: "e0", 2: "e0", 3: "e0", 10: "e1", 11: "e1"})
}

// A part bound for MemWAL past StageDataBytes is staged in data files instead of its record, and
// commits through MemWAL all the same, beside parts held in their records; parts held in their
// records and committed with route "direct" are written into the version's files. Either way
// every row is there once.
func TestStagedMemWALPartsInFilesAndDirectCommit(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, nil)
	spec := memwalSpec(2)
	commitKV(t, s, "m", "q", 0, ModeAppend, StatusCommitted, stageKV(t, s, "m", "q", 0, ModeAppend, spec, 0, 0, 1, "a"))
	tbl, _ := s.Table(ctx, "m")
	held := stageKV(t, s, "m", "q", 1, ModeAppend, spec, 0, 0, 2, "b")
	defer func(v int64) { StageDataBytes = v }(StageDataBytes)
	StageDataBytes = 1
	inFiles := stageKV(t, s, "m", "q", 1, ModeAppend, spec, 1, 0, 3, "b", 4, "b")
	for tok, wantFiles := range map[string]bool{held: false, inFiles: true} {
		st, err := tbl.ReadStage(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if (len(st.Fragments) > 0) != wantFiles || (len(st.Data) > 0) == wantFiles {
			t.Fatalf("stage %s: %d fragments, %d bytes of rows; want files %v", tok, len(st.Fragments), len(st.Data), wantFiles)
		}
	}
	if ack := commitKV(t, s, "m", "q", 1, ModeAppend, StatusCommitted, held, inFiles); ack.Rows != 3 {
		t.Fatalf("commit: %+v", ack)
	}
	StageDataBytes = 8 << 20
	before := latestVersion(t, s, "m")
	direct := []string{
		stageKV(t, s, "m", "q", 2, ModeAppend, spec, 0, 0, 5, "c"),
		stageKV(t, s, "m", "q", 2, ModeAppend, spec, 1, 0, 6, "c", 7, "c"),
	}
	ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "m", QueryID: "q", EpochID: 2, Stages: direct, Route: RouteDirect})
	if err != nil || ack.Status != StatusCommitted || ack.Route != RouteDirect || ack.Rows != 3 || ack.Version <= before {
		t.Fatalf("direct commit of held parts: %+v %v", ack, err)
	}
	if ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "m", QueryID: "q", EpochID: 2, Stages: direct}); err != nil || ack.Status != StatusDuplicate {
		t.Fatalf("replayed commit of the direct epoch: %+v %v", ack, err)
	}
	wantKV(t, s, "m", map[int64]string{1: "a", 2: "b", 3: "b", 4: "b", 5: "c", 6: "c", 7: "c"})
}

// A part that adds a column (merge_schema) to a MemWAL table is staged in files with its schema;
// the commit that merges it, with a part of the old schema held in its record, commits one
// version on the direct route (a schema change is one base transaction, as for one DoPut), and
// the next epoch, in the new schema, lands in MemWAL again.
func TestStagedMemWALEpochWithSchemaChange(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, nil)
	spec := memwalSpec(2)
	commitKV(t, s, "m", "q", 0, ModeAppend, StatusCommitted, stageKV(t, s, "m", "q", 0, ModeAppend, spec, 0, 0, 1, "a"))
	wide := arrow.NewSchema(append(kvSchema.Fields(), arrow.Field{Name: "w", Type: arrow.PrimitiveTypes.Int64, Nullable: true}), nil)
	wideBatch := func(id int64) arrow.RecordBatch {
		bld := array.NewRecordBuilder(memory.DefaultAllocator, wide)
		defer bld.Release()
		bld.Field(0).(*array.Int64Builder).Append(id)
		bld.Field(1).(*array.StringBuilder).Append("b")
		bld.Field(2).(*array.Int64Builder).Append(id * 10)
		return bld.NewRecordBatch()
	}
	stageWide := func(e, part, id int64) string {
		rd, err := array.NewRecordReader(wide, []arrow.RecordBatch{wideBatch(id)})
		if err != nil {
			t.Fatal(err)
		}
		ack, err := s.WriteEpoch(ctx, EpochRequest{Table: "m", QueryID: "q", EpochID: e, MergeSchema: true,
			Partition: &Partition{ID: part}}, rd)
		if err != nil || ack.Status != StatusStaged {
			t.Fatalf("stage a wider part: %+v %v", ack, err)
		}
		return ack.Stage
	}
	old := stageKV(t, s, "m", "q", 1, ModeAppend, nil, 0, 0, 2, "b")
	widened := stageWide(1, 1, 3)
	if _, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "m", QueryID: "q", EpochID: 1, Stages: []string{old, widened}}); !errors.Is(err, arrowschema.ErrSchemaMismatch) {
		t.Fatalf("a schema change without merge_schema: %v", err)
	}
	ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "m", QueryID: "q", EpochID: 1, Stages: []string{old, widened}, MergeSchema: true})
	if err != nil || ack.Status != StatusCommitted || ack.Route != RouteDirect || ack.Rows != 2 {
		t.Fatalf("commit with a schema change: %+v %v", ack, err)
	}
	if ack := commitKV(t, s, "m", "q", 2, ModeAppend, StatusCommitted, stageWide(2, 0, 4)); ack.Rows != 1 {
		t.Fatalf("next epoch: %+v", ack)
	}
	wantKV(t, s, "m", map[int64]string{1: "a", 2: "b", 3: "b", 4: "b"})
	tbl, _ := s.Table(ctx, "m")
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.ArrowSchema().NumFields() != 3 {
		t.Fatalf("schema %v, want the added column", m.ArrowSchema())
	}
}

// A server that crashed after the MemWAL put of a commit and before it removed the stage records
// (the records are put back here, as the crash leaves them): the replayed commit reads the
// records, finds the epoch held and answers duplicate, on an unkeyed table and on a keyed one
// (every shard holds its part); every row is there once.
func TestStagedMemWALCommitReplayedWithRecordsLeft(t *testing.T) {
	ctx := context.Background()
	for _, spec := range []*CreateSpec{memwalSpec(2), memwalSpec(2, "id")} {
		s, store := newSink(t, nil)
		tokens := []string{
			stageKV(t, s, "m", "q", 0, ModeAppend, spec, 0, 0, 1, "a", 2, "a"),
			stageKV(t, s, "m", "q", 0, ModeAppend, spec, 1, 0, 3, "a"),
		}
		records := map[string][]byte{}
		for _, tok := range tokens {
			key := "m/_staging/" + tok + ".stage"
			b, err := store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			records[key] = b
		}
		commitKV(t, s, "m", "q", 0, ModeAppend, StatusCommitted, tokens...)
		for key, b := range records {
			if err := store.PutIfAbsent(ctx, key, b); err != nil {
				t.Fatal(err)
			}
		}
		commitKV(t, s, "m", "q", 0, ModeAppend, StatusDuplicate, tokens...)
		wantKV(t, s, "m", map[int64]string{1: "a", 2: "a", 3: "a"})
	}
}
