package flightsvc_test

// Multi-writer epochs: executors stage partitions (DoPut with "partition"), the driver commits the
// chosen stages with DoAction commit_epoch as one transaction, exactly once.

import (
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

func stageCmd(table, q string, e, part, attempt int64) cmd {
	c := epochCmd(table, q, e)
	c["partition"] = cmd{"id": part, "attempt": attempt}
	return c
}

func TestMultiWriterEpochWithRetriedAttempt(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const table, q = "mw", "spark-q"

	// Partitions 0, 1, 2 stage in parallel (the first creates the table; the others lose or win
	// that race harmlessly). Partition 1 is also staged by a retried task attempt with other rows.
	type part struct{ id, attempt, from, n int64 }
	parts := []part{{0, 0, 0, 10}, {1, 0, 1000, 7}, {2, 0, 20, 5}, {1, 1, 10, 10}}
	acks := make([]ack, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acks[i], errs[i] = s.putCmd(testCtx(t), t, stageCmd(table, q, 0, p.id, p.attempt), idRange(p.from, p.n))
		}()
	}
	wg.Wait()
	tokens := map[string]bool{}
	for i, p := range parts {
		if errs[i] != nil {
			t.Fatalf("stage partition %d attempt %d: %v", p.id, p.attempt, errs[i])
		}
		a := acks[i]
		wantAck(t, a, "staged", 0)
		if a.Stage == "" || tokens[a.Stage] || a.Rows != p.n || a.Version != 0 || *a.EpochID != 0 || a.QueryID != q {
			t.Fatalf("stage ack %+v for %+v", a, p)
		}
		tokens[a.Stage] = true
	}
	// Staging makes nothing visible.
	if st := s.stats(t, table); st.Version != 1 || st.Rows != 0 {
		t.Fatalf("after staging: %+v, want the empty created table", st)
	}
	var es struct {
		Committed bool   `json:"committed"`
		Version   uint64 `json:"version"`
	}
	s.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": 0}, &es)
	if es.Committed {
		t.Fatalf("epoch_status before commit: %+v", es)
	}

	// The driver commits p0, p1 attempt 1 and p2 (in any order) as one transaction.
	commit := cmd{"table": table, "query_id": q, "epoch_id": 0, "mode": "append",
		"stages": []string{acks[3].Stage, acks[0].Stage, acks[2].Stage}}
	var c ack
	s.mustAction(t, "commit_epoch", commit, &c)
	wantAck(t, c, "committed", 2)
	if c.Rows != 25 {
		t.Fatalf("commit ack %+v, want 25 rows", c)
	}
	s.wantIDs(t, table, idRange(0, 25)) // p1 attempt 0's ids 1000.. are absent
	if h := s.history(t, table, 5); len(h) != 2 {
		t.Fatalf("history %+v, want Create + one epoch transaction", h)
	}

	// The driver retries the commit (it did not see the answer): duplicate, same version.
	var again ack
	s.mustAction(t, "commit_epoch", commit, &again)
	wantAck(t, again, "duplicate", 2)
	s.mustAction(t, "epoch_status", cmd{"table": table, "query_id": q, "epoch_id": 0}, &es)
	if !es.Committed || es.Version != 2 {
		t.Fatalf("epoch_status %+v, want committed at 2", es)
	}
	// A straggler task stages for the committed epoch: duplicate, nothing staged.
	a, err := s.putCmd(testCtx(t), t, stageCmd(table, q, 0, 1, 2), idRange(5000, 3))
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "duplicate", 2)
	if a.Stage != "" {
		t.Fatalf("duplicate ack carries a stage: %+v", a)
	}
	// The left-over attempt-0 stage cannot be committed later as part of this epoch.
	var late ack
	s.mustAction(t, "commit_epoch", cmd{"table": table, "query_id": q, "epoch_id": 0, "stages": []string{acks[1].Stage}}, &late)
	wantAck(t, late, "duplicate", 2)
	s.wantIDs(t, table, idRange(0, 25))
	if v := s.version(t, table); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
}

func TestCommitEpochRejectsBadStages(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const table, q = "mw", "q"
	stage := func(e, part, attempt, from int64) string {
		a := s.mustPut(t, stageCmd(table, q, e, part, attempt), idRange(from, 3))
		wantAck(t, a, "staged", 0)
		return a.Stage
	}
	p0 := stage(1, 0, 0, 0)
	p1a0 := stage(1, 1, 0, 10)
	p1a1 := stage(1, 1, 1, 20)
	other := stage(2, 0, 0, 30)
	base := func(stages ...string) cmd {
		return cmd{"table": table, "query_id": q, "epoch_id": 1, "stages": stages}
	}
	for _, tc := range []struct {
		name string
		body any
		code codes.Code
	}{
		{"two attempts of one partition", base(p0, p1a0, p1a1), codes.InvalidArgument},
		{"stage of another epoch", base(p0, other), codes.InvalidArgument},
		{"stage of another query", cmd{"table": table, "query_id": "other", "epoch_id": 1, "stages": []string{p0}}, codes.InvalidArgument},
		{"mode differs from the stages'", cmd{"table": table, "query_id": q, "epoch_id": 1, "mode": "complete", "stages": []string{p0}}, codes.InvalidArgument},
		{"not a token", base(p0, "../../etc/passwd"), codes.InvalidArgument},
		{"unknown token", base(p0, "0b6a3f7e-8d52-4a4b-9c1e-4d2f5a6b7c8d"), codes.NotFound},
		{"missing query_id", cmd{"table": table, "epoch_id": 1, "stages": []string{p0}}, codes.InvalidArgument},
		{"bad JSON", []byte(`{"table": "mw", "stages": [`), codes.InvalidArgument},
		{"unknown table", cmd{"table": "nope", "query_id": q, "epoch_id": 1, "stages": []string{p0}}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.action(testCtx(t), "commit_epoch", tc.body)
			wantCode(t, err, tc.code)
		})
	}
	if v := s.version(t, table); v != 1 {
		t.Fatalf("version %d after rejected commits, want 1", v)
	}
	// The stages are intact: a correct commit still works.
	var c ack
	s.mustAction(t, "commit_epoch", base(p1a1, p0), &c)
	wantAck(t, c, "committed", 2)
	s.wantIDs(t, table, idRange(0, 3), idRange(20, 3))
	// Committing no stages at all is an empty epoch (append): nothing to commit.
	s.mustAction(t, "commit_epoch", cmd{"table": table, "query_id": q, "epoch_id": 3, "stages": []string{}}, &c)
	wantAck(t, c, "empty", 0)
}
