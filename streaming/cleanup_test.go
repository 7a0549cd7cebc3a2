package streaming

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

// stageScenario prepares table "t" of s with two stages of epoch ("q", 1): a fresh one staged
// through the sink (partition 0, rows 10 and 11) and one whose record says it was written two days
// ago (partition 1, a data file of rows 20 and 21). It returns their tokens.
func stageScenario(t *testing.T, s *Sink) (fresh, old string) {
	t.Helper()
	ctx := t.Context()
	if a, err := put(t, s, "setup", 0, ModeAppend, 1); err != nil || a.Status != StatusCommitted {
		t.Fatalf("create: %+v %v", a, err)
	}
	ack, err := s.WriteEpoch(ctx, EpochRequest{Table: "t", QueryID: "q", EpochID: 1, Partition: &Partition{ID: 0}}, source(t, batch(10, 11)))
	if err != nil || ack.Status != StatusStaged {
		t.Fatalf("stage: %+v %v", ack, err)
	}
	tbl, err := s.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	w, err := tbl.NewWriter(ctx, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(20, 21)
	err = w.Write(ctx, rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := engine.Stage{QueryID: "q", EpochID: 1, Mode: string(ModeAppend), PartitionID: 1, Rows: 2, Fragments: frags,
		Created: time.Now().Add(-48 * time.Hour)}
	if err := tbl.WriteStage(ctx, &st); err != nil {
		t.Fatal(err)
	}
	// Older than every grace below: only the stage record keeps the fresh stage's files.
	time.Sleep(20 * time.Millisecond)
	return ack.Stage, st.Token
}

// requireStageOutcome checks what a cleanup of stageScenario's table must leave: the old stage
// gone (committing it fails with ErrStageNotFound), the fresh one kept with its files, so that it
// still commits as the epoch. extra are the ids committed besides the scenario's.
func requireStageOutcome(t *testing.T, s *Sink, fresh, old string, extra ...int64) {
	t.Helper()
	ctx := t.Context()
	tbl, err := s.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.ReadStage(ctx, old); !errors.Is(err, engine.ErrStageNotFound) {
		t.Fatalf("the expired stage: %v, want %v", err, engine.ErrStageNotFound)
	}
	_, err = s.CommitStaged(ctx, CommitStagedRequest{Table: "t", QueryID: "q", EpochID: 1, Mode: ModeAppend, Stages: []string{fresh, old}})
	if !errors.Is(err, ErrStageNotFound) {
		t.Fatalf("commit naming the expired stage: %v, want %v", err, ErrStageNotFound)
	}
	ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: "t", QueryID: "q", EpochID: 1, Mode: ModeAppend, Stages: []string{fresh}})
	if err != nil || ack.Status != StatusCommitted || ack.Rows != 2 {
		t.Fatalf("commit of the kept stage: %+v %v", ack, err)
	}
	want := map[int64]int{1: 1, 10: 1, 11: 1}
	for _, id := range extra {
		want[id]++
	}
	if got := ids(t, s, "t"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows after the commit: %v, want %v", got, want)
	}
}

// Every cleanup path expires stages the same way (engine.Table.Cleanup with the stage TTL): the
// cleanup action and the maintainer's cleanup step here, the CLI in cmd/flight-sink
// (TestCleanupCLIExpiresStages). A stage past the TTL is removed; a fresh one is kept, its files
// too though they are older than the grace, and it still commits.
func TestEveryCleanupPathExpiresStages(t *testing.T) {
	short := engine.Duration(time.Millisecond)
	cases := []struct {
		name  string
		opts  Options
		clean func(t *testing.T, s *Sink)
		extra []int64 // ids the cleanup path committed
	}{
		{"action", Options{CleanupGrace: time.Millisecond, DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}},
			func(t *testing.T, s *Sink) {
				rep, err := s.Cleanup(t.Context(), CleanupRequest{Table: "t"})
				if err != nil || rep.StagesExpired != 1 {
					t.Fatalf("cleanup: %+v %v", rep, err)
				}
			}, nil},
		{"maintainer", Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceInline,
			Cleanup: engine.CleanupMaintenance{Grace: short, CheckInterval: short}}},
			func(t *testing.T, s *Sink) {
				// A user commit runs the maintenance, inline: cleanup is due for the stage alone.
				if a, err := put(t, s, "other", 0, ModeAppend, 2); err != nil || a.Status != StatusCommitted {
					t.Fatalf("commit: %+v %v", a, err)
				}
			}, []int64{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			s, _ := newSink(t, &opts)
			t.Cleanup(s.Close)
			fresh, old := stageScenario(t, s)
			tc.clean(t, s)
			requireStageOutcome(t, s, fresh, old, tc.extra...)
		})
	}
}
