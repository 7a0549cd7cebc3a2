package flightsvc_test

// The Spark Structured Streaming sink's suite, run against the Flight surface: DoPut with CMD descriptors
// carrying {"table","query_id","epoch_id","mode",...}, acks read from PutResult app_metadata.

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

func TestAppendHappyPath(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})

	a0 := s.putEpoch(t, "events", "q1", 0, idRange(0, 10))
	wantAck(t, a0, "committed", 2) // version 1 is the Create
	if a0.Table != "events" || a0.QueryID != "q1" || a0.EpochID == nil || *a0.EpochID != 0 || a0.Rows != 10 || a0.Stage != "" {
		t.Fatalf("ack %+v", a0)
	}
	a1 := s.putEpoch(t, "events", "q1", 1, idRange(10, 5))
	wantAck(t, a1, "committed", 3)
	if a1.Rows != 5 || *a1.EpochID != 1 {
		t.Fatalf("ack %+v", a1)
	}
	s.wantIDs(t, "events", idRange(0, 15))

	st := s.stats(t, "events")
	if st.Version != 3 || st.Rows != 15 {
		t.Fatalf("table_stats %+v, want version 3 rows 15", st)
	}
	if wm := st.Streams["q1"]; wm.Epoch != 1 || wm.Version != 3 {
		t.Fatalf("watermark of q1 = %+v, want epoch 1 version 3", wm)
	}
	// One transaction per epoch, each stamped with its identity.
	h := s.history(t, "events", 10)
	if len(h) != 3 || h[0].Operation != string(engine.OpAppend) || h[1].Operation != string(engine.OpAppend) || h[2].Operation != string(engine.OpCreate) {
		t.Fatalf("history %+v", h)
	}
	for i, e := range []string{"1", "0"} {
		if p := h[i].Properties; p[engine.PropQueryID] != "q1" || p[engine.PropEpochID] != e {
			t.Fatalf("history[%d] properties %v, want q1 epoch %s", i, p, e)
		}
	}
}

func TestQueryIDRequired(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "seed", 0, idRange(0, 3))
	before := s.version(t, "t")

	for name, c := range map[string]cmd{
		"missing":         {"table": "t", "epoch_id": 1, "create": true},
		"empty":           {"table": "t", "query_id": "", "epoch_id": 1},
		"whitespace-only": {"table": "t", "query_id": " \t\n ", "epoch_id": 1},
		"null":            {"table": "t", "query_id": nil, "epoch_id": 1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.putCmd(testCtx(t), t, c, idRange(100, 5))
			wantCode(t, err, codes.InvalidArgument, "query_id")
		})
	}
	// Nothing committed, not even on a table that does not exist yet with create set.
	if v := s.version(t, "t"); v != before {
		t.Fatalf("version moved from %d to %d", before, v)
	}
	s.wantIDs(t, "t", idRange(0, 3))
	_, err := s.putCmd(testCtx(t), t, cmd{"table": "fresh", "epoch_id": 0, "create": true}, idRange(0, 1))
	wantCode(t, err, codes.InvalidArgument, "query_id")
	_, err = s.action(testCtx(t), "table_stats", cmd{"table": "fresh"})
	wantCode(t, err, codes.NotFound)
}

func TestQueryIDTrimmedOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	a := s.putEpoch(t, "t", "  q1 ", 0, idRange(0, 4))
	wantAck(t, a, "committed", 2)
	if a.QueryID != "q1" {
		t.Fatalf("ack query_id %q, want the trimmed %q", a.QueryID, "q1")
	}
	h := s.history(t, "t", 1)
	if got := h[0].Properties[engine.PropQueryID]; got != "q1" {
		t.Fatalf("stamped query id %q, want %q", got, "q1")
	}
	// The trimmed id is the identity: the same epoch under the untrimmed or trimmed spelling is
	// a replay, not a second commit.
	for _, q := range []string{"q1", "q1  ", "\tq1"} {
		wantAck(t, s.putEpoch(t, "t", q, 0, idRange(0, 4)), "duplicate", 2)
	}
	if wm, ok := s.stats(t, "t").Streams["q1"]; !ok || wm.Epoch != 0 {
		t.Fatalf("watermarks %+v, want q1 at epoch 0", s.stats(t, "t").Streams)
	}
	s.wantIDs(t, "t", idRange(0, 4))
}

