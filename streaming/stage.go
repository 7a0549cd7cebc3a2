package streaming

import (
	"context"
	"fmt"
	"sort"
	"strings"

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
	// MergeSchema lets the stages' schemas (stages written with merge_schema) change the table
	// schema in the commit.
	MergeSchema bool
}

// CommitStaged commits the named stages as the epoch's one transaction, exactly once: a second
// call for a committed epoch answers duplicate. Every stage must belong to this query and epoch,
// and each partition may appear once (one attempt per partition). Stages of other attempts are
// left alone; they stay invisible and cleanup removes them after Options.StageTTL.
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
	r := EpochRequest{Table: c.Table, QueryID: c.QueryID, EpochID: c.EpochID, Mode: c.Mode, Lookback: c.Lookback}
	if err := s.normalize(&r); err != nil {
		return Ack{}, err
	}
	t, err := s.table(ctx, r.Table) // normalize checked the name
	if err != nil {
		return Ack{}, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return Ack{}, err
	}
	if r.Mode == ModeUpdate && len(m.PrimaryKey) > 0 {
		return Ack{}, fmt.Errorf("%w: update mode on table %s (primary key %v) upserts by key; send the epoch in one DoPut, not as staged partitions",
			ErrUnsupported, t.Name(), m.PrimaryKey)
	}
	e := &epoch{EpochRequest: r, table: t, base: m, route: RouteDirect} // multi-writer epochs always commit to the base table
	st, err := s.findEpoch(ctx, t, m, r.QueryID, r.EpochID, r.Lookback, true)
	if err != nil {
		return Ack{}, err
	}
	if st.Committed {
		ack := newAck(StatusDuplicate, &r)
		ack.Version = st.Version
		return ack, nil
	}
	recs := make([]*engine.Stage, 0, len(c.Stages))
	seenPart := map[int64]string{}
	for _, tok := range c.Stages {
		tok = strings.TrimSpace(tok)
		if !engine.IsStageToken(tok) {
			return Ack{}, invalid("stage token %q is not a token this server issued", tok)
		}
		rec, err := t.ReadStage(ctx, tok)
		if err != nil {
			return Ack{}, err
		}
		if rec.QueryID != r.QueryID || rec.EpochID != r.EpochID {
			return Ack{}, invalid("stage %s belongs to query %q epoch %d, not query %q epoch %d", tok, rec.QueryID, rec.EpochID, r.QueryID, r.EpochID)
		}
		if Mode(rec.Mode) != r.Mode {
			return Ack{}, invalid("stage %s was written in mode %s but the commit asks for %s", tok, rec.Mode, r.Mode)
		}
		if prev, dup := seenPart[rec.PartitionID]; dup {
			return Ack{}, invalid("partition %d appears twice (stages %s and %s); commit one attempt per partition", rec.PartitionID, prev, tok)
		}
		seenPart[rec.PartitionID] = tok
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].PartitionID < recs[j].PartitionID })
	var frags []engine.Fragment
	var rows int64
	for _, rec := range recs {
		frags = append(frags, rec.Fragments...)
		rows += rec.Rows
	}
	if e.merged, err = mergeStageSchemas(t, m, &c, recs); err != nil {
		return Ack{}, err
	}
	if e.shards, err = s.tableShards(t, m); err != nil {
		return Ack{}, err
	}
	ack, err := s.commitEpoch(ctx, e, frags, rows, nil)
	if err != nil {
		return Ack{}, err
	}
	if ack.Status == StatusCommitted {
		// The stage records are done with once the commit references their files. A crash here
		// leaves records whose files are referenced; cleanup only deletes unreferenced files.
		for _, rec := range recs {
			if err := t.RemoveStage(ctx, rec.Token); err != nil {
				s.opts.Logger.Warn("could not delete committed stage record", "table", r.Table, "stage", rec.Token, "err", err)
			}
		}
	}
	return ack, nil
}
