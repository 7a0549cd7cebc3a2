package streaming

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// StageDataBytes is the most a staged part bound for MemWAL shards holds in its stage record
// (engine.Stage.Data: one object to write, no Parquet to encode and decode); a larger part is
// written into data files as any other stage. A variable only so tests can send parts past it.
var StageDataBytes int64 = 8 << 20

// stageForMemWAL stages a partition of an epoch bound for the MemWAL shards (e.route): a part of
// at most StageDataBytes is held in its stage record, a larger one written into data files.
// Nothing becomes visible.
func (s *Sink) stageForMemWAL(ctx context.Context, e *epoch, src BatchSource) (Ack, error) {
	var head []arrow.RecordBatch
	var bytes int64
	for bytes <= StageDataBytes && src.Next() {
		rec := src.RecordBatch()
		rec.Retain()
		head = append(head, rec)
		bytes += arrowschema.RecordBytes(rec)
	}
	defer func() { arrowschema.ReleaseBatches(head) }()
	if bytes > StageDataBytes { // the rest into data files, after the batches read so far
		w, err := e.table.NewWriterFor(e.stored, src.Schema())
		if err != nil {
			return Ack{}, err
		}
		frags, rows, w, err := s.writeInto(ctx, w, &joinedSource{head: &batchesSource{schema: src.Schema(), recs: head}, rest: src}, false)
		if err != nil {
			return Ack{}, err
		}
		return s.stage(ctx, e, frags, rows, w)
	}
	if err := src.Err(); err != nil {
		return Ack{}, fmt.Errorf("read stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Ack{}, err
	}
	m := e.base
	conformed := make([]arrow.RecordBatch, 0, len(head))
	defer func() { arrowschema.ReleaseBatches(conformed) }()
	for _, rec := range head {
		if err := arrowschema.CheckWriteSchema(m.ArrowSchema(), rec.Schema(), m.PrimaryKey); err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", e.table.Name(), err)
		}
		c, err := arrowschema.ConformToTable(e.stored, rec)
		if err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", e.table.Name(), err)
		}
		conformed = append(conformed, c)
	}
	data, err := engine.EncodeStageData(e.stored, conformed, s.opts.Engine.Allocator)
	if err != nil {
		return Ack{}, err
	}
	st := engine.Stage{
		QueryID: e.QueryID, EpochID: e.EpochID, Mode: string(e.Mode),
		PartitionID: e.Partition.ID, Attempt: e.Partition.Attempt, Rows: batchRows(head), Data: data,
	}
	if err := e.table.WriteStage(ctx, &st); err != nil {
		return Ack{}, err
	}
	ack := newAck(StatusStaged, &e.EpochRequest)
	ack.Rows, ack.Stage = st.Rows, st.Token
	return ack, nil
}

// joinedSource is head's batches, then rest's.
type joinedSource struct {
	head, rest BatchSource
	inRest     bool
}

func (j *joinedSource) Schema() *arrow.Schema { return j.head.Schema() }
func (j *joinedSource) Next() bool {
	if !j.inRest {
		if j.head.Next() {
			return true
		}
		j.inRest = true
	}
	return j.rest.Next()
}
func (j *joinedSource) RecordBatch() arrow.RecordBatch {
	if j.inRest {
		return j.rest.RecordBatch()
	}
	return j.head.RecordBatch()
}
func (j *joinedSource) Err() error { return j.rest.Err() }

// stage records a partition's files as a stage of its epoch (engine.Table.WriteStage) under a
// new token. Nothing becomes visible.
func (s *Sink) stage(ctx context.Context, e *epoch, frags []engine.Fragment, rows int64, w *engine.Writer) (Ack, error) {
	st := engine.Stage{
		QueryID: e.QueryID, EpochID: e.EpochID, Mode: string(e.Mode),
		PartitionID: e.Partition.ID, Attempt: e.Partition.Attempt, Rows: rows, Fragments: frags,
	}
	if e.merged != nil {
		if err := st.SetSchema(e.merged); err != nil {
			w.Abort(context.WithoutCancel(ctx))
			return Ack{}, err
		}
	}
	// The data files are durable (Writer.Finish) before the record that names them.
	if err := e.table.WriteStage(ctx, &st); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return Ack{}, err
	}
	ack := newAck(StatusStaged, &e.EpochRequest)
	ack.Rows, ack.Stage = rows, st.Token
	return ack, nil
}

