package flightsvc_test

// Copied checkpoints: a replay whose rows differ from the epoch it replays is a duplicate with a
// warning on every route (staged partitions, commit_epoch, MemWAL), and a run of a query that
// writes after a newer run of the same query began is refused.

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// wantWarning checks that a duplicate ack warns with every part of want (none: no warning).
func wantWarning(t testing.TB, a ack, want ...string) {
	t.Helper()
	if a.Status != "duplicate" {
		t.Fatalf("ack %+v, want a duplicate", a)
	}
	if len(want) == 0 {
		if a.Warning != "" {
			t.Fatalf("a replay of the committed rows warns: %+v", a)
		}
		return
	}
	for _, w := range want {
		if !strings.Contains(a.Warning, w) {
			t.Fatalf("duplicate warning %q, want it to contain %q", a.Warning, w)
		}
	}
}

// commitStages commits epoch e of query q in table from stages and returns the ack.
func (c *flightConn) commitStages(t testing.TB, table, q string, e int64, extra cmd, stages ...string) ack {
	t.Helper()
	if stages == nil {
		stages = []string{} // an empty epoch
	}
	body := cmd{"table": table, "query_id": q, "epoch_id": e, "stages": stages}
	for k, v := range extra {
		body[k] = v
	}
	var a ack
	c.mustAction(t, "commit_epoch", body, &a)
	return a
}

// TestStagedReplayWithOtherRowsWarns: on the direct route, a replayed partition DoPut is compared
// with that partition's rows in the commit, and a commit_epoch of a committed epoch with the rows
// its stages hold.
func TestStagedReplayWithOtherRowsWarns(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const table, q = "staged_replay", "q"

	p0 := s.mustPut(t, stageCmd(table, q, 0, 0, 0), idRange(0, 10))
	p1 := s.mustPut(t, stageCmd(table, q, 0, 1, 0), idRange(10, 5))
	wantAck(t, s.commitStages(t, table, q, 0, nil, p0.Stage, p1.Stage), "committed", 2)

	// Spark replays the epoch: each task's partition again, with the same rows.
	wantWarning(t, s.mustPut(t, stageCmd(table, q, 0, 0, 0), idRange(0, 10)))
	wantWarning(t, s.mustPut(t, stageCmd(table, q, 0, 1, 1), idRange(10, 5)))
	// Another query under the same id: its partition 1 holds 3 rows.
	wantWarning(t, s.mustPut(t, stageCmd(table, q, 0, 1, 0), idRange(100, 3)),
		"partition 1 of epoch 0", "committed in version 2 with 5 rows, this replay sent 3")
	// The whole epoch replayed in one DoPut is compared with the epoch's 15 rows.
	wantWarning(t, s.putEpoch(t, table, q, 0, idRange(0, 15)))
	wantWarning(t, s.putEpoch(t, table, q, 0, idRange(0, 4)), "with 15 rows, this replay sent 4")

	// Two queries under one id stage epoch 1 at once; the first commit lands, the second is a
	// duplicate whose stages hold other rows.
	a0 := s.mustPut(t, stageCmd(table, q, 1, 0, 0), idRange(200, 6))
	b0 := s.mustPut(t, stageCmd(table, q, 1, 0, 0), idRange(300, 2))
	b1 := s.mustPut(t, stageCmd(table, q, 1, 1, 0), idRange(400, 1))
	wantAck(t, s.commitStages(t, table, q, 1, nil, a0.Stage), "committed", 3)
	wantWarning(t, s.commitStages(t, table, q, 1, nil, b0.Stage, b1.Stage), "epoch 1 of query \"q\" was committed in version 3 with 6 rows, this replay sent 3")
	// The driver's retry of the committed commit, and a replay whose tasks all found the epoch
	// committed (no stage to name), are plain duplicates.
	wantWarning(t, s.commitStages(t, table, q, 1, nil, a0.Stage))
	wantWarning(t, s.commitStages(t, table, q, 1, nil))

	s.wantIDs(t, table, append(idRange(0, 15), idRange(200, 6)...))
}

// TestMemWALReplayWithOtherRowsWarns: an epoch the MemWAL shards hold in memory is compared with
// its replay, unkeyed (one shard holds it), keyed (every shard holds a part) and committed from
// stages.
func TestMemWALReplayWithOtherRowsWarns(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for _, tc := range []struct {
		name   string
		create cmd
	}{
		{"unkeyed", cmd{"memwal": cmd{"shards": 2}}},
		{"keyed", cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, q := "memwal_replay_"+tc.name, "q"
			put := func(e int64, ids []int64) ack {
				c := epochCmd(table, q, e)
				c["create"] = tc.create
				return s.mustPut(t, c, ids)
			}
			first := put(0, idRange(0, 10))
			if first.Status != "committed" || first.Route != "memwal" {
				t.Fatalf("first epoch %+v, want committed to memwal", first)
			}
			wantWarning(t, put(0, idRange(0, 10)))
			wantWarning(t, put(0, idRange(100, 3)), "epoch 0 of query \"q\" is held by MemWAL shard", "with 10 rows, this replay sent 3")

			// A multi-writer epoch lands in the shards at its commit; another query's stages of it
			// are staged (a part is not deduped) and their commit is the duplicate.
			p0 := s.mustPut(t, stageCmd(table, q, 1, 0, 0), idRange(20, 4))
			p1 := s.mustPut(t, stageCmd(table, q, 1, 1, 0), idRange(30, 4))
			if c := s.commitStages(t, table, q, 1, nil, p0.Stage, p1.Stage); c.Status != "committed" || c.Route != "memwal" {
				t.Fatalf("staged commit %+v, want committed to memwal", c)
			}
			o0 := s.mustPut(t, stageCmd(table, q, 1, 0, 0), idRange(20, 4))
			o1 := s.mustPut(t, stageCmd(table, q, 1, 1, 0), idRange(30, 4))
			wantWarning(t, s.commitStages(t, table, q, 1, nil, o0.Stage, o1.Stage))
			x0 := s.mustPut(t, stageCmd(table, q, 1, 0, 0), idRange(500, 1))
			wantWarning(t, s.commitStages(t, table, q, 1, nil, x0.Stage), "epoch 1 of query \"q\" is held by MemWAL shard", "with 8 rows, this replay sent 1")

			s.wantIDs(t, table, append(idRange(0, 10), append(idRange(20, 4), idRange(30, 4)...)...))
		})
	}
}

