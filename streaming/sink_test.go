package streaming

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

var testSchema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)

func batch(ids ...int64) arrow.RecordBatch {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(ids, nil)
	col := b.NewArray()
	defer col.Release()
	return array.NewRecordBatch(testSchema, []arrow.Array{col}, int64(len(ids)))
}

func source(t testing.TB, recs ...arrow.RecordBatch) BatchSource {
	r, err := array.NewRecordReader(testSchema, recs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newSink(t testing.TB, opts *Options) (*Sink, objstore.Store) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(store, opts)
	t.Cleanup(s.Close) // before the TempDir goes: background maintenance (the Iceberg publish) writes
	return s, store
}

func ids(t testing.TB, s *Sink, table string) map[int64]int {
	tbl, err := s.Table(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := tbl.ReadAll(context.Background(), engine.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]int{}
	for _, r := range recs {
		col := r.Column(0).(*array.Int64)
		for i := 0; i < col.Len(); i++ {
			out[col.Value(i)]++
		}
		r.Release()
	}
	return out
}

func put(t testing.TB, s *Sink, q string, e int64, mode Mode, rows ...int64) (Ack, error) {
	var recs []arrow.RecordBatch
	if len(rows) > 0 {
		recs = append(recs, batch(rows...))
	}
	return s.WriteEpoch(context.Background(), EpochRequest{Table: "t", QueryID: q, EpochID: e, Mode: mode, Create: &CreateSpec{}}, source(t, recs...))
}

func TestDedupeWatermarkAndWindow(t *testing.T) {
	s, _ := newSink(t, nil)
	for e := int64(0); e < 3; e++ {
		ack, err := put(t, s, "q", e, ModeAppend, e*10, e*10+1)
		if err != nil || ack.Status != StatusCommitted {
			t.Fatalf("epoch %d: %+v %v", e, ack, err)
		}
	}
	// Equal to the watermark: the O(1) replay path.
	ack, err := put(t, s, "q", 2, ModeAppend, 20, 21)
	if err != nil || ack.Status != StatusDuplicate || ack.Version != 4 {
		t.Fatalf("replay of latest epoch: %+v %v", ack, err)
	}
	// Below the watermark, inside the window: found by the history scan.
	ack, err = put(t, s, "q", 0, ModeAppend, 0, 1)
	if err != nil || ack.Status != StatusDuplicate || ack.Version != 2 {
		t.Fatalf("replay of older epoch: %+v %v", ack, err)
	}
	if got := ids(t, s, "t"); len(got) != 6 {
		t.Fatalf("rows after replays: %v", got)
	}
}

func TestEpochBelowWatermarkNeverCommittedIsRefused(t *testing.T) {
	s, _ := newSink(t, nil)
	for _, e := range []int64{5, 6} {
		if _, err := put(t, s, "q", e, ModeAppend, e); err != nil {
			t.Fatal(err)
		}
	}
	_, err := put(t, s, "q", 2, ModeAppend, 2)
	if !errors.Is(err, ErrQueryReused) || !strings.Contains(err.Error(), "new query_id") {
		t.Fatalf("want ErrQueryReused, got %v", err)
	}
}

// With no watermark for the query (a table written before watermarks, or one dropped after
// idling), versions removed from the window make dedupe fall back to at-least-once, never wedge.
func TestMissingVersionsInWindowDoNotWedge(t *testing.T) {
	s, store := newSink(t, nil)
	if _, err := put(t, s, "other", 0, ModeAppend, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := put(t, s, "other", 1, ModeAppend, 2); err != nil {
		t.Fatal(err)
	}
	// Cleanup removed version 2.
	if err := store.Delete(context.Background(), "t/_versions/00000000000000000002.manifest"); err != nil {
		t.Fatal(err)
	}
	ack, err := put(t, s, "fresh", 0, ModeAppend, 3)
	if err != nil || ack.Status != StatusCommitted {
		t.Fatalf("want committed despite the missing version, got %+v %v", ack, err)
	}
}

func TestConcurrentSameEpochCommitsOnce(t *testing.T) {
	s, _ := newSink(t, nil)
	if _, err := put(t, s, "seed", 0, ModeAppend, 0); err != nil { // create the table first
		t.Fatal(err)
	}
	const writers = 6
	acks := make([]Ack, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			acks[i], errs[i] = put(t, s, "q", 7, ModeAppend, 100, 101, 102)
		}(i)
	}
	wg.Wait()
	committed := 0
	for i := range acks {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if acks[i].Status == StatusCommitted {
			committed++
		} else if acks[i].Status != StatusDuplicate {
			t.Fatalf("writer %d: %+v", i, acks[i])
		}
	}
	if committed != 1 {
		t.Fatalf("%d writers committed the same epoch", committed)
	}
	got := ids(t, s, "t")
	for _, id := range []int64{100, 101, 102} {
		if got[id] != 1 {
			t.Fatalf("id %d present %d times", id, got[id])
		}
	}
}

func TestCompleteModeAndEmptyEpochs(t *testing.T) {
	s, _ := newSink(t, nil)
	if ack, _ := put(t, s, "q", 0, ModeComplete, 1, 2, 3); ack.Status != StatusCommitted {
		t.Fatalf("%+v", ack)
	}
	if ack, _ := put(t, s, "q", 1, ModeComplete, 4); ack.Status != StatusCommitted {
		t.Fatalf("%+v", ack)
	}
	if got := ids(t, s, "t"); len(got) != 1 || got[4] != 1 {
		t.Fatalf("complete should replace: %v", got)
	}
	ack, err := put(t, s, "q", 2, ModeComplete)
	if err != nil || ack.Status != StatusCommitted {
		t.Fatalf("empty complete epoch must commit a truncate: %+v %v", ack, err)
	}
	if got := ids(t, s, "t"); len(got) != 0 {
		t.Fatalf("empty complete should truncate: %v", got)
	}
	ack, err = put(t, s, "q", 3, ModeAppend)
	if err != nil || ack.Status != StatusEmpty {
		t.Fatalf("empty append epoch: %+v %v", ack, err)
	}
}

func TestStagesCommitOnceAndExpiredStagesAreCleanedUp(t *testing.T) {
	// Maintenance off: its cleanup step would expire the stage too (TestEveryCleanupPathExpiresStages).
	s, store := newSink(t, &Options{StageTTL: 50 * time.Millisecond, CleanupGrace: time.Millisecond,
		DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	ctx := context.Background()
	stage := func(part, attempt int64, rows ...int64) string {
		ack, err := s.WriteEpoch(ctx, EpochRequest{Table: "t", QueryID: "q", EpochID: 3, Create: &CreateSpec{},
			Partition: &Partition{ID: part, Attempt: attempt}}, source(t, batch(rows...)))
		if err != nil || ack.Status != StatusStaged || ack.Stage == "" {
			t.Fatalf("stage p%d a%d: %+v %v", part, attempt, ack, err)
		}
		return ack.Stage
	}
	p0 := stage(0, 0, 1, 2)
	stage(1, 0, 3, 4) // a failed attempt whose stage is never committed
	p1 := stage(1, 1, 30, 40)
	ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "t", QueryID: "q", EpochID: 3, Stages: []string{p1, p0}})
	if err != nil || ack.Status != StatusCommitted || ack.Rows != 4 {
		t.Fatalf("commit: %+v %v", ack, err)
	}
	ack, err = s.CommitStaged(ctx, CommitStagedRequest{Table: "t", QueryID: "q", EpochID: 3, Stages: []string{p1, p0}})
	if err != nil || ack.Status != StatusDuplicate {
		t.Fatalf("second commit: %+v %v", ack, err)
	}
	got := ids(t, s, "t")
	if fmt.Sprint(got) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 30: 1, 40: 1}) {
		t.Fatalf("rows: %v", got)
	}
	dataBefore, _ := store.List(ctx, "t/data/", "")
	if len(dataBefore) != 3 {
		t.Fatalf("want 3 data files (2 committed, 1 orphaned stage), got %d", len(dataBefore))
	}
	time.Sleep(60 * time.Millisecond)
	rep, err := s.Cleanup(ctx, CleanupRequest{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StagesExpired != 1 || rep.DataFilesRemoved != 1 {
		t.Fatalf("cleanup report: %+v", rep)
	}
	if left, _ := store.List(ctx, "t/_staging/", ""); len(left) != 0 {
		t.Fatalf("stage records left: %v", left)
	}
	if dataAfter, _ := store.List(ctx, "t/data/", ""); len(dataAfter) != 2 {
		t.Fatalf("want the 2 committed data files kept, got %d", len(dataAfter))
	}
	if got := ids(t, s, "t"); len(got) != 4 {
		t.Fatalf("rows after cleanup: %v", got)
	}
}

func TestNormalizeRejectsBadRequests(t *testing.T) {
	cases := []EpochRequest{
		{Table: "t", QueryID: "", EpochID: 0},
		{Table: "t", QueryID: "   ", EpochID: 0},
		{Table: "t", QueryID: "q", EpochID: -1},
		{Table: "t", QueryID: "q", Mode: "merge"},
		{Table: "t", QueryID: "q", Lookback: -1},
		{Table: "t", QueryID: "q", Lookback: MaxLookback + 1},
		{Table: "../x", QueryID: "q"},
		{Table: "t", QueryID: "q", Route: "sideways"},
		{Table: "t", QueryID: "q", Partition: &Partition{ID: -1}},
	}
	for i, c := range cases {
		if err := c.Normalize(); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("case %d %+v: want ErrInvalidRequest, got %v", i, c, err)
		}
	}
	r := EpochRequest{Table: "t", QueryID: "  q1 "}
	if err := r.Normalize(); err != nil || r.QueryID != "q1" || r.Lookback != DefaultLookback || r.Mode != ModeAppend {
		t.Fatalf("normalize: %+v %v", r, err)
	}
}

// After a real cleanup removed the versions of the dedupe window, a replay of a query's latest
// epoch is still caught (the watermark survives in the kept manifest), and a query with no
// watermark proceeds with a warning instead of wedging.
func TestDedupeAfterCleanup(t *testing.T) {
	s, _ := newSink(t, &Options{CleanupGrace: time.Millisecond, StageTTL: time.Millisecond})
	ctx := context.Background()
	for e := int64(0); e < 4; e++ {
		if _, err := put(t, s, "a", e, ModeAppend, e); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	rep, err := s.Cleanup(ctx, CleanupRequest{Table: "t", OlderThanSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VersionsRemoved) != 4 { // versions 1..4 removed, 5 (the latest) kept
		t.Fatalf("cleanup removed versions %v", rep.VersionsRemoved)
	}
	ack, err := put(t, s, "a", 3, ModeAppend, 3)
	if err != nil || ack.Status != StatusDuplicate {
		t.Fatalf("replay after cleanup: %+v %v", ack, err)
	}
	ack, err = put(t, s, "b", 0, ModeAppend, 100)
	if err != nil || ack.Status != StatusCommitted {
		t.Fatalf("new query after cleanup: %+v %v", ack, err)
	}
	if got := ids(t, s, "t"); len(got) != 5 {
		t.Fatalf("rows: %v", got)
	}
}

// A stream that ends before the rows its command announced commits nothing, and the epoch can
// be replayed whole.
func TestAnnouncedRowCount(t *testing.T) {
	s, _ := newSink(t, nil)
	ctx := context.Background()
	three, two := int64(3), int64(2)
	_, err := s.WriteEpoch(ctx, EpochRequest{Table: "t", QueryID: "q", EpochID: 0, Create: &CreateSpec{}, ExpectRows: &three}, source(t, batch(1, 2)))
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "2 of the 3 rows") {
		t.Fatalf("short stream: %v", err)
	}
	_, err = s.WriteEpoch(ctx, EpochRequest{Table: "t", QueryID: "q", EpochID: 0, Create: &CreateSpec{}, ExpectRows: &two}, source(t, batch(1, 2, 3)))
	if !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("long stream: %v", err)
	}
	ack, err := s.WriteEpoch(ctx, EpochRequest{Table: "t", QueryID: "q", EpochID: 0, Create: &CreateSpec{}, ExpectRows: &three}, source(t, batch(1, 2, 3)))
	if err != nil || ack.Status != StatusCommitted {
		t.Fatalf("whole stream: %+v %v", ack, err)
	}
	if got := ids(t, s, "t"); len(got) != 3 {
		t.Fatalf("rows: %v", got)
	}
	if tbl, _ := s.Table(ctx, "t"); tbl != nil {
		if files, _ := tbl.Store().List(ctx, "t/data/", ""); len(files) != 1 {
			t.Fatalf("the refused streams left %d data files, want 1 (the committed one)", len(files))
		}
	}
}