// CommitStagedRequest commits the stages of a multi-writer epoch.
type CommitStagedRequest struct {
	Table    string
	QueryID  string
	EpochID  int64
	Mode     Mode
	Stages   []string
	Lookback int
	// Route is where the epoch lands, as for one DoPut (useMemWAL): "auto" (empty) lands an
	// append or update epoch of a MemWAL table in its shards, "direct" in a base version.
	Route Route
	// MergeSchema lets the stages' schemas (stages written with merge_schema) change the table
	// schema in the commit.
	MergeSchema bool
	// RunID names the run of the query that commits, as EpochRequest.RunID.
	RunID string
}

// CommitStaged commits the named stages as the epoch's one transaction, exactly once: a second
// call for a committed epoch answers duplicate. Every stage must belong to this query and epoch,
// and each partition may appear once (one attempt per partition). Stages of other attempts are
// left alone; they stay invisible and cleanup removes them after Options.StageTTL.
//
// On a MemWAL table the epoch takes the route one DoPut of it would (useMemWAL; a schema change
// goes direct): the named stages' rows become one MemWAL put of the epoch's identity
// (commitStagedMemWAL), the single point at which they all become visible, recognised as a replay in
// whichever shard holds it, as any MemWAL epoch is. A replayed commit after the stage records
// were removed is answered from the shards (committedElsewhere).
func (s *Sink) CommitStaged(ctx context.Context, c CommitStagedRequest) (Ack, error) {
	ctx, span := startSpan(ctx, "streaming.CommitStaged", &EpochRequest{Table: c.Table, QueryID: c.QueryID, EpochID: c.EpochID, Mode: c.Mode})
	ack, err := s.commitStaged(ctx, c)
	if err == nil {
		recordAck(ctx, ack, c.Mode)
	}
	endSpan(span, ack, err)
	return ack, err
}

func (s *Sink) commitStaged(ctx context.Context, c CommitStagedRequest) (Ack, error) {
	r := EpochRequest{Table: c.Table, QueryID: c.QueryID, EpochID: c.EpochID, Mode: c.Mode, Route: c.Route, Lookback: c.Lookback, RunID: c.RunID}
	if err := s.normalize(&r); err != nil {
		return Ack{}, err
	}
	if err := s.checkRun(ctx, &r); err != nil {
		return Ack{}, err
	}
	t, err := s.table(ctx, r.Table) // normalize checked the name
	if err != nil {
		return Ack{}, err
	}
	e := &epoch{EpochRequest: r, table: t, arrived: time.Now()}
	if e.base, err = t.Latest(ctx); err != nil {
		return Ack{}, err
	}
	m := e.base
	if e.shards, err = s.tableShards(t, m); err != nil {
		return Ack{}, err
	}
	st, err := s.findEpoch(ctx, t, m, r.QueryID, r.EpochID, r.Lookback, true)
	if err != nil {
		return Ack{}, err
	}
	if st.Committed {
		ack := newAck(StatusDuplicate, &r)
		ack.Version = st.Version
		// The stages this commit names (another run's, when two share the query id) hold rows
		// to compare with the committed epoch's.
		if len(c.Stages) > 0 {
			if rows, ok := s.stagedRows(ctx, t, &r, c.Stages); ok {
				ack.Warning = s.checkReplay(ctx, t, &r, st.Version, rows)
			}
		}
		return ack, nil
	}
	recs, err := s.readStages(ctx, t, &r, c.Stages)
	if err != nil {
		if dup, ok := s.committedElsewhere(ctx, e, err); ok {
			return dup, nil
		}
		return Ack{}, err
	}
	if e.merged, err = mergeStageSchemas(t, m, &c, recs); err != nil {
		return Ack{}, err
	}
	viaMemWAL := false
	if e.merged == nil { // a schema change is one base transaction, as for one DoPut
		if viaMemWAL, err = useMemWAL(&r, e.shards != nil); err != nil {
			return Ack{}, err
		}
	}
	e.route, e.upsert = RouteDirect, r.Mode == ModeUpdate && len(m.PrimaryKey) > 0
	if viaMemWAL {
		e.route = RouteMemWAL
	} else if e.upsert {
		return Ack{}, fmt.Errorf("%w: update mode on table %s (primary key %v) upserts by key; send the epoch in one DoPut, or as staged partitions to a table with MemWAL shards",
			ErrUnsupported, t.Name(), m.PrimaryKey)
	}
	var ack Ack
	if viaMemWAL {
		ack, err = s.commitStagedMemWAL(ctx, e, recs)
	} else {
		var frags []engine.Fragment
		var rows int64
		var w *engine.Writer
		if frags, rows, w, err = s.stagedFiles(ctx, e, recs); err != nil {
			return Ack{}, err
		}
		e.partitionRows = partitionRowsProperty(recs)
		ack, err = s.commitEpoch(ctx, e, frags, rows, w)
	}
	if err != nil {
		return Ack{}, err
	}
	if ack.Status == StatusCommitted {
		// The stage records are done with once the epoch is landed. A crash here leaves records
		// that the stage TTL expires; their replayed commit is a duplicate. On the direct route
		// the version references their files; a MemWAL put holds copies of the rows, and the
		// files, unreferenced, go with cleanup's sweep (they are not deleted here: a commit of
		// the same epoch on the direct route, racing this one, may be about to reference them).
		for _, rec := range recs {
			if err := t.RemoveStage(ctx, rec.Token); err != nil {
				s.opts.Logger.Warn("could not delete committed stage record", "table", r.Table, "stage", rec.Token, "err", err)
			}
		}
	}
	return ack, nil
}

