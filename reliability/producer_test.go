package reliability

// A producer that behaves like a Spark Structured Streaming query writing through foreachBatch:
// it sends epoch after epoch; after any failure it re-sends the epoch it has no acknowledgement
// for, with the same data; and now and then it re-sends one that was acknowledged (Spark re-runs
// the last batch of its offset log when its commit log does not have it yet).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
)

// endpoint hands a producer the client of a live server to send its next attempt to.
type endpoint interface {
	// client returns a server's client, waiting while none is up; r picks among several.
	client(ctx context.Context, r *rand.Rand) (flight.Client, error)
}

// producer is one streaming query.
type producer struct {
	index    int    // producer number, part of every row id
	query    string // query_id
	table    string
	create   any  // the "create" of the command: the table is made by the first epoch that lands
	staged   bool // multi-writer epochs: two staged partitions, then commit_epoch
	maxRows  int
	rng      *rand.Rand
	ledger   *ledger
	inflight *atomic.Int64 // when set, counts attempts in flight (the torture test kills mid-put)
	stopped  atomic.Bool
	finished atomic.Bool // run returned

	// Counters for the report.
	sends, failures, resendsAcked, duplicates, statusChecks, firstSendDuplicates atomic.Int64
	next                                                                         int64 // next epoch to send (only the producer's goroutine)
}

// stop makes run return once the epoch in flight is acknowledged.
func (p *producer) stop() { p.stopped.Store(true) }

// run sends epochs until stop is called or ctx ends. A violation of the protocol (an answer that
// exactly-once forbids) is recorded in the ledger, never retried away.
func (p *producer) run(ctx context.Context, ep endpoint) {
	defer p.finished.Store(true)
	for !p.stopped.Load() && ctx.Err() == nil {
		e := p.next
		p.deliver(ctx, ep, e)
		if ctx.Err() != nil {
			return
		}
		p.next++
		// A trigger interval: Spark's are seconds; a few milliseconds keeps the tables at a size
		// where a hundred kill cycles run in minutes.
		sleepCtx(ctx, time.Duration(p.rng.IntN(30))*time.Millisecond)
		// Sometimes Spark runs an acknowledged batch again: it must come back duplicate.
		switch u := p.rng.Float64(); {
		case u < 0.08:
			p.resendAcked(ctx, ep, e, false)
		case u < 0.11 && e >= 3:
			p.resendAcked(ctx, ep, e-1-int64(p.rng.IntN(3)), true)
		}
	}
}

// deliver sends epoch e until it is acknowledged.
func (p *producer) deliver(ctx context.Context, ep endpoint, e int64) {
	key := epochKey{p.query, e}
	p.ledger.sent(key, epochRows(p.query, e, p.maxRows))
	attempts := 0
	for ctx.Err() == nil {
		c, err := ep.client(ctx, p.rng)
		if err != nil {
			return
		}
		if attempts > 0 {
			// After a failure a driver may first ask whether the epoch landed (epoch_status), and
			// Spark may replay the previous, acknowledged batch before this one.
			if p.rng.Float64() < 0.3 {
				if done := p.checkStatus(ctx, c, key); done {
					return
				}
			}
			if e > 0 && p.rng.Float64() < 0.3 {
				p.resendAcked(ctx, ep, e-1, false)
			}
		}
		attempts++
		p.sends.Add(1)
		a, err := p.send(ctx, c, e, attempts)
		if err == nil {
			switch a.Status {
			case "committed":
				p.ledger.acked(key, a, attempts)
				return
			case "duplicate":
				if attempts == 1 && a.Route != "memwal" {
					p.ledger.violation("%s: first send answered duplicate (%+v): an epoch that was never sent is reported as landed", key, a)
				}
				// On the MemWAL route a first send may answer duplicate: its put landed in the WAL
				// but the writer learned right then that it was fenced, so the sink reopened the
				// shard, whose replay holds the epoch (landed once, by this very request).
				if attempts == 1 {
					p.firstSendDuplicates.Add(1)
				}
				p.duplicates.Add(1)
				p.ledger.acked(key, a, attempts)
				return
			default:
				p.ledger.violation("%s: unexpected ack %+v", key, a)
				return
			}
		}
		p.failures.Add(1)
		if !p.retryable(err) {
			p.ledger.violation("%s attempt %d: %v (not a failure a crash explains)", key, attempts, err)
			return
		}
		p.ledger.failure(key, err)
		sleepCtx(ctx, time.Duration(5+p.rng.IntN(40))*time.Millisecond)
	}
}