func TestEmptyAppendEpochAndItsReplay(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 3)), "committed", 2)

	// An empty append epoch commits nothing.
	a := s.mustPut(t, epochCmd("t", "q", 1))
	wantAck(t, a, "empty", 0)
	if a.Version != 0 || a.Rows != 0 || a.EpochID == nil || *a.EpochID != 1 {
		t.Fatalf("empty ack %+v", a)
	}
	if v := s.version(t, "t"); v != 2 {
		t.Fatalf("version %d after an empty epoch, want 2", v)
	}
	// Its replay is empty again: nothing to dedupe, nothing written.
	wantAck(t, s.mustPut(t, epochCmd("t", "q", 1)), "empty", 0)
	// Zero-row batches are an empty epoch too.
	wantAck(t, s.mustPut(t, epochCmd("t", "q", 1), []int64{}, []int64{}), "empty", 0)
	if v := s.version(t, "t"); v != 2 {
		t.Fatalf("version %d after empty replays, want 2", v)
	}
	s.wantIDs(t, "t", idRange(0, 3))
	// The next epoch goes on normally.
	wantAck(t, s.putEpoch(t, "t", "q", 2, idRange(3, 2)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 5))
}

func TestEmptyFirstEpochCreatesTable(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.mustPut(t, epochCmd("t", "q", 0)), "empty", 0)
	st := s.stats(t, "t")
	if st.Version != 1 || st.Rows != 0 {
		t.Fatalf("table_stats %+v, want the created, empty version 1", st)
	}
}

func TestReplayOfNonEmptyEpochIsDuplicate(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	a0 := s.putEpoch(t, "t", "q", 0, idRange(0, 10))
	wantAck(t, a0, "committed", 2)
	a1 := s.putEpoch(t, "t", "q", 1, idRange(10, 10))
	wantAck(t, a1, "committed", 3)

	// Replay of the latest epoch (the one Spark replays after a crash): caught by the watermark.
	r1 := s.putEpoch(t, "t", "q", 1, idRange(10, 10))
	wantAck(t, r1, "duplicate", 3)
	if r1.Rows != 0 || r1.QueryID != "q" || *r1.EpochID != 1 || r1.Warning != "" {
		t.Fatalf("duplicate ack %+v", r1)
	}
	// Replay of an older epoch inside the look-back window: found in the history.
	r0 := s.putEpoch(t, "t", "q", 0, idRange(0, 10))
	wantAck(t, r0, "duplicate", 2)
	if r0.Warning != "" {
		t.Fatalf("a replay of the committed rows warns: %+v", r0)
	}
	// A replay whose data differs (Spark's replays are deterministic, but two queries started
	// from copies of one checkpoint share the query id) still writes nothing: the identity
	// decides. Its row count differs from the committed epoch's, so the ack warns.
	rd := s.putEpoch(t, "t", "q", 1, idRange(500, 3))
	wantAck(t, rd, "duplicate", 3)
	if !strings.Contains(rd.Warning, "committed in version 3 with 10 rows, this replay sent 3") {
		t.Fatalf("a replay of other rows: warning %q, want the two row counts", rd.Warning)
	}

	if v := s.version(t, "t"); v != 3 {
		t.Fatalf("version %d after replays, want 3", v)
	}
	s.wantIDs(t, "t", idRange(0, 20))
	// epoch_status agrees.
	var es struct {
		Committed bool   `json:"committed"`
		Version   uint64 `json:"version"`
	}
	s.mustAction(t, "epoch_status", cmd{"table": "t", "query_id": "q", "epoch_id": 0}, &es)
	if !es.Committed || es.Version != 2 {
		t.Fatalf("epoch_status %+v, want committed at 2", es)
	}
	s.mustAction(t, "epoch_status", cmd{"table": "t", "query_id": "q", "epoch_id": 2}, &es)
	if es.Committed {
		t.Fatalf("epoch_status of an uncommitted epoch: %+v", es)
	}
}

