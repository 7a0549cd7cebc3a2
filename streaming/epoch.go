package streaming

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/memwal"
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
	e, err := s.planEpoch(ctx, &r, src.Schema())
	if err != nil {
		return Ack{}, err
	}
	// Every batch enters as the stored types the plan chose for the stream (e.input); a refused
	// type failed in the plan, before anything exists.
	if src, err = s.storeTypes(ctx, src, e.input); err != nil {
		return Ack{}, fmt.Errorf("table %s: %w", r.Table, err)
	}
	if e.base == nil {
		return s.createWithEpoch(ctx, e, src)
	}
	return s.landEpoch(ctx, e, src)
}

// epoch is one epoch write as the sink decided it. planEpoch decides, once and before any of the
// epoch's data is read: the table, the version the decision is made on, the route, the schema
// the rows are written and committed in, and whether the mode makes it an upsert. Every later
// step reads these fields and decides none of them again.
type epoch struct {
	EpochRequest // normalised

	table  *engine.Table    // the table; for a create-on-put (base nil) a handle until it exists
	base   *engine.Manifest // the version the epoch was decided on; nil: the epoch creates the table
	shards *memwal.ShardSet // the table's MemWAL shards; nil when it has none
	// input is the stream's schema in stored types (arrowschema.StoredSchemaFor its table).
	input *arrow.Schema
	// stored is the table schema the rows are written in: the base version's, the merged schema
	// when the epoch changes it (merged is then set too), or the schema the create makes.
	stored *arrow.Schema
	merged *arrow.Schema
	route  Route // RouteDirect or RouteMemWAL
	upsert bool  // an update epoch on a keyed table lands as one Upsert
	// arrived is when the epoch was decided: a MemWAL replay check reads the other servers'
	// shards as of no earlier than this.
	arrived time.Time
}

// planEpoch decides epoch r (normalised) of stream schema in (as the client sent it).
func (s *Sink) planEpoch(ctx context.Context, r *EpochRequest, in *arrow.Schema) (*epoch, error) {
	e := &epoch{EpochRequest: *r}
	t, err := s.table(ctx, r.Table) // Normalize checked the name
	if err == nil {
		if err = s.planOn(ctx, e, t, in); err == nil {
			return e, nil
		}
		if errors.Is(err, engine.ErrTableNotFound) {
			// The cached table is gone (dropped, or its directory removed): forget it, so that
			// nothing commits on its vanished version, and create afresh when the epoch asks to.
			s.forget(r.Table)
			e = &epoch{EpochRequest: *r}
		}
	}
	if errors.Is(err, engine.ErrTableNotFound) && r.Create != nil {
		return e, s.planCreate(e, in)
	}
	if in != nil {
		if _, serr := arrowschema.StoredSchema(in); serr != nil {
			return nil, fmt.Errorf("table %s: %w", r.Table, serr) // a refused type is the first mistake
		}
	}
	return nil, notFoundHint(err)
}

// planCreate decides an epoch that creates its table from the stream's schema (e.Create): the
// schema the table will store and the route its shards will give. A refused type or a bad
// create spec fails here, before anything is read.
func (s *Sink) planCreate(e *epoch, in *arrow.Schema) error {
	spec := *e.Create
	if in != nil {
		var err error
		if in, err = arrowschema.StoredSchema(in); err != nil {
			return fmt.Errorf("table %s: %w", e.Table, err)
		}
	}
	e.input = in
	stored, err := engine.CheckCreate(e.Table, in, createOptions(spec))
	if err != nil {
		return invalidName(err)
	}
	e.stored = stored
	viaMemWAL, err := useMemWAL(&e.EpochRequest, spec.MemWAL != nil) // the shards the table will have
	if err != nil {
		return err
	}
	e.route = RouteDirect
	if viaMemWAL {
		e.route = RouteMemWAL
	}
	e.upsert = e.Mode == ModeUpdate && len(spec.PrimaryKey) > 0
	if (e.route == RouteDirect && !e.upsert) || e.Partition != nil { // these stream into data files
		e.table, err = engine.Handle(s.store, e.Table, &s.opts.Engine)
	}
	return err
}

