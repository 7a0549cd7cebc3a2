package streaming

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
)

// EpochState is what the table knows of one epoch.
type EpochState struct {
	Committed bool
	Version   uint64 // the version holding the epoch, when Committed
	// Route is RouteMemWAL when the epoch is held by the table's MemWAL shards (then Version is
	// 0: no base version holds it).
	Route Route
}

// findEpoch reports whether (q, e) is committed in t.
//
// Returns an error wrapping ErrQueryReused when e is below q's watermark but not in the history
// window: that epoch was never committed by this query's checkpoint.
//
// scan false skips the history scan when q has no watermark (the MemWAL route: its epochs are
// never base transactions), so the answer is then O(1) "not committed".
//
// m is the latest version as the caller just read it (nil: findEpoch reads it). Reading it again
// here would prove nothing more, since a commit may land right after any read; what makes a
// concurrent duplicate impossible is the commit's own check of the versions in between (and, on
// the MemWAL route, the shard's), and on object storage a second read is a round trip per epoch.
func (s *Sink) findEpoch(ctx context.Context, t *engine.Table, m *engine.Manifest, q string, e int64, lookback int, scan bool) (st EpochState, err error) {
	ctx, span := tracer.Start(ctx, "streaming.Dedupe")
	defer func() {
		span.SetAttributes(attribute.Bool("committed", st.Committed))
		if err != nil {
			span.RecordError(err)
		}
		span.End()
	}()
	if m == nil {
		if m, err = t.Latest(ctx); err != nil {
			return EpochState{}, err
		}
	}
	wm, hasWM, err := t.StreamWatermark(ctx, m, q)
	if err != nil {
		return EpochState{}, err
	}
	switch {
	case hasWM && e > wm.Epoch:
		return EpochState{}, nil // above the watermark: new, no scan needed
	case hasWM && e == wm.Epoch:
		return EpochState{Committed: true, Version: wm.Version}, nil
	}
	if !hasWM && !scan {
		return EpochState{}, nil
	}
	// Below the watermark, or no watermark (dropped after idling past retention, or a table
	// whose manifests carry none): the history window is the source of truth.
	hist, err := t.HistoryFrom(ctx, m.Version, lookback)
	if err != nil {
		return EpochState{}, fmt.Errorf("dedupe scan of table %s: %w", t.Name(), err)
	}
	missing := 0
	for _, h := range hist {
		if h.Missing {
			missing++
			continue
		}
		if id, ok := h.Epoch(); ok && id.QueryID == q && id.EpochID == e {
			return EpochState{Committed: true, Version: h.Version}, nil
		}
	}
	if hasWM { // e < wm.Epoch and not found in the window
		// The engine will never commit an epoch below the watermark, so "proceed" is not an option
		// here: an old epoch that is not a recognisable replay means a reused query id.
		hint := ""
		if missing > 0 {
			hint = fmt.Sprintf(" (%d versions of the window were removed by cleanup, so an old replay cannot be proven either)", missing)
		}
		return EpochState{}, fmt.Errorf("%w: query %q has committed up to epoch %d (version %d) but epoch %d is not in the last %d versions of table %s%s; use a new query_id for a new checkpoint",
			ErrQueryReused, q, wm.Epoch, wm.Version, e, lookback, t.Name(), hint)
	}
	if missing > 0 {
		// No watermark for this query and cleanup removed versions inside the window. Do not
		// wedge the query: proceed, accepting that a replay of an epoch held only by a removed
		// version may land twice (bounded at-least-once, docs/protocol.md).
		s.opts.Logger.Warn("dedupe window has versions removed by cleanup; dedupe falls back to bounded at-least-once",
			"table", t.Name(), "query_id", q, "epoch_id", e, "missing_versions", missing, "lookback", lookback)
	}
	return EpochState{}, nil
}

// EpochStatus reports whether (q, e) is committed in table, so a replaying driver can skip
// sending data for an epoch that already landed. Any server answers for any table: on a MemWAL
// table it reads the shards without claiming them (memwalEpochStatus), so asking never fences
// the server that writes them.
func (s *Sink) EpochStatus(ctx context.Context, table, q string, e int64) (EpochState, error) {
	r := EpochRequest{Table: table, QueryID: q, EpochID: e}
	if err := s.normalize(&r); err != nil {
		return EpochState{}, err
	}
	t, err := s.Table(ctx, table)
	if err != nil {
		return EpochState{}, err
	}
	st, err := s.findEpoch(ctx, t, nil, r.QueryID, e, r.Lookback, true)
	if err != nil || st.Committed {
		return st, err
	}
	return s.memwalEpochStatus(ctx, t, r.QueryID, e)
}

// memwalEpochStatus reports whether a MemWAL table's shards hold (q, e): with a primary key every
// shard must hold it (an epoch puts to every shard); without one, any shard (the server the query
// wrote through put it in a shard it owns). It never claims a shard, on this server or any other:
// a shard this process writes answers from its writer, any other from the read-only view of its
// manifest and WAL (memwal.EpochCommitted), which sees every epoch any server acknowledged,
// flushed or not. Claiming here would fence the server that writes the shard.
func (s *Sink) memwalEpochStatus(ctx context.Context, t *engine.Table, q string, e int64) (EpochState, error) {
	m, err := t.Latest(ctx)
	if err != nil {
		return EpochState{}, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil || ss == nil {
		return EpochState{}, err
	}
	ids := ss.IDs()
	keyed := len(m.PrimaryKey) > 0
	for i, r := range ss.Readers() {
		ok, _, err := memwal.EpochCommitted(ctx, r, q, e)
		if err != nil {
			return EpochState{}, fmt.Errorf("epoch status in memwal shard %s of table %s: %w", ids[i], t.Name(), err)
		}
		if ok && !keyed {
			return EpochState{Committed: true, Route: RouteMemWAL}, nil
		}
		if !ok && keyed {
			return EpochState{}, nil
		}
	}
	if keyed {
		return EpochState{Committed: true, Route: RouteMemWAL}, nil
	}
	return EpochState{}, nil
}
