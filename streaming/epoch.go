package streaming

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	if r.ExpectRows != nil {
		src = &countedSource{BatchSource: src, want: *r.ExpectRows}
	}
	// Every batch enters as stored types; a refused type fails here, before anything exists.
	src, err := s.storeTypes(ctx, src)
	if err != nil {
		return Ack{}, fmt.Errorf("table %s: %w", r.Table, err)
	}
	t, err := s.Table(ctx, r.Table)
	if errors.Is(err, engine.ErrTableNotFound) && r.Create != nil {
		return s.createWithEpoch(ctx, &r, src)
	}
	if err != nil {
		return Ack{}, notFoundHint(err)
	}
	return s.writeEpochTo(ctx, t, &r, src)
}

// createWithEpoch lands the first epoch of a table that does not exist yet, creating the table
// from the stream's schema (r.Create). The create waits until the epoch's data has been read
// whole and validated: a stream that fails part-way (a corrupt batch, a client that cancels, a
// batch that cannot be converted) creates nothing, and a refused type or a bad create spec fails
// before anything is read. A create that loses the race to another creator lands the epoch in the
// winner's table.
func (s *Sink) createWithEpoch(ctx context.Context, r *EpochRequest, src BatchSource) (Ack, error) {
	spec := *r.Create
	stored, err := engine.CheckCreate(r.Table, src.Schema(), createOptions(spec))
	if err != nil {
		return Ack{}, invalidName(err)
	}
	viaMemWAL, err := useMemWAL(r, spec.MemWAL != nil) // the shards the table will have
	if err != nil {
		return Ack{}, err
	}
	if viaMemWAL || (r.Mode == ModeUpdate && len(spec.PrimaryKey) > 0) {
		// These routes hold the epoch in memory anyway (a MemWAL put, an upsert): read it all,
		// then create, then land it on the new table.
		recs, err := readBatches(ctx, src)
		if err != nil {
			return Ack{}, err
		}
		defer releaseBatches(recs)
		t, err := s.createOrOpen(ctx, r.Table, stored, spec)
		if err != nil {
			return Ack{}, err
		}
		return s.writeEpochTo(ctx, t, r, &batchesSource{schema: stored, recs: recs})
	}
	// The direct route streams the epoch into data files of the table-to-be (unreferenced until a
	// version names them; removed on failure), and creates the table only once they are durable.
	// Crash order: files, then the Create (version 1), then the epoch's commit (version 2). A crash
	// before the Create leaves unreferenced files that cleanup reclaims, never a table; a crash
	// between the two leaves an empty table, and the replayed epoch lands in it.
	h, err := engine.Handle(s.store, r.Table, &s.opts.Engine)
	if err != nil {
		return Ack{}, invalidName(err)
	}
	w, err := h.NewWriterFor(stored, src.Schema())
	if err != nil {
		return Ack{}, err
	}
	frags, rows, w, err := s.writeInto(ctx, w, src, false)
	if err != nil {
		return Ack{}, err
	}
	t, err := s.createOrOpen(ctx, r.Table, stored, spec)
	var m *engine.Manifest
	if err == nil {
		m, err = t.Latest(ctx)
	}
	if err == nil && !m.ArrowSchema().Equal(stored) {
		// Someone else created the table with another schema while we wrote: our files are in
		// our schema, not theirs.
		if _, cerr := engine.CheckAppendSchema(m.ArrowSchema(), stored); cerr != nil {
			err = fmt.Errorf("table %s: %w", r.Table, cerr)
		} else {
			err = fmt.Errorf("table %s was created concurrently with its columns in another order: %w; send the epoch again", r.Table, engine.ErrCommitConflict)
		}
	}
	if err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return Ack{}, err
	}
	r.Route = RouteDirect
	if r.Partition != nil {
		return s.stage(ctx, t, r, frags, rows, w)
	}
	return s.commitEpoch(ctx, t, r, frags, rows, w)
}

