package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/objstore"
)

// stageRecord is the durable description of one staged partition:
// <table>/_staging/<token>.stage. Its data files sit in data/ unreferenced until an epoch commit
// names the token.
type stageRecord struct {
	Token        string            `json:"token"`
	QueryID      string            `json:"query_id"`
	EpochID      int64             `json:"epoch_id"`
	Mode         Mode              `json:"mode"`
	Partition    stagePartition    `json:"partition"`
	Rows         int64             `json:"rows"`
	Fragments    []engine.Fragment `json:"fragments"`
	CreatedNanos int64             `json:"created_nanos"`
}

// stagePartition is a Partition as a stage record stores it.
type stagePartition struct {
	ID      int64 `json:"id"`
	Attempt int64 `json:"attempt"`
}

const stageSuffix = ".stage"

func stageKey(table, token string) string { return table + "/_staging/" + token + stageSuffix }

// stage records a partition's files under a new token. Nothing becomes visible.
func (s *Sink) stage(ctx context.Context, t *engine.Table, r *EpochRequest, frags []engine.Fragment, rows int64, w *engine.Writer) (Ack, error) {
	rec := stageRecord{
		Token: uuid.NewString(), QueryID: r.QueryID, EpochID: r.EpochID, Mode: r.Mode,
		Partition: stagePartition(*r.Partition), Rows: rows, Fragments: frags, CreatedNanos: time.Now().UnixNano(),
	}
	if rec.Fragments == nil {
		rec.Fragments = []engine.Fragment{}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return Ack{}, err
	}
	// The data files are durable (Writer.Finish) before the record that names them.
	if err := s.store.PutIfAbsent(ctx, stageKey(t.Name(), rec.Token), b); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return Ack{}, fmt.Errorf("table %s: write stage: %w", t.Name(), err)
	}
	ack := newAck(StatusStaged, r)
	ack.Rows, ack.Stage = rows, rec.Token
	return ack, nil
}

func (s *Sink) readStage(ctx context.Context, table, token string) (*stageRecord, error) {
	if _, err := uuid.Parse(token); err != nil {
		return nil, invalid("stage token %q is not a token this server issued", token)
	}
	b, err := s.store.Get(ctx, stageKey(table, token))
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: table %s has no stage %s (already committed and cleaned up, or expired)", ErrStageNotFound, table, token)
		}
		return nil, err
	}
	var rec stageRecord
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("table %s: corrupt stage %s: %w", table, token, err)
	}
	return &rec, nil
}

// CommitStagedRequest commits the stages of a multi-writer epoch.
type CommitStagedRequest struct {
	Table    string
	QueryID  string
	EpochID  int64
	Mode     Mode
	Stages   []string
	Lookback int
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
	t, err := s.Table(ctx, r.Table)
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
	r.Route = RouteDirect // multi-writer epochs always commit to the base table
	st, err := s.findEpoch(ctx, t, r.QueryID, r.EpochID, r.Lookback, true)
	if err != nil {
		return Ack{}, err
	}
	if st.Committed {
		ack := newAck(StatusDuplicate, &r)
		ack.Version = st.Version
		return ack, nil
	}
	recs := make([]*stageRecord, 0, len(c.Stages))
	seenPart := map[int64]string{}
	for _, tok := range c.Stages {
		rec, err := s.readStage(ctx, r.Table, strings.TrimSpace(tok))
		if err != nil {
			return Ack{}, err
		}
		if rec.QueryID != r.QueryID || rec.EpochID != r.EpochID {
			return Ack{}, invalid("stage %s belongs to query %q epoch %d, not query %q epoch %d", tok, rec.QueryID, rec.EpochID, r.QueryID, r.EpochID)
		}
		if rec.Mode != r.Mode {
			return Ack{}, invalid("stage %s was written in mode %s but the commit asks for %s", tok, rec.Mode, r.Mode)
		}
		if prev, dup := seenPart[rec.Partition.ID]; dup {
			return Ack{}, invalid("partition %d appears twice (stages %s and %s); commit one attempt per partition", rec.Partition.ID, prev, tok)
		}
		seenPart[rec.Partition.ID] = tok
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Partition.ID < recs[j].Partition.ID })
	var frags []engine.Fragment
	var rows int64
	for _, rec := range recs {
		frags = append(frags, rec.Fragments...)
		rows += rec.Rows
	}
	ack, err := s.commitEpoch(ctx, t, &r, frags, rows, nil)
	if err != nil {
		return Ack{}, err
	}
	if ack.Status == StatusCommitted {
		// The stage records are done with once the commit references their files. A crash here
		// leaves records whose files are referenced; cleanup only deletes unreferenced files.
		for _, rec := range recs {
			if err := s.store.Delete(ctx, stageKey(r.Table, rec.Token)); err != nil {
				s.opts.Logger.Warn("could not delete committed stage record", "table", r.Table, "stage", rec.Token, "err", err)
			}
		}
	}
	return ack, nil
}
