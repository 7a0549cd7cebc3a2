package streaming

import (
	"context"
	"errors"
	"fmt"

	"github.com/flight-sink/flight-sink/engine"
)

// WriteEpoch lands one epoch (or, with r.Partition, stages one partition of it) from src, exactly
// once, and returns the acknowledgement. r is normalised first. The ack is returned only after
// what it reports is durable; on any error nothing is committed.
func (s *Sink) WriteEpoch(ctx context.Context, r EpochRequest, src BatchSource) (Ack, error) {
	ctx, span := startSpan(ctx, "streaming.WriteEpoch", &r)
	ack, err := s.writeEpoch(ctx, r, src)
	if err == nil {
		recordAck(ctx, ack, r.Mode)
	}
	endSpan(span, ack, err)
	return ack, err
}

func (s *Sink) writeEpoch(ctx context.Context, r EpochRequest, src BatchSource) (Ack, error) {
	if err := s.normalize(&r); err != nil {
		return Ack{}, err
	}
	t, err := s.openOrCreate(ctx, r.Table, src.Schema(), r.Create)
	if err != nil {
		return Ack{}, err
	}
	if err := s.checkRoute(ctx, t, &r); err != nil {
		return Ack{}, err
	}
	// Dedupe before reading the data: a replayed epoch costs a manifest read, not a write.
	st, err := s.findEpoch(ctx, t, r.QueryID, r.EpochID, r.Lookback)
	if err != nil {
		return Ack{}, err
	}
	if st.Committed {
		if err := drain(src); err != nil {
			return Ack{}, fmt.Errorf("read stream: %w", err)
		}
		ack := newAck(StatusDuplicate, &r)
		ack.Version = st.Version
		return ack, nil
	}
	frags, rows, w, err := s.writeAll(ctx, t, src)
	if err != nil {
		return Ack{}, err
	}
	if r.Partition != nil {
		return s.stage(ctx, t, &r, frags, rows, w)
	}
	return s.commitEpoch(ctx, t, &r, frags, rows, w)
}

// checkRoute settles the route of an epoch on t and rejects what this build cannot do.
func (s *Sink) checkRoute(ctx context.Context, t *engine.Table, r *EpochRequest) error {
	m, err := t.Latest(ctx)
	if err != nil {
		return err
	}
	if r.Mode == ModeUpdate && len(m.PrimaryKey) > 0 {
		return fmt.Errorf("%w: update mode on table %s with primary key %v needs upsert by key, which this server does not support yet; use append mode or a table without a primary key",
			ErrUnsupported, t.Name(), m.PrimaryKey)
	}
	if r.Route == RouteMemWAL {
		return fmt.Errorf("%w: route \"memwal\" is not available in this build; use \"auto\" or \"direct\"", ErrUnsupported)
	}
	r.Route = RouteDirect
	return nil
}

// commitEpoch commits the written fragments as the epoch's one transaction.
func (s *Sink) commitEpoch(ctx context.Context, t *engine.Table, r *EpochRequest, frags []engine.Fragment, rows int64, w *engine.Writer) (Ack, error) {
	op := engine.OpAppend
	if r.Mode == ModeComplete {
		op = engine.OpOverwrite // the mode alone decides to replace; an empty complete epoch truncates
	} else if rows == 0 {
		return newAck(StatusEmpty, r), nil // an empty append/update epoch commits nothing
	}
	txn := &engine.Transaction{
		Operation:  op,
		Properties: engine.EpochProperties(engine.EpochIdentity{QueryID: r.QueryID, EpochID: r.EpochID}, nil),
		Fragments:  frags,
	}
	m, err := t.Commit(ctx, txn)
	if err != nil {
		abortIfFailed(ctx, w, err)
		if errors.Is(err, engine.ErrEpochAlreadyCommitted) {
			// Another writer committed this query's epoch while we wrote: answer as a replay.
			st, ferr := s.findEpoch(ctx, t, r.QueryID, r.EpochID, r.Lookback)
			if ferr != nil {
				return Ack{}, ferr
			}
			if st.Committed {
				ack := newAck(StatusDuplicate, r)
				ack.Version = st.Version
				return ack, nil
			}
		}
		return Ack{}, err
	}
	ack := newAck(StatusCommitted, r)
	ack.Version, ack.Rows = m.Version, rows
	return ack, nil
}