// planOn decides epoch e on the existing table t: the latest version, its shards, what the
// stream's schema does to the table's (schemaForEpoch), the route and the upsert.
func (s *Sink) planOn(ctx context.Context, e *epoch, t *engine.Table, in *arrow.Schema) error {
	e.table = t
	// A MemWAL epoch's replay check reads the other servers' shards as of no earlier than now;
	// on a table this server already writes through MemWAL that read starts now, beside the read
	// of the latest version, instead of after it (memwal.ShardSet.PrefetchPeers).
	e.arrived = time.Now()
	if ss := s.knownShardSet(t); ss != nil && e.Partition == nil && e.Mode != ModeComplete && e.Route != RouteDirect {
		ss.PrefetchPeers()
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return err
	}
	e.base = m
	if e.shards, err = s.tableShards(t, m); err != nil {
		return err
	}
	// Schema evolution is decided from the stream's schema, before any data is read
	// (arrowschema.MergeSchema): a refused change, or a change without merge_schema, commits
	// nothing, and a change takes the direct route.
	if in != nil {
		if in, err = arrowschema.StoredSchemaFor(m.ArrowSchema(), in); err != nil {
			return fmt.Errorf("table %s: %w", t.Name(), err)
		}
	}
	e.input = in
	e.stored, e.merged, err = schemaForEpoch(t, m, &e.EpochRequest, in)
	if err != nil {
		return err
	}
	viaMemWAL := false
	if e.merged == nil {
		if viaMemWAL, err = useMemWAL(&e.EpochRequest, e.shards != nil); err != nil {
			return err
		}
	}
	e.route = RouteDirect
	if viaMemWAL {
		e.route = RouteMemWAL
	}
	e.upsert = e.Mode == ModeUpdate && len(m.PrimaryKey) > 0
	if e.upsert && e.Partition != nil && !viaMemWAL {
		return fmt.Errorf("%w: update mode on table %s (primary key %v) upserts by key; send the epoch in one DoPut, not as staged partitions",
			ErrUnsupported, t.Name(), m.PrimaryKey)
	}
	return nil
}

// createWithEpoch lands the first epoch of a table that does not exist yet, creating the table
// from the stream's schema (e.Create). The create waits until the epoch's data has been read
// whole and validated: a stream that fails part-way (a corrupt batch, a client that cancels, a
// batch that cannot be converted) creates nothing. A create that loses the race to another
// creator lands the epoch in the winner's table.
func (s *Sink) createWithEpoch(ctx context.Context, e *epoch, src BatchSource) (Ack, error) {
	spec := *e.Create
	if (e.route == RouteMemWAL || e.upsert) && e.Partition == nil {
		// These routes hold the epoch in memory anyway (a MemWAL put, an upsert): read it all,
		// then create, then decide and land it on the table that now exists. A staged part of
		// any route is written into data files like a direct epoch.
		recs, err := readBatches(ctx, src)
		if err != nil {
			return Ack{}, err
		}
		defer arrowschema.ReleaseBatches(recs)
		t, err := s.createOrOpen(ctx, e.Table, e.stored, spec)
		if err != nil {
			return Ack{}, err
		}
		on := &epoch{EpochRequest: e.EpochRequest}
		if err := s.planOn(ctx, on, t, e.stored); err != nil {
			return Ack{}, err
		}
		return s.landEpoch(ctx, on, &batchesSource{schema: e.stored, recs: recs})
	}
	// The direct route (and a staged part) streams the epoch into data files of the table-to-be
	// (unreferenced until a version names them; removed on failure), and creates the table only
	// once they are durable.
	// Crash order: files, then the Create (version 1), then the epoch's commit (version 2). A crash
	// before the Create leaves unreferenced files that cleanup reclaims, never a table; a crash
	// between the two leaves an empty table, and the replayed epoch lands in it.
	codec, err := engine.ParseDataCodec(spec.DataCodec) // the table's config does not exist yet
	if err != nil {
		return Ack{}, invalid("%v", err)
	}
	w, err := e.table.NewWriterFor(e.stored, src.Schema(), engine.WithDataCodec(codec), engine.WithPartitionSpec(spec.PartitionBy))
	if err != nil {
		return Ack{}, err
	}
	frags, rows, w, err := s.writeInto(ctx, w, src, false)
	if err != nil {
		return Ack{}, err
	}
	t, err := s.createOrOpen(ctx, e.Table, e.stored, spec)
	var m *engine.Manifest
	if err == nil {
		m, err = t.Latest(ctx)
	}
	if err == nil && !m.PartitionSpec.Equal(spec.PartitionBy) {
		// Someone else created the table with another partition spec while we wrote: our files
		// are split by ours.
		err = fmt.Errorf("table %s was created concurrently with the partition spec %s, not %s: %w; send the epoch again", e.Table, m.PartitionSpec, spec.PartitionBy, engine.ErrCommitConflict)
	}
	if err == nil && !m.ArrowSchema().Equal(e.stored) {
		// Someone else created the table with another schema while we wrote: our files are in
		// our schema, not theirs.
		if _, cerr := arrowschema.CheckAppendSchema(m.ArrowSchema(), e.stored); cerr != nil {
			err = fmt.Errorf("table %s: %w", e.Table, cerr)
		} else {
			err = fmt.Errorf("table %s was created concurrently with its columns in another order: %w; send the epoch again", e.Table, engine.ErrCommitConflict)
		}
	}
	if err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return Ack{}, err
	}
	e.table, e.base = t, m
	if e.Partition != nil {
		return s.stage(ctx, e, frags, rows, w)
	}
	return s.commitEpoch(ctx, e, frags, rows, w)
}