// TestRunsOfOneQuery: a restarted query (a new run after the old one's last write) writes on; a
// run that writes after a newer run of its query began is refused, on DoPut and commit_epoch
// alike, and the newer run goes on. The run id is stamped on the commit.
func TestRunsOfOneQuery(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const table, q = "runs", "q"
	put := func(run string, e int64, ids []int64) (ack, error) {
		c := epochCmd(table, q, e)
		if run != "" {
			c["run_id"] = run
		}
		return s.putCmd(testCtx(t), t, c, ids)
	}
	mustPut := func(run string, e int64, ids []int64, status string) {
		t.Helper()
		a, err := put(run, e, ids)
		if err != nil {
			t.Fatalf("run %s epoch %d: %v", run, e, err)
		}
		if a.Status != status || a.Warning != "" {
			t.Fatalf("run %s epoch %d: ack %+v, want %s without a warning", run, e, a, status)
		}
	}

	// Run a writes epochs 0 and 1 and stops; its restart b replays epoch 1 and goes on; so does
	// c after b. None is refused.
	mustPut("run-a", 0, idRange(0, 2), "committed")
	mustPut("run-a", 1, idRange(2, 2), "committed")
	mustPut("run-b", 1, idRange(2, 2), "duplicate")
	mustPut("run-b", 2, idRange(4, 2), "committed")
	mustPut("run-c", 3, idRange(6, 2), "committed")
	// A writer that sends no run id is not checked.
	mustPut("", 4, idRange(8, 2), "committed")

	// a (or b) writing again after c began: two live writers of q.
	for _, run := range []string{"run-a", "run-b"} {
		_, err := put(run, 5, idRange(100, 2))
		wantReason(t, err, codes.FailedPrecondition, "QUERY_RUN_SUPERSEDED")
		if msg := err.Error(); !strings.Contains(msg, "run "+run+" wrote after run run-c") || !strings.Contains(msg, "copies of one checkpoint") {
			t.Fatalf("refusal %q, want it to name both runs and the copied checkpoint", msg)
		}
	}
	// A stage of the superseded run, and its commit, are refused too.
	_, err := s.putCmd(testCtx(t), t, cmd{"table": table, "query_id": q, "epoch_id": 5, "partition": cmd{"id": 0}, "run_id": "run-a"}, idRange(100, 1))
	wantReason(t, err, codes.FailedPrecondition, "QUERY_RUN_SUPERSEDED")
	_, err = s.action(testCtx(t), "commit_epoch", cmd{"table": table, "query_id": q, "epoch_id": 5, "stages": []string{}, "run_id": "run-b"})
	wantReason(t, err, codes.FailedPrecondition, "QUERY_RUN_SUPERSEDED")
	// The newest run writes on, staged or not; another query's runs are its own.
	mustPut("run-c", 5, idRange(10, 2), "committed")
	p := s.mustPut(t, cmd{"table": table, "query_id": q, "epoch_id": 6, "partition": cmd{"id": 0}, "run_id": "run-c"}, idRange(12, 1))
	wantAck(t, s.commitStages(t, table, q, 6, cmd{"run_id": "run-c"}, p.Stage), "committed", 0)
	other := epochCmd(table, "other", 0)
	other["run_id"] = "run-a"
	wantAck(t, s.mustPut(t, other, idRange(50, 1)), "committed", 0)

	s.wantIDs(t, table, append(idRange(0, 13), 50))
	h := s.history(t, table, 1)
	if got := h[0].Properties["flight_sink.streaming.run_id"]; got != "run-a" {
		t.Fatalf("newest commit's run_id property %q, want run-a (query other's)", got)
	}

	// run_id is checked: blank or too long is refused.
	for _, blank := range []string{"", "  "} {
		_, err = s.putCmd(testCtx(t), t, cmd{"table": table, "query_id": q, "epoch_id": 7, "run_id": blank}, idRange(0, 1))
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		_, err = s.action(testCtx(t), "commit_epoch", cmd{"table": table, "query_id": q, "epoch_id": 7, "stages": []string{}, "run_id": blank})
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
	}
	_, err = put(strings.Repeat("r", 129), 7, idRange(0, 1))
	wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
}
