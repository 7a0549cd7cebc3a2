package streaming

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
)

// A replay unlike the epoch it replays.
//
// A genuine replay resends the epoch's rows; other rows under the same (query id, epoch) usually
// mean two queries share the query id, as queries started from copies of one checkpoint do, and
// the rows of this one are being dropped as a duplicate. Wherever a duplicate is answered and the
// rows the epoch landed with are known, they are compared with the rows the replay sent, and a
// difference is answered with a warning in the ack, a WARN log line and the replay_mismatch
// metric (replayMismatch). The rows are known:
//
//   - for an epoch committed as a table version: its transaction property engine.PropEpochRows,
//     and, committed from staged partitions, each partition's rows (PropEpochPartitionRows), which
//     a replayed partition DoPut is compared with (checkReplay);
//   - for a commit_epoch of stages: the rows their stage records hold (stagedRows);
//   - for a MemWAL epoch: the rows of its puts while the shards hold them in memory, not yet
//     flushed (memwal.EpochLocation.Rows; replayHolding).
//
// The check is advice: it never fails the duplicate, and costs a read only on a duplicate.

// replayMismatches counts duplicates whose replay differed from the committed epoch.
var replayMismatches metric.Int64Counter

func init() {
	replayMismatches, _ = meter.Int64Counter("flight_sink.epochs.replay_mismatch",
		metric.WithDescription("Duplicate epochs whose replay sent another row count than the committed epoch recorded, by table: two queries may share one query id (a copied checkpoint)."))
}

// epochProperties returns the transaction properties of epoch e's commit, which lands rows.
func epochProperties(e *epoch, rows int64) map[string]string {
	p := map[string]string{engine.PropEpochRows: strconv.FormatInt(rows, 10)}
	if e.RunID != "" {
		p[engine.PropRunID] = e.RunID
	}
	if e.partitionRows != "" {
		p[engine.PropEpochPartitionRows] = e.partitionRows
	}
	return engine.EpochProperties(epochid.ID{QueryID: e.QueryID, EpochID: e.EpochID}, p)
}

// partitionRowsProperty is the PropEpochPartitionRows value of stages recs (sorted by partition).
func partitionRowsProperty(recs []*engine.Stage) string {
	var b strings.Builder
	for i, rec := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(rec.PartitionID, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(rec.Rows, 10))
	}
	return b.String()
}

// partitionRowsOf returns partition id's rows in a PropEpochPartitionRows value; false when the
// value does not name it (or cannot be read).
func partitionRowsOf(prop string, id int64) (int64, bool) {
	want := strconv.FormatInt(id, 10)
	for part := range strings.SplitSeq(prop, ",") {
		p, rows, ok := strings.Cut(part, ":")
		if !ok || p != want {
			continue
		}
		n, err := strconv.ParseInt(rows, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// checkReplay compares a replay of epoch r, which sent rows, with the commit in version v that
// holds the epoch, and returns a warning when the row counts differ ("" when they agree or the
// commit recorded none). A replayed partition (r.Partition) is compared with that partition's
// rows in the commit, when the epoch was committed from staged partitions.
func (s *Sink) checkReplay(ctx context.Context, t *engine.Table, r *EpochRequest, v uint64, rows int64) string {
	if v == 0 {
		return ""
	}
	hist, err := t.HistoryFrom(ctx, v, 1)
	if err != nil || len(hist) == 0 || hist[0].Missing {
		return ""
	}
	props := hist[0].Properties
	if r.Partition != nil {
		committed, ok := partitionRowsOf(props[engine.PropEpochPartitionRows], r.Partition.ID)
		if !ok {
			return ""
		}
		return s.replayMismatch(ctx, t.Name(), r, fmt.Sprintf("partition %d of epoch %d of query %q was committed in version %d",
			r.Partition.ID, r.EpochID, r.QueryID, v), committed, rows)
	}
	committed, err := strconv.ParseInt(props[engine.PropEpochRows], 10, 64)
	if err != nil {
		return ""
	}
	return s.replayMismatch(ctx, t.Name(), r, fmt.Sprintf("epoch %d of query %q was committed in version %d", r.EpochID, r.QueryID, v), committed, rows)
}

// stagedRows returns the rows the stage records tokens name hold for epoch r, false when one
// cannot be read or belongs to another epoch (it is a duplicate's advice, not its validation).
func (s *Sink) stagedRows(ctx context.Context, t *engine.Table, r *EpochRequest, tokens []string) (int64, bool) {
	recs, err := s.readStages(ctx, t, r, tokens)
	if err != nil {
		return 0, false
	}
	var rows int64
	for _, rec := range recs {
		rows += rec.Rows
	}
	return rows, true
}

// replayMismatch returns the warning of a duplicate of epoch r on table whose replay sent rows
// where what landed (held says what and where) has committed rows, and logs and counts it; ""
// when the two agree.
func (s *Sink) replayMismatch(ctx context.Context, table string, r *EpochRequest, held string, committed, rows int64) string {
	if committed == rows {
		return ""
	}
	replayMismatches.Add(ctx, 1, metric.WithAttributes(attribute.String("table", table)))
	s.opts.Logger.Warn("replayed epoch differs from the committed one; two queries may share this query id (a copied checkpoint)",
		"table", table, "query_id", r.QueryID, "epoch_id", r.EpochID, "held", held,
		"committed_rows", committed, "replay_rows", rows)
	return fmt.Sprintf("%s with %d rows, this replay sent %d and was dropped as a duplicate: "+
		"two queries may share this query id (started from copies of one checkpoint?); give each its own query_id",
		held, committed, rows)
}

// replayHolding collects what the MemWAL dedupe found of a replayed epoch: over the shards that
// hold it in memory (memwal.EpochLocation.HasRows), the rows their puts hold and the rows this
// replay sent those shards. Safe for concurrent use (a keyed epoch's shards answer at once).
type replayHolding struct {
	mu         sync.Mutex
	held, sent int64
	shards     []string
}

// note records that shard holds the epoch at loc, and that the replay sent it sent rows.
func (h *replayHolding) note(shard string, loc memwal.EpochLocation, sent int64) {
	if !loc.HasRows {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held += loc.Rows
	h.sent += sent
	h.shards = append(h.shards, shard)
}

// addSent adds n rows to what the replay sent the shards noted (a streamed replay, counted once
// drained); nothing when none was noted.
func (h *replayHolding) addSent(n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.shards) > 0 {
		h.sent += n
	}
}

// warning compares what note recorded (replayMismatch); "" when no shard knew its rows.
func (h *replayHolding) warning(ctx context.Context, s *Sink, table string, r *EpochRequest) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.shards) == 0 {
		return ""
	}
	return s.replayMismatch(ctx, table, r, fmt.Sprintf("epoch %d of query %q is held by MemWAL shard %s",
		r.EpochID, r.QueryID, strings.Join(h.shards, ", ")), h.held, h.sent)
}