// landEpoch lands epoch e, decided on an existing table, exactly once.
func (s *Sink) landEpoch(ctx context.Context, e *epoch, src BatchSource) (Ack, error) {
	t := e.table
	// Dedupe before reading the data: a replayed epoch costs a manifest read, not a write. On
	// the MemWAL route only the base watermark is consulted here (an epoch that went direct);
	// the shards answer for their own epochs, and a history scan per epoch would cost more than
	// the put it guards.
	st, err := s.findEpoch(ctx, t, e.base, e.QueryID, e.EpochID, e.Lookback, e.route == RouteDirect)
	if err != nil {
		return Ack{}, err
	}
	if st.Committed {
		rows, err := drain(src)
		if err != nil {
			return Ack{}, fmt.Errorf("read stream: %w", err)
		}
		ack := newAck(StatusDuplicate, &e.EpochRequest)
		ack.Version = st.Version
		ack.Warning = s.checkReplay(ctx, t, &e.EpochRequest, st.Version, rows)
		return ack, nil
	}
	if e.route == RouteMemWAL {
		if e.Partition != nil {
			return s.stageForMemWAL(ctx, e, src)
		}
		return s.writeMemWALEpoch(ctx, e, src)
	}
	if e.upsert && e.Partition == nil {
		return s.upsertEpoch(ctx, e, src)
	}
	// A staged partition's files must be stored before it is staged; a direct epoch's last file
	// lands while its commit is prepared.
	w, err := t.NewWriterFor(e.stored, src.Schema())
	if err != nil {
		return Ack{}, err
	}
	frags, rows, w, err := s.writeInto(ctx, w, src, e.Partition == nil)
	if err != nil {
		return Ack{}, err
	}
	if e.Partition != nil {
		return s.stage(ctx, e, frags, rows, w)
	}
	return s.commitEpoch(ctx, e, frags, rows, w)
}

// upsertEpoch lands an update-mode epoch on a keyed table as one Upsert: rows whose key the table
// holds replace it, the rest are inserted.
func (s *Sink) upsertEpoch(ctx context.Context, e *epoch, src BatchSource) (Ack, error) {
	t := e.table
	recs, err := readBatches(ctx, src)
	if err != nil {
		return Ack{}, err
	}
	defer arrowschema.ReleaseBatches(recs)
	rows := batchRows(recs)
	if rows == 0 {
		return s.ackEmpty(e), nil
	}
	// Fold first, then upsert: a MemWAL row is newer than every base row of its key, so an
	// upsert committed in the base table under an older MemWAL row of the same key would stay
	// hidden by it in reads and be replaced by it in the fold. Folded first, those rows are base
	// rows the upsert (prepared on the latest version, after the fold) replaces.
	release, err := s.foldShardsFirst(ctx, e)
	if err != nil {
		return Ack{}, err
	}
	defer release() // after the upsert's commit: an epoch that waited lands over it
	txn, err := t.PrepareUpsertIn(ctx, nil, recs, e.merged)
	if err != nil {
		return Ack{}, err
	}
	txn.Properties = epochProperties(e, rows)
	return s.commitTxn(ctx, e, txn, rows, func() { t.Discard(context.WithoutCancel(ctx), txn) })
}

