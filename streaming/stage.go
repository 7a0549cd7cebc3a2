package streaming

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flight-sink/flight-sink/engine"
)

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
}

// CommitStaged commits the named stages as the epoch's one transaction, exactly once: a second
// call for a committed epoch answers duplicate. Every stage must belong to this query and epoch,
// and each partition may appear once (one attempt per partition). Stages of other attempts are
// left alone; they stay invisible and cleanup removes them after Options.StageTTL.
//
// On a MemWAL table the epoch takes the route one DoPut of it would (useMemWAL; a schema change
// goes direct): the named stages' rows become one MemWAL put of the epoch's identity
// (putMemWALEpoch), the single point at which they all become visible, recognised as a replay in
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
	r := EpochRequest{Table: c.Table, QueryID: c.QueryID, EpochID: c.EpochID, Mode: c.Mode, Route: c.Route, Lookback: c.Lookback}
	if err := s.normalize(&r); err != nil {
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
		for _, rec := range recs {
			frags = append(frags, rec.Fragments...)
			rows += rec.Rows
		}
		ack, err = s.commitEpoch(ctx, e, frags, rows, nil)
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
	sc, err := e.table.ScanStages(ctx, e.base, recs)
	if err != nil {
		return Ack{}, err
	}
	defer sc.Release()
	return s.writeMemWALEpoch(ctx, e, sc)
}
