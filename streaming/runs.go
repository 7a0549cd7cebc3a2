package streaming

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Runs of a query: two live writers under one query id.
//
// A query id names a query across its restarts; each start of it is a run with its own run id
// (Spark: StreamingQuery.runId, new at every start, EpochRequest.RunID). A restart ends the old
// run before the new one writes: the old run never writes again. So once a run of a query has
// written after another, an epoch request of the older run means the older run is still alive
// beside the newer one: two queries share the query id, as two queries started from copies of one
// checkpoint do, and each would drop the other's rows as duplicates. Such a request is refused
// (ErrRunSuperseded), logged at WARN and counted (flight_sink.epochs.run_superseded), before any
// of its data is read; the newer run goes on.
//
// Each server remembers the runs it saw write each query of each table (runTracker): the newest
// and the runs it superseded. A server that restarts, or never saw the older run, cannot tell;
// the next interleave it sees is refused. Requests without a run id are never checked.

// ErrRunSuperseded: an epoch request of a run of its query that a newer run superseded: two live
// writers share the query id.
var ErrRunSuperseded = errors.New("query run superseded by a newer run of the same query")

// MaxRunIDBytes bounds a run id.
const MaxRunIDBytes = 128

// Bounds of the run tracker: the queries it remembers (the least recently written forgotten
// first) and the superseded runs of each.
const (
	maxTrackedQueries  = 4096
	maxSupersededRuns  = 16
	runTrackerForgetBy = maxTrackedQueries / 8
)

var runsSuperseded metric.Int64Counter

func init() {
	runsSuperseded, _ = meter.Int64Counter("flight_sink.epochs.run_superseded",
		metric.WithDescription("Epoch requests refused because a newer run of their query had written already, by table: two live queries share one query id (a copied checkpoint)."))
}

type runKey struct{ table, query string }

// queryRuns is what a server knows of one query's runs.
type queryRuns struct {
	current    string
	since      time.Time // when current first wrote
	superseded []string  // oldest first, at most maxSupersededRuns
	used       uint64    // the tracker's clock at the query's last request
}

// runTracker remembers the runs of the queries a server writes. Safe for concurrent use.
type runTracker struct {
	mu      sync.Mutex
	queries map[runKey]*queryRuns
	clock   uint64
}

// observe records that run writes query of table and returns a *supersededError when a newer run of the query has written already.
func (rt *runTracker) observe(table, query, run string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.queries == nil {
		rt.queries = make(map[runKey]*queryRuns)
	}
	rt.clock++
	k := runKey{table, query}
	q := rt.queries[k]
	if q == nil {
		rt.forgetLocked()
		rt.queries[k] = &queryRuns{current: run, since: time.Now(), used: rt.clock}
		return nil
	}
	q.used = rt.clock
	if q.current == run {
		return nil
	}
	for _, old := range q.superseded {
		if old == run {
			return &supersededError{table: table, query: query, run: run, newer: q.current, since: q.since}
		}
	}
	// A run not seen before: a restart (or a second live query, caught when the older writes).
	q.superseded = append(q.superseded, q.current)
	if len(q.superseded) > maxSupersededRuns {
		q.superseded = q.superseded[len(q.superseded)-maxSupersededRuns:]
	}
	q.current, q.since = run, time.Now()
	return nil
}

// forgetLocked makes room for one more query: at the bound, the least recently written queries
// are forgotten, an eighth of the bound at once.
//
// REQUIRES: rt.mu held.
func (rt *runTracker) forgetLocked() {
	if len(rt.queries) < maxTrackedQueries {
		return
	}
	// The clock values are distinct: forget the runTrackerForgetBy queries used longest ago.
	uses := make([]uint64, 0, len(rt.queries))
	for _, q := range rt.queries {
		uses = append(uses, q.used)
	}
	slices.Sort(uses)
	cut := uses[runTrackerForgetBy-1]
	for k, q := range rt.queries {
		if q.used <= cut {
			delete(rt.queries, k)
		}
	}
}

// supersededError is the refusal of a request of run run of query on table after run newer of
// the same query began writing, at since.
type supersededError struct {
	table, query, run, newer string
	since                    time.Time
}

func (e *supersededError) Error() string {
	return fmt.Sprintf("%v: table %s, query %q: run %s wrote after run %s of the same query began writing (at %s): "+
		"two live queries share this query id (started from copies of one checkpoint?), and each would drop the other's rows as duplicates; "+
		"stop one, and give a query started from a copy its own query_id",
		ErrRunSuperseded, e.table, e.query, e.run, e.newer, e.since.UTC().Format(time.RFC3339))
}

func (e *supersededError) Unwrap() error { return ErrRunSuperseded }

// checkRun refuses epoch request r when a newer run of its query has written on this server
// (runTracker.observe); r without a run id passes.
func (s *Sink) checkRun(ctx context.Context, r *EpochRequest) error {
	if r.RunID == "" {
		return nil
	}
	err := s.runs.observe(r.Table, r.QueryID, r.RunID)
	var sup *supersededError
	if errors.As(err, &sup) {
		runsSuperseded.Add(ctx, 1, metric.WithAttributes(attribute.String("table", r.Table)))
		s.opts.Logger.Warn("epoch refused: a newer run of its query is writing; two queries may share this query id (a copied checkpoint)",
			"table", r.Table, "query_id", r.QueryID, "epoch_id", r.EpochID, "run_id", r.RunID, "newer_run_id", sup.newer)
	}
	return err
}