// TestLookbackWindowAndWatermark covers the streaming sink's look-back expiry on a server that goes
// beyond the bounded window.
//
// What the per-query watermark guarantees: every manifest carries each streaming query's latest
// committed epoch, so a replay of a query's *latest* epoch (the one Spark replays after a crash)
// is recognised in O(1), however many versions of other queries landed since and however small
// dedupe_lookback_versions is. An *older* epoch of the query is looked for in the history window
// only; outside the window it cannot be proven a replay, and since the engine never commits below
// a watermark, it is refused with FailedPrecondition ("query_id reused with a new checkpoint?")
// rather than silently dropped or written twice.
func TestLookbackWindowAndWatermark(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	withLookback := func(c cmd, n int) cmd { c["dedupe_lookback_versions"] = n; return c }

	a := s.putEpoch(t, "t", "A", 0, idRange(0, 5))
	wantAck(t, a, "committed", 2)
	var others []int64
	for i, q := range []string{"B", "C", "D", "E"} {
		ids := idRange(int64(100+10*i), 10)
		s.putEpoch(t, "t", q, 0, ids)
		others = append(others, ids...)
	}
	// A's epoch 0 is 4 versions back, outside a window of 2, and still a duplicate.
	r, err := s.putCmd(testCtx(t), t, withLookback(epochCmd("t", "A", 0), 2), idRange(0, 5))
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, r, "duplicate", a.Version)

	// A moves on to epoch 1; then more versions of others push A's epoch 0 out of the window.
	a1 := s.putEpoch(t, "t", "A", 1, idRange(5, 5))
	wantAck(t, a1, "committed", 7)
	for i, q := range []string{"B", "C", "D"} {
		ids := idRange(int64(200+10*i), 10)
		s.putEpoch(t, "t", q, 1, ids)
		others = append(others, ids...)
	}
	// The latest epoch of A: O(1) through the watermark whatever the window.
	r, err = s.putCmd(testCtx(t), t, withLookback(epochCmd("t", "A", 1), 1), idRange(5, 5))
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, r, "duplicate", a1.Version)
	// An older epoch of A inside a wide window: a proven replay.
	r, err = s.putCmd(testCtx(t), t, withLookback(epochCmd("t", "A", 0), 100), idRange(0, 5))
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, r, "duplicate", a.Version)
	// The same older epoch outside a window of 2: refused, not written.
	before := s.version(t, "t")
	_, err = s.putCmd(testCtx(t), t, withLookback(epochCmd("t", "A", 0), 2), idRange(0, 5))
	wantCode(t, err, codes.FailedPrecondition, "query_id reused")
	if v := s.version(t, "t"); v != before {
		t.Fatalf("version moved from %d to %d", before, v)
	}
	s.wantIDs(t, "t", idRange(0, 10), others)
}

func TestEpochBelowWatermarkNeverCommitted(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "B", 5, idRange(0, 5)), "committed", 2)
	wantAck(t, s.putEpoch(t, "t", "B", 6, idRange(5, 5)), "committed", 3)

	// Epoch 2 of B was never committed, and B is already at 6: a new checkpoint reusing the id.
	_, err := s.putCmd(testCtx(t), t, epochCmd("t", "B", 2), idRange(100, 5))
	wantCode(t, err, codes.FailedPrecondition, "reused", "checkpoint")
	// epoch_status says the same instead of guessing.
	_, err = s.action(testCtx(t), "epoch_status", cmd{"table": "t", "query_id": "B", "epoch_id": 2})
	wantCode(t, err, codes.FailedPrecondition, "reused")
	if v := s.version(t, "t"); v != 3 {
		t.Fatalf("version %d, want 3", v)
	}
	s.wantIDs(t, "t", idRange(0, 10))
	// A fresh query id is the way forward.
	wantAck(t, s.putEpoch(t, "t", "B-new", 0, idRange(100, 5)), "committed", 4)
	// And B itself goes on above its watermark.
	wantAck(t, s.putEpoch(t, "t", "B", 7, idRange(200, 1)), "committed", 5)
}

func TestManyEpochsMonotonicVersions(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const epochs, rows = 30, 7
	var prev uint64
	for e := int64(0); e < epochs; e++ {
		a := s.putEpoch(t, "t", "q", e, idRange(e*rows, rows))
		wantAck(t, a, "committed", 0)
		if a.Version <= prev {
			t.Fatalf("epoch %d committed at version %d, not above %d", e, a.Version, prev)
		}
		if prev != 0 && a.Version != prev+1 {
			t.Fatalf("epoch %d committed at version %d, want %d (one transaction per epoch)", e, a.Version, prev+1)
		}
		prev = a.Version
	}
	s.wantIDs(t, "t", idRange(0, epochs*rows))
	h := s.wantDenseHistory(t, "t")
	if len(h) != epochs+1 {
		t.Fatalf("%d versions, want %d", len(h), epochs+1)
	}
	if st := s.stats(t, "t"); st.Streams["q"].Epoch != epochs-1 || st.Rows != epochs*rows {
		t.Fatalf("table_stats %+v", st)
	}
}

