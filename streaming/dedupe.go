package streaming

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/flight-sink/flight-sink/engine"
)

// epochState is what the table knows of one epoch.
type epochState struct {
	Committed bool
	Version   uint64 // the version holding the epoch, when Committed
}

// findEpoch reports whether (q, e) is committed in t.
//
// Returns an error wrapping ErrQueryReused when e is below q's watermark but not in the history
// window: that epoch was never committed by this query's checkpoint.
func (s *Sink) findEpoch(ctx context.Context, t *engine.Table, q string, e int64, lookback int) (st epochState, err error) {
	ctx, span := tracer.Start(ctx, "streaming.Dedupe")
	defer func() {
		span.SetAttributes(attribute.Bool("committed", st.Committed))
		if err != nil {
			span.RecordError(err)
		}
		span.End()
	}()
	m, err := t.Latest(ctx)
	if err != nil {
		return epochState{}, err
	}
	wm, hasWM := m.Streams[q]
	switch {
	case hasWM && e > wm.Epoch:
		return epochState{}, nil // above the watermark: new, no scan needed
	case hasWM && e == wm.Epoch:
		return epochState{Committed: true, Version: wm.Version}, nil
	}
	// Below the watermark, or no watermark (dropped after idling past retention, or a table
	// written before watermarks): the history window is the source of truth.
	hist, err := t.HistoryFrom(ctx, m.Version, lookback)
	if err != nil {
		return epochState{}, fmt.Errorf("dedupe scan of table %s: %w", t.Name(), err)
	}
	missing := 0
	for _, h := range hist {
		if h.Missing {
			missing++
			continue
		}
		if id, ok := epochOf(h.Properties); ok && id.QueryID == q && id.EpochID == e {
			return epochState{Committed: true, Version: h.Version}, nil
		}
	}
	if hasWM { // e < wm.Epoch and not found in the window
		// The engine will never commit an epoch below the watermark, so "proceed" is not an option
		// here: an old epoch that is not a recognisable replay means a reused query id.
		hint := ""
		if missing > 0 {
			hint = fmt.Sprintf(" (%d versions of the window were removed by cleanup, so an old replay cannot be proven either)", missing)
		}
		return epochState{}, fmt.Errorf("%w: query %q has committed up to epoch %d (version %d) but epoch %d is not in the last %d versions of table %s%s; use a new query_id for a new checkpoint",
			ErrQueryReused, q, wm.Epoch, wm.Version, e, lookback, t.Name(), hint)
	}
	if missing > 0 {
		// No watermark for this query and cleanup removed versions inside the window. Do not
		// wedge the query: proceed, accepting that a replay of an epoch held only by a removed
		// version may land twice (bounded at-least-once, docs/protocol.md).
		s.opts.Logger.Warn("dedupe window has versions removed by cleanup; dedupe falls back to bounded at-least-once",
			"table", t.Name(), "query_id", q, "epoch_id", e, "missing_versions", missing, "lookback", lookback)
	}
	return epochState{}, nil
}

func epochOf(props map[string]string) (engine.EpochIdentity, bool) {
	t := engine.Transaction{Properties: props}
	return t.Epoch()
}

// EpochStatus reports whether (q, e) is committed in table, so a replaying driver can skip
// sending data for an epoch that already landed.
func (s *Sink) EpochStatus(ctx context.Context, table, q string, e int64) (epochState, error) {
	r := EpochRequest{Table: table, QueryID: q, EpochID: e}
	if err := s.normalize(&r); err != nil {
		return epochState{}, err
	}
	t, err := s.Table(ctx, table)
	if err != nil {
		return epochState{}, err
	}
	return s.findEpoch(ctx, t, r.QueryID, e, r.Lookback)
}