// writeEpochTo lands the epoch in the existing table t.
func (s *Sink) writeEpochTo(ctx context.Context, t *engine.Table, rp *EpochRequest, src BatchSource) (Ack, error) {
	r := *rp
	// A MemWAL epoch's replay check reads the other servers' shards as of no earlier than now;
	// on a table this server already writes through MemWAL that read starts now, beside the read
	// of the latest version, instead of after it (memwal.ShardSet.PrefetchPeers).
	r.arrived = time.Now()
	if ss := s.knownShardSet(t); ss != nil && r.Partition == nil && r.Mode != ModeComplete && r.Route != RouteDirect {
		ss.PrefetchPeers()
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return Ack{}, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil {
		return Ack{}, err
	}
	// Schema evolution is decided once, from the stream's schema, before any data is read
	// (engine.MergeSchema): a refused change, or a change without merge_schema, commits nothing.
	if err := schemaForEpoch(t, m, &r, src.Schema()); err != nil {
		return Ack{}, err
	}
	viaMemWAL, err := useMemWAL(&r, ss != nil)
	if err != nil {
		return Ack{}, err
	}
	keyedUpdate := r.Mode == ModeUpdate && len(m.PrimaryKey) > 0
	if keyedUpdate && r.Partition != nil && !viaMemWAL {
		return Ack{}, fmt.Errorf("%w: update mode on table %s (primary key %v) upserts by key; send the epoch in one DoPut, not as staged partitions",
			ErrUnsupported, t.Name(), m.PrimaryKey)
	}
	// Dedupe before reading the data: a replayed epoch costs a manifest read, not a write. On
	// the MemWAL route only the base watermark is consulted here (an epoch that went direct);
	// the shards answer for their own epochs, and a history scan per epoch would cost more than
	// the put it guards.
	st, err := s.findEpoch(ctx, t, m, r.QueryID, r.EpochID, r.Lookback, !viaMemWAL)
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
	if viaMemWAL {
		r.Route = RouteMemWAL
		return s.writeMemWALEpoch(ctx, t, m, ss, &r, src)
	}
	r.Route = RouteDirect
	if keyedUpdate {
		return s.upsertEpoch(ctx, t, &r, src)
	}
	// A staged partition's files must be stored before it is staged; a direct epoch's last file
	// lands while its commit is prepared.
	var frags []engine.Fragment
	var rows int64
	var w *engine.Writer
	if r.merged != nil {
		if w, err = t.NewWriterFor(r.merged, src.Schema()); err == nil {
			frags, rows, w, err = s.writeInto(ctx, w, src, r.Partition == nil)
		}
	} else {
		frags, rows, w, err = s.writeAll(ctx, t, src, r.Partition == nil)
	}
	if err != nil {
		return Ack{}, err
	}
	if r.Partition != nil {
		return s.stage(ctx, t, &r, frags, rows, w)
	}
	return s.commitEpoch(ctx, t, &r, frags, rows, w)
}

// upsertEpoch lands an update-mode epoch on a keyed table as one Upsert: rows whose key the table
// holds replace it, the rest are inserted.
func (s *Sink) upsertEpoch(ctx context.Context, t *engine.Table, r *EpochRequest, src BatchSource) (Ack, error) {
	recs, err := readBatches(ctx, src)
	if err != nil {
		return Ack{}, err
	}
	defer releaseBatches(recs)
	rows := batchRows(recs)
	if rows == 0 {
		return s.ackEmpty(r), nil
	}
	txn, err := t.PrepareUpsertIn(ctx, nil, recs, r.merged)
	if err != nil {
		return Ack{}, err
	}
	txn.Properties = engine.EpochProperties(engine.EpochIdentity{QueryID: r.QueryID, EpochID: r.EpochID}, nil)
	return s.commitTxn(ctx, t, r, txn, rows, func() { t.Discard(context.WithoutCancel(ctx), txn) })
}

func (s *Sink) ackEmpty(r *EpochRequest) Ack {
	ack := newAck(StatusEmpty, r)
	ack.Route = r.Route
	return ack
}

// commitEpoch commits the written fragments as the epoch's one transaction.
func (s *Sink) commitEpoch(ctx context.Context, t *engine.Table, r *EpochRequest, frags []engine.Fragment, rows int64, w *engine.Writer) (Ack, error) {
	op := engine.OpAppend
	if r.Mode == ModeComplete {
		op = engine.OpOverwrite // the mode alone decides to replace; an empty complete epoch truncates
		if err := s.foldBeforeOverwrite(ctx, t); err != nil {
			abortIfFailed(ctx, w, engine.ErrCommitConflict)
			return Ack{}, err
		}
	} else if rows == 0 {
		return s.ackEmpty(r), nil // an empty append/update epoch commits nothing
	}
	txn := &engine.Transaction{
		Operation:  op,
		Properties: engine.EpochProperties(engine.EpochIdentity{QueryID: r.QueryID, EpochID: r.EpochID}, nil),
		Fragments:  frags,
	}
	if w != nil {
		txn.FilesDurable = w.Durable
	}
	if r.merged != nil {
		if err := txn.SetSchema(r.merged); err != nil {
			abortIfFailed(ctx, w, engine.ErrCommitConflict)
			return Ack{}, err
		}
	}
	return s.commitTxn(ctx, t, r, txn, rows, func() { abortIfFailed(ctx, w, engine.ErrCommitConflict) })
}

// foldBeforeOverwrite folds a MemWAL table's shards into the base table, so that an Overwrite
// replaces their rows too instead of leaving them above the merged watermark.
func (s *Sink) foldBeforeOverwrite(ctx context.Context, t *engine.Table) error {
	m, err := t.Latest(ctx)
	if err != nil {
		return err
	}
	ss, err := s.tableShards(t, m)
	if err != nil || ss == nil {
		return err
	}
	return ss.FoldAll(ctx)
}

// commitTxn commits an epoch's prepared transaction. discard removes its files; it is called only
// when the commit certainly did not land.
func (s *Sink) commitTxn(ctx context.Context, t *engine.Table, r *EpochRequest, txn *engine.Transaction, rows int64, discard func()) (Ack, error) {
	m, err := t.Commit(ctx, txn)
	if err != nil {
		if engine.CommitDefinitelyFailed(err) {
			discard()
		}
		if errors.Is(err, engine.ErrEpochCommitted) {
			// Another writer committed this query's epoch while we wrote: answer as a replay.
			st, ferr := s.findEpoch(ctx, t, nil, r.QueryID, r.EpochID, r.Lookback, true)
			if ferr != nil {
				return Ack{}, ferr
			}
			if st.Committed {
				ack := newAck(StatusDuplicate, r)
				ack.Version, ack.Route = st.Version, r.Route
				return ack, nil
			}
		}
		return Ack{}, err
	}
	if err := s.maintain(ctx, t, m); err != nil {
		return Ack{}, err
	}
	ack := newAck(StatusCommitted, r)
	ack.Version, ack.Rows, ack.Route = m.Version, rows, r.Route
	return ack, nil
}