// checkStatus asks epoch_status; a committed answer is an acknowledgement.
func (p *producer) checkStatus(ctx context.Context, c flight.Client, key epochKey) bool {
	p.statusChecks.Add(1)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := servertest.Action(cctx, c, "epoch_status", map[string]any{"table": p.table, "query_id": key.Q, "epoch_id": key.E})
	if err != nil {
		return false
	}
	var st struct {
		Committed bool   `json:"committed"`
		Version   uint64 `json:"version"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		p.ledger.violation("%s: epoch_status answered %s: %v", key, b, err)
		return false
	}
	if st.Committed {
		p.ledger.acked(key, ack{Status: "duplicate", Version: st.Version}, 0)
	}
	return st.Committed
}

// send makes one attempt at epoch e: one DoPut, or staged partitions and commit_epoch.
func (p *producer) send(ctx context.Context, c flight.Client, e int64, attempt int) (ack, error) {
	if p.inflight != nil {
		p.inflight.Add(1)
		defer p.inflight.Add(-1)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rec := epochBatch(p.index, p.query, e, p.maxRows)
	defer rec.Release()
	cmd := map[string]any{"table": p.table, "query_id": p.query, "epoch_id": e, "create": p.create}
	if !p.staged {
		return doPut(cctx, c, cmd, rec)
	}
	// Two partitions, each one task attempt; the driver commits the stages it got as one epoch.
	half := rec.NumRows() / 2
	parts := []arrow.RecordBatch{rec.NewSlice(0, half), rec.NewSlice(half, rec.NumRows())}
	defer parts[0].Release()
	defer parts[1].Release()
	var stages []string
	for i, part := range parts {
		pc := map[string]any{"table": p.table, "query_id": p.query, "epoch_id": e, "create": p.create,
			"partition": map[string]any{"id": i, "attempt": attempt}}
		a, err := doPut(cctx, c, pc, part)
		if err != nil {
			return ack{}, err
		}
		switch a.Status {
		case "staged":
			stages = append(stages, a.Stage)
		case "duplicate":
			return a, nil // the epoch is committed already
		default:
			return ack{}, fmt.Errorf("partition %d of epoch %d: unexpected ack %+v", i, e, a)
		}
	}
	b, err := servertest.Action(cctx, c, "commit_epoch", map[string]any{"table": p.table, "query_id": p.query, "epoch_id": e, "stages": stages})
	if err != nil {
		return ack{}, err
	}
	var a ack
	if err := json.Unmarshal(b, &a); err != nil {
		return ack{}, fmt.Errorf("commit_epoch answered %s: %w", b, err)
	}
	return a, nil
}

// resendAcked sends an acknowledged epoch again. The last one must be duplicate; an older one
// may also be refused as a reused query id (MemWAL shards keep only a flushed watermark per
// query), but never land again.
func (p *producer) resendAcked(ctx context.Context, ep endpoint, e int64, older bool) {
	key := epochKey{p.query, e}
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		c, err := ep.client(ctx, p.rng)
		if err != nil {
			return
		}
		p.resendsAcked.Add(1)
		a, err := p.send(ctx, c, e, 100+try)
		if err == nil {
			if a.Status != "duplicate" {
				p.ledger.violation("%s: acknowledged epoch sent again answered %+v, want duplicate", key, a)
			}
			p.duplicates.Add(1)
			return
		}
		if older && status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "reused") {
			return
		}
		if !p.retryable(err) {
			p.ledger.violation("%s (acknowledged, sent again): %v", key, err)
			return
		}
		sleepCtx(ctx, time.Duration(5+p.rng.IntN(40))*time.Millisecond)
	}
}

// retryable: a failure a crash or a restart explains. A fenced MemWAL writer (another process
// claimed the shard) is one too: nothing was acknowledged, the next attempt reopens the shard.
func (p *producer) retryable(err error) bool {
	if retryable(err) {
		return true
	}
	if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "fenced") {
		return true
	}
	// A stage lost with a crashed server's in-flight work: the driver retries the epoch.
	if p.staged && status.Code(err) == codes.NotFound && strings.Contains(err.Error(), "stage") {
		return true
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ledger records what the producers sent and what the servers acknowledged, and the violations
// of exactly-once seen on the way.
type ledger struct {
	mu         sync.Mutex
	rows       map[epochKey]int // rows of every epoch ever sent
	ackedAt    map[epochKey]ack
	attempts   map[epochKey]int // the sends before the acknowledgement (0: epoch_status said committed)
	ackCount   int
	failures   map[string]int // error code -> count
	violations []string
}

func newLedger() *ledger {
	return &ledger{rows: map[epochKey]int{}, ackedAt: map[epochKey]ack{}, attempts: map[epochKey]int{}, failures: map[string]int{}}
}

func (l *ledger) sent(k epochKey, rows int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k] = rows
}

func (l *ledger) acked(k epochKey, a ack, attempts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.ackedAt[k]; ok && a.Version != 0 && prev.Version != 0 && prev.Version != a.Version {
		l.violations = append(l.violations, fmt.Sprintf("%s acknowledged at version %d and at version %d", k, prev.Version, a.Version))
	}
	if _, ok := l.ackedAt[k]; !ok {
		l.ackedAt[k] = a
		l.attempts[k] = attempts
		l.ackCount++
	}
}

// howAcked says how epoch k was first acknowledged, for a failure message.
func (l *ledger) howAcked(k epochKey) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.ackedAt[k]
	if !ok {
		return fmt.Sprintf("%s: not acknowledged", k)
	}
	return fmt.Sprintf("%s: acknowledged %s (route %q, version %d, %d rows) at send %d (0: epoch_status)", k, a.Status, a.Route, a.Version, a.Rows, l.attempts[k])
}

func (l *ledger) failure(k epochKey, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures[status.Code(err).String()]++
}

func (l *ledger) failureCounts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.failures))
	for k, n := range l.failures {
		out[k] = n
	}
	return out
}

func (l *ledger) violation(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

// snapshot returns the epochs acknowledged so far and every epoch sent so far with its rows.
func (l *ledger) snapshot() (acked map[epochKey]bool, sent map[epochKey]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acked = make(map[epochKey]bool, len(l.ackedAt))
	for k := range l.ackedAt {
		acked[k] = true
	}
	sent = make(map[epochKey]int, len(l.rows))
	for k, n := range l.rows {
		sent[k] = n
	}
	return acked, sent
}

func (l *ledger) problems() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.violations...)
}

// checkRows checks rows read back from one table against the ledger: no row twice, no row of an
// epoch never sent, every epoch whole or absent (an epoch is one transaction), every epoch
// acknowledged before the read (acked) present, and, when final, every epoch sent present.
func checkRows(table string, rows []storedRow, producersOf map[string]bool, acked map[epochKey]bool, sent map[epochKey]int, final bool) (epochs, nrows int, problems []string) {
	seen := make(map[int64]int, len(rows))
	per := map[epochKey]int{}
	for _, r := range rows {
		seen[r.ID]++
		per[r.Key]++
		if !r.Valid {
			problems = append(problems, fmt.Sprintf("%s: row %#x of %s has a payload its producer never wrote", table, r.ID, r.Key))
		}
	}
	for id, n := range seen {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%s: row %#x is there %d times", table, id, n))
		}
	}
	for k, n := range per {
		want, ok := sent[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %d rows of epoch %s that was never sent", table, n, k))
		case n != want:
			problems = append(problems, fmt.Sprintf("%s: epoch %s has %d of its %d rows (an epoch lands whole or not at all, once)", table, k, n, want))
		}
	}
	for k := range sent {
		if !producersOf[k.Q] {
			continue
		}
		if _, there := per[k]; !there && (acked[k] || final) {
			problems = append(problems, fmt.Sprintf("%s: epoch %s is missing (acknowledged: %v)", table, k, acked[k]))
		}
	}
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
	}
	return len(per), len(rows), problems
}