// stagedFiles returns the data files of stages recs for a commit on the direct route: the files
// they name and, for the stages that hold their rows (Stage.Data: parts staged for MemWAL whose
// commit asks for the direct route), new files written from those rows, with their writer (nil
// when there are none).
func (s *Sink) stagedFiles(ctx context.Context, e *epoch, recs []*engine.Stage) ([]engine.Fragment, int64, *engine.Writer, error) {
	var frags []engine.Fragment
	var rows int64
	var held []*engine.Stage
	for _, rec := range recs {
		frags = append(frags, rec.Fragments...)
		if len(rec.Data) > 0 {
			held = append(held, rec)
		} else {
			rows += rec.Rows
		}
	}
	if len(held) == 0 {
		return frags, rows, nil, nil
	}
	rd, err := e.table.ReadStages(ctx, e.base, held)
	if err != nil {
		return nil, 0, nil, err
	}
	defer rd.Release()
	more, n, w, err := s.writeAll(ctx, e.table, rd, true)
	if err != nil {
		return nil, 0, nil, err
	}
	return append(frags, more...), rows + n, w, nil
}

// readStages reads and checks the stage records tokens name for epoch r: each belongs to r's
// query, epoch and mode, and no partition appears twice. They are returned by partition.
func (s *Sink) readStages(ctx context.Context, t *engine.Table, r *EpochRequest, tokens []string) ([]*engine.Stage, error) {
	recs := make([]*engine.Stage, 0, len(tokens))
	seenPart := map[int64]string{}
	for _, tok := range tokens {
		tok = strings.TrimSpace(tok)
		if !engine.IsStageToken(tok) {
			return nil, invalid("stage token %q is not a token this server issued", tok)
		}
		rec, err := t.ReadStage(ctx, tok)
		if err != nil {
			return nil, err
		}
		if rec.QueryID != r.QueryID || rec.EpochID != r.EpochID {
			return nil, invalid("stage %s belongs to query %q epoch %d, not query %q epoch %d", tok, rec.QueryID, rec.EpochID, r.QueryID, r.EpochID)
		}
		if Mode(rec.Mode) != r.Mode {
			return nil, invalid("stage %s was written in mode %s but the commit asks for %s", tok, rec.Mode, r.Mode)
		}
		if prev, dup := seenPart[rec.PartitionID]; dup {
			return nil, invalid("partition %d appears twice (stages %s and %s); commit one attempt per partition", rec.PartitionID, prev, tok)
		}
		seenPart[rec.PartitionID] = tok
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].PartitionID < recs[j].PartitionID })
	return recs, nil
}

// committedElsewhere answers a commit whose stage records are gone (err: ErrStageNotFound) as a
// duplicate when the table's MemWAL shards hold the epoch: a commit through MemWAL removes the
// records once every shard it put to holds the epoch, so a missing record and a held epoch mean
// the commit is a replay.
func (s *Sink) committedElsewhere(ctx context.Context, e *epoch, err error) (Ack, bool) {
	if e.shards == nil || !errors.Is(err, engine.ErrStageNotFound) {
		return Ack{}, false
	}
	h, herr := e.shards.EpochHeld(ctx, e.arrived, e.QueryID, e.EpochID, -1)
	if herr != nil || !h.Held {
		return Ack{}, false
	}
	ack := newAck(StatusDuplicate, &e.EpochRequest)
	ack.Route = RouteMemWAL
	return ack, true
}

// commitStagedMemWAL lands the rows of stages recs as epoch e's MemWAL put: read back from the
// stages' files in partition order, they go through the path of one DoPut of the epoch
// (writeMemWALEpoch: the replay check, the shard or key split, the ceilings, streaming a large
// epoch into its shard). Nothing is visible before that put is durable, and all of it after.
func (s *Sink) commitStagedMemWAL(ctx context.Context, e *epoch, recs []*engine.Stage) (Ack, error) {
	sc, err := e.table.ReadStages(ctx, e.base, recs)
	if err != nil {
		return Ack{}, err
	}
	defer sc.Release()
	return s.writeMemWALEpoch(ctx, e, sc)
}