func TestCompleteModeReplacesAndEmptyTruncates(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	complete := func(e int64) cmd { c := epochCmd("t", "agg", e); c["mode"] = "complete"; return c }

	wantAck(t, s.mustPut(t, complete(0), idRange(0, 5)), "committed", 2)
	s.wantIDs(t, "t", idRange(0, 5))
	a := s.mustPut(t, complete(1), idRange(100, 3), idRange(103, 2))
	wantAck(t, a, "committed", 3)
	if a.Rows != 5 {
		t.Fatalf("ack %+v", a)
	}
	s.wantIDs(t, "t", idRange(100, 5))
	// Replay of a complete epoch: duplicate, contents untouched.
	wantAck(t, s.mustPut(t, complete(1), idRange(900, 1)), "duplicate", 3)
	s.wantIDs(t, "t", idRange(100, 5))

	// An empty complete epoch still commits: an empty Overwrite truncates the table.
	e := s.mustPut(t, complete(2))
	wantAck(t, e, "committed", 4)
	if e.Rows != 0 {
		t.Fatalf("ack %+v", e)
	}
	if st := s.stats(t, "t"); st.Version != 4 || st.Rows != 0 {
		t.Fatalf("table_stats %+v, want version 4 with 0 rows", st)
	}
	if ids := s.readIDs(t, "t"); len(ids) != 0 {
		t.Fatalf("rows after truncate: %v", ids)
	}
	// Its replay is a duplicate (it was committed), not another truncate.
	wantAck(t, s.mustPut(t, complete(2)), "duplicate", 4)
	h := s.history(t, "t", 1)
	if h[0].Operation != string(engine.OpOverwrite) || h[0].Properties[engine.PropEpochID] != "2" {
		t.Fatalf("latest transaction %+v", h[0])
	}
	// The old contents are still there for time travel.
	r, err := s.get(testCtx(t), cmd{"table": "t", "version": 2})
	if err != nil || r.Rows != 5 {
		t.Fatalf("version 2: %d rows, %v", r.Rows, err)
	}
}

// TestStrayOptionsAreRefused: only mode decides whether an epoch replaces data. A command with
// an option the protocol does not have ("write_mode": "overwrite", "overwrite": true) is refused
// with InvalidArgument naming the option and commits nothing; without it the epoch appends.
func TestStrayOptionsAreRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.mustPut(t, epochCmd("t", "q", 0), idRange(0, 10)), "committed", 2)
	for e := int64(1); e < 3; e++ {
		for _, stray := range []string{"write_mode", "overwrite"} {
			c := epochCmd("t", "q", e)
			c[stray] = map[string]any{"write_mode": "overwrite", "overwrite": true}[stray]
			_, err := s.putCmd(testCtx(t), t, c, idRange(e*10, 10))
			wantCode(t, err, codes.InvalidArgument, `unknown field "`+stray+`" in DoPut command`)
		}
		if v := s.version(t, "t"); v != uint64(e+1) {
			t.Fatalf("a refused command moved the table to version %d", v)
		}
		wantAck(t, s.mustPut(t, epochCmd("t", "q", e), idRange(e*10, 10)), "committed", uint64(e+2))
	}
	s.wantIDs(t, "t", idRange(0, 30))
	for _, h := range s.history(t, "t", 3) {
		if h.Operation != string(engine.OpAppend) {
			t.Fatalf("transaction %+v, want Append", h)
		}
	}
}

// TestUpdateModeWithoutPrimaryKeyAppends: update mode on a table with no primary key appends
// the delta rows, like Spark's SupportsStreamingUpdateAsAppend.
func TestUpdateModeWithoutPrimaryKeyAppends(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for e := int64(0); e < 2; e++ {
		c := epochCmd("t", "q", e)
		c["mode"] = "update"
		wantAck(t, s.mustPut(t, c, idRange(e*4, 4)), "committed", uint64(e+2))
	}
	c := epochCmd("t", "q", 2)
	c["mode"] = "update"
	wantAck(t, s.mustPut(t, c), "empty", 0) // an empty update epoch commits nothing
	s.wantIDs(t, "t", idRange(0, 8))
}

// TestWatermarkDroppedAfterRetention: once a query's watermark is dropped (idle past
// StreamWatermarkRetention), its replays are still caught by the history window.
func TestWatermarkDroppedAfterRetention(t *testing.T) {
	t.Parallel()
	cfg := flightsvc.Config{}
	cfg.Sink.Engine.StreamWatermarkRetention = time.Nanosecond // every other query is idle at once
	s := startServer(t, cfg)
	a := s.putEpoch(t, "t", "A", 0, idRange(0, 5))
	wantAck(t, a, "committed", 2)
	s.putEpoch(t, "t", "B", 0, idRange(5, 5))
	if st := s.stats(t, "t"); len(st.Streams) != 1 || st.Streams["B"].Epoch != 0 {
		t.Fatalf("watermarks %+v, want only B's", st.Streams)
	}
	wantAck(t, s.putEpoch(t, "t", "A", 0, idRange(0, 5)), "duplicate", a.Version)
	wantAck(t, s.putEpoch(t, "t", "A", 1, idRange(10, 5)), "committed", 4)
	s.wantIDs(t, "t", idRange(0, 15))
}
