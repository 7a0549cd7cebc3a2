package streaming

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
)

// replayMismatches counts duplicates whose replay differed from the committed epoch.
var replayMismatches metric.Int64Counter

func init() {
	replayMismatches, _ = meter.Int64Counter("flight_sink.epochs.replay_mismatch",
		metric.WithDescription("Duplicate epochs whose replay sent another row count than the committed epoch recorded, by table: two queries may share one query id (a copied checkpoint)."))
}

// epochProperties returns the transaction properties of epoch e's commit, which lands rows.
func epochProperties(e *epoch, rows int64) map[string]string {
	return engine.EpochProperties(epochid.ID{QueryID: e.QueryID, EpochID: e.EpochID},
		map[string]string{engine.PropEpochRows: strconv.FormatInt(rows, 10)})
}

// checkReplay compares a replay of epoch r, which sent rows, with the commit in version v that
// holds the epoch, and returns a warning when the row counts differ ("" when they agree or the
// commit recorded none). A genuine replay resends the epoch's rows; other rows under the same
// (query id, epoch) usually mean two queries share the query id, as queries started from copies
// of one checkpoint do, and the rows of this one are being dropped. It never fails the duplicate:
// the check is advice, read from the history only on a replay.
func (s *Sink) checkReplay(ctx context.Context, t *engine.Table, r *EpochRequest, v uint64, rows int64) string {
	if v == 0 {
		return ""
	}
	hist, err := t.HistoryFrom(ctx, v, 1)
	if err != nil || len(hist) == 0 || hist[0].Missing {
		return ""
	}
	committed, err := strconv.ParseInt(hist[0].Properties[engine.PropEpochRows], 10, 64)
	if err != nil || committed == rows {
		return ""
	}
	replayMismatches.Add(ctx, 1, metric.WithAttributes(attribute.String("table", t.Name())))
	s.opts.Logger.Warn("replayed epoch differs from the committed one; two queries may share this query id (a copied checkpoint)",
		"table", t.Name(), "query_id", r.QueryID, "epoch_id", r.EpochID, "version", v,
		"committed_rows", committed, "replay_rows", rows)
	return fmt.Sprintf("epoch %d of query %q was committed in version %d with %d rows, this replay sent %d and was dropped as a duplicate: "+
		"two queries may share this query id (started from copies of one checkpoint?); give each its own query_id",
		r.EpochID, r.QueryID, v, committed, rows)
}