func (s *Sink) ackEmpty(e *epoch) Ack {
	ack := newAck(StatusEmpty, &e.EpochRequest)
	ack.Route = e.route
	return ack
}

// commitEpoch commits the written fragments as the epoch's one transaction.
func (s *Sink) commitEpoch(ctx context.Context, e *epoch, frags []engine.Fragment, rows int64, w *engine.Writer) (Ack, error) {
	op := engine.OpAppend
	if e.Mode == ModeComplete {
		op = engine.OpOverwrite // the mode alone decides to replace; an empty complete epoch truncates
		release, err := s.foldShardsFirst(ctx, e)
		if err != nil {
			abortIfFailed(ctx, w, engine.ErrCommitConflict)
			return Ack{}, err
		}
		defer release() // after the Overwrite's commit: an epoch that waited lands after it
	} else if rows == 0 && e.merged == nil {
		// An empty append epoch commits nothing, unless it changes the schema (merge_schema):
		// then it commits that change alone, an Append of no rows (how a catalog adds columns).
		return s.ackEmpty(e), nil
	}
	txn := &engine.Transaction{
		Operation:  op,
		Properties: epochProperties(e, rows),
		Fragments:  frags,
	}
	if w != nil {
		txn.FilesDurable = w.Durable
	}
	if e.merged != nil {
		if err := txn.SetSchema(e.merged); err != nil {
			abortIfFailed(ctx, w, engine.ErrCommitConflict)
			return Ack{}, err
		}
	}
	return s.commitTxn(ctx, e, txn, rows, func() { abortIfFailed(ctx, w, engine.ErrCommitConflict) })
}

// foldShardsFirst folds a MemWAL table's shards into the base table ahead of a direct commit
// that must act on their rows too: an Overwrite (a complete epoch) that replaces them, or a direct
// upsert whose rows must win over older MemWAL rows of their keys. As a delete does (Sink.Delete),
// it holds the shard set (memwal.ShardSet.Quiesce) until release, which the caller calls once
// its commit has landed: the MemWAL epochs in flight land before the fold, those that arrive
// meanwhile land after the commit, and no epoch is acted on in part. A table without shards
// has nothing to fold.
func (s *Sink) foldShardsFirst(ctx context.Context, e *epoch) (release func(), err error) {
	if e.shards == nil {
		return func() {}, nil
	}
	release, err = e.shards.Quiesce(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.shards.FoldAll(ctx); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// commitTxn commits an epoch's prepared transaction. discard removes its files; it is called only
// when the commit certainly did not land.
func (s *Sink) commitTxn(ctx context.Context, e *epoch, txn *engine.Transaction, rows int64, discard func()) (Ack, error) {
	t := e.table
	m, err := t.Commit(ctx, txn)
	if err != nil {
		if engine.CommitDefinitelyFailed(err) {
			discard()
		}
		if errors.Is(err, engine.ErrEpochCommitted) {
			// Another writer committed this query's epoch while we wrote: answer as a replay.
			st, ferr := s.findEpoch(ctx, t, nil, e.QueryID, e.EpochID, e.Lookback, true)
			if ferr != nil {
				return Ack{}, ferr
			}
			if st.Committed {
				ack := newAck(StatusDuplicate, &e.EpochRequest)
				ack.Version, ack.Route = st.Version, e.route
				return ack, nil
			}
		}
		return Ack{}, err
	}
	if err := s.maintain(ctx, t, m); err != nil {
		return Ack{}, err
	}
	ack := newAck(StatusCommitted, &e.EpochRequest)
	ack.Version, ack.Rows, ack.Route = m.Version, rows, e.route
	return ack, nil
}
