package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// Staged writes (multi-writer epochs: docs/protocol.md, Multi-writer epochs; docs/storage.md,
// Stages).
//
// A writer of one partition of an epoch writes its data files under data/ (unreferenced, like
// the files of any commit in flight) and then a stage record that names them:
//
//	<table>/_staging/<token>.stage   JSON: the token, the epoch and partition, the fragments
//
// Nothing of a stage is visible until a commit names it: the epoch's committer reads the stage
// records (ReadStage), commits their fragments as one transaction, and then removes the records
// (RemoveStage). A stage that is never committed (a retried task attempt, a driver that gave up)
// expires: every cleanup path (Table.Cleanup, so the cleanup action, the CLI and the maintainer's
// cleanup step alike) removes the records older than CleanupPolicy.StageTTL, and the file sweep
// then removes their unreferenced data files once they are older than the grace period, which
// Cleanup keeps at least as long as the stage TTL so that a stage still kept still has its files.
//
// The record's JSON is a storage format: a server must commit the stages an older one wrote.
// stageRecord fixes it; its golden test (TestStageRecordFormat) holds the bytes.

// ErrStageNotFound: a commit named a stage the table does not have (never written, already
// committed and removed, or expired).
var ErrStageNotFound = errors.New("stage not found")

// ErrInvalidStageToken: a stage token that no stage writer issues (not a UUID).
var ErrInvalidStageToken = errors.New("invalid stage token")

// DefaultStageTTL is CleanupPolicy.StageTTL unless set.
const DefaultStageTTL = 24 * time.Hour

// Stage is one staged partition of a multi-writer epoch.
type Stage struct {
	// Token names the stage; WriteStage issues it (a UUID).
	Token string
	// QueryID and EpochID are the epoch the partition belongs to; Mode its output mode.
	QueryID string
	EpochID int64
	Mode    string
	// PartitionID and Attempt identify the task attempt that wrote it.
	PartitionID int64
	Attempt     int64
	// Rows is the partition's row count, Fragments its data files (durable, unreferenced).
	Rows      int64
	Fragments []Fragment
	// Created is when the stage was written; StageTTL counts from it.
	Created time.Time
	// Schema, when set, is the Arrow IPC encoding of the table schema the stage's files are
	// written in: a schema merge (SchemaForWrite) the commit of the epoch makes (SetSchema).
	Schema []byte
	// Data, when set, holds the partition's rows in the record itself instead of data files: one
	// Arrow IPC stream in a schema of the table (a small part of an epoch bound for MemWAL
	// shards, whose commit reads the rows back into one put: ReadStages). Fragments is then
	// empty. One object, one write: the record is durable with its rows.
	Data []byte
}

// SetSchema records sc as the schema the stage's files are written in (Schema).
func (s *Stage) SetSchema(sc *arrow.Schema) error {
	b, err := arrowschema.EncodeSchema(sc)
	if err != nil {
		return err
	}
	s.Schema = b
	return nil
}

// ArrowSchema decodes the stage's Schema (nil when it has none).
func (s *Stage) ArrowSchema() (*arrow.Schema, error) {
	if len(s.Schema) == 0 {
		return nil, nil
	}
	return arrowschema.DecodeSchema(s.Schema)
}

// stageRecord is the stored form of a Stage. Field names and JSON are fixed (TestStageRecordFormat).
type stageRecord struct {
	Token        string         `json:"token"`
	QueryID      string         `json:"query_id"`
	EpochID      int64          `json:"epoch_id"`
	Mode         string         `json:"mode"`
	Partition    stagePartition `json:"partition"`
	Rows         int64          `json:"rows"`
	Fragments    []Fragment     `json:"fragments"`
	CreatedNanos int64          `json:"created_nanos"`
	Schema       []byte         `json:"schema,omitempty"`
	Data         []byte         `json:"data,omitempty"`
}

type stagePartition struct {
	ID      int64 `json:"id"`
	Attempt int64 `json:"attempt"`
}

func (s *Stage) record() stageRecord {
	r := stageRecord{
		Token: s.Token, QueryID: s.QueryID, EpochID: s.EpochID, Mode: s.Mode,
		Partition: stagePartition{ID: s.PartitionID, Attempt: s.Attempt}, Rows: s.Rows,
		Fragments: s.Fragments, CreatedNanos: s.Created.UnixNano(), Schema: s.Schema, Data: s.Data,
	}
	if r.Fragments == nil {
		r.Fragments = []Fragment{}
	}
	return r
}

func (r *stageRecord) stage() *Stage {
	return &Stage{
		Token: r.Token, QueryID: r.QueryID, EpochID: r.EpochID, Mode: r.Mode,
		PartitionID: r.Partition.ID, Attempt: r.Partition.Attempt, Rows: r.Rows,
		Fragments: r.Fragments, Created: time.Unix(0, r.CreatedNanos), Schema: r.Schema, Data: r.Data,
	}
}

// IsStageToken reports whether tok has the form of the tokens WriteStage issues.
func IsStageToken(tok string) bool {
	_, err := uuid.Parse(tok)
	return err == nil
}

// WriteStage records st under a new token (set in st.Token, with st.Created when unset).
// Nothing becomes visible.
//
// REQUIRES: st's data files are durable (Writer.Finish, not FinishLater): the record that names
// them must never exist before them.
func (t *Table) WriteStage(ctx context.Context, st *Stage) error {
	st.Token = uuid.NewString()
	if st.Created.IsZero() {
		st.Created = time.Now()
	}
	b, err := json.Marshal(st.record())
	if err != nil {
		return fmt.Errorf("table %s: encode stage: %w", t.name, err)
	}
	if err := t.store.PutIfAbsent(ctx, t.key(makeStageKey(st.Token)), b); err != nil {
		return fmt.Errorf("table %s: write stage %s: %w", t.name, st.Token, err)
	}
	return nil
}

// ReadStage reads the stage token names. A token of the wrong form is ErrInvalidStageToken; a
// stage the table does not have (committed and removed, expired, never written) is
// ErrStageNotFound.
func (t *Table) ReadStage(ctx context.Context, token string) (*Stage, error) {
	if !IsStageToken(token) {
		return nil, fmt.Errorf("%w: %q is not a token this server issued", ErrInvalidStageToken, token)
	}
	b, err := t.store.Get(ctx, t.key(makeStageKey(token)))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: table %s has no stage %s (already committed and cleaned up, or expired)", ErrStageNotFound, t.name, token)
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: read stage %s: %w", t.name, token, err)
	}
	var rec stageRecord
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("table %s: corrupt stage %s: %w", t.name, token, err)
	}
	return rec.stage(), nil
}

// RemoveStage removes a stage record once a committed version references its files. A stage
// already gone is not an error.
func (t *Table) RemoveStage(ctx context.Context, token string) error {
	if !IsStageToken(token) {
		return fmt.Errorf("%w: %q is not a token this server issued", ErrInvalidStageToken, token)
	}
	if err := t.store.Delete(ctx, t.key(makeStageKey(token))); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("table %s: remove stage %s: %w", t.name, token, err)
	}
	return nil
}

// storedStage is one object under _staging/ as cleanup sees it.
type storedStage struct {
	key     string    // the object's key
	created time.Time // the record's created time; its modification time when it has none
	files   []string  // the keys of the data files it names
}

// listStages reads every object under _staging/. A record that cannot be decoded, or an object
// that is no stage record at all, names no files and is judged by its modification time, so
// that garbage under _staging/ expires too. A record removed meanwhile is skipped.
func (t *Table) listStages(ctx context.Context) ([]storedStage, error) {
	objs, err := t.store.List(ctx, t.key(stagingDir), "")
	if err != nil {
		return nil, fmt.Errorf("table %s: list stages: %w", t.name, err)
	}
	out := make([]storedStage, 0, len(objs))
	for _, o := range objs {
		st := storedStage{key: o.Key, created: o.ModTime}
		if _, ok := parseStageKey(o.Key); ok {
			b, err := t.store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // committed or expired meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("table %s: read stage %s: %w", t.name, o.Key, err)
			}
			var rec stageRecord
			if json.Unmarshal(b, &rec) == nil {
				if rec.CreatedNanos > 0 {
					st.created = time.Unix(0, rec.CreatedNanos)
				}
				for _, f := range rec.Fragments {
					for _, df := range f.Files {
						st.files = append(st.files, t.key(df.Path))
					}
				}
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// ReadStages reads the rows of stages through the schema of version m (a column a stage lacks
// reads as nulls, as in any older fragment): first the rows held in the records (Stage.Data),
// checked by the IPC guard before they are decoded, then the stages' data files. The stages are
// read as they are: the caller checked they belong together. The caller must Release the reader.
func (t *Table) ReadStages(ctx context.Context, m *Manifest, stages []*Stage) (array.RecordReader, error) {
	var frags []Fragment
	var held []arrow.RecordBatch
	for _, st := range stages {
		frags = append(frags, st.Fragments...)
		if len(st.Data) == 0 {
			continue
		}
		recs, err := t.decodeStageData(m, st)
		if err != nil {
			arrowschema.ReleaseBatches(held)
			return nil, err
		}
		held = append(held, recs...)
	}
	sc, err := t.scanFragments(ctx, m, frags, ScanOptions{})
	if err != nil {
		arrowschema.ReleaseBatches(held)
		return nil, err
	}
	if len(held) == 0 {
		return sc, nil
	}
	return &stagesReader{held: held, files: sc, refs: 1}, nil
}

// decodeStageData decodes the rows a stage record holds, as batches of m's schema.
func (t *Table) decodeStageData(m *Manifest, st *Stage) ([]arrow.RecordBatch, error) {
	r, err := arrowschema.OpenIPC(st.Data, t.opts.Allocator)
	if err != nil {
		return nil, fmt.Errorf("table %s: corrupt stage %s: %w", t.name, st.Token, err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec, err := arrowschema.ConformToTable(m.ArrowSchema(), r.RecordBatch())
		if err != nil {
			arrowschema.ReleaseBatches(out)
			return nil, fmt.Errorf("table %s: stage %s: %w", t.name, st.Token, err)
		}
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		arrowschema.ReleaseBatches(out)
		return nil, fmt.Errorf("table %s: corrupt stage %s: %w", t.name, st.Token, err)
	}
	return out, nil
}

// EncodeStageData encodes batches (of schema) as a Stage.Data stream.
func EncodeStageData(schema *arrow.Schema, batches []arrow.RecordBatch, alloc memory.Allocator) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(alloc))
	for _, b := range batches {
		if err := w.Write(b); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("encode stage rows: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode stage rows: %w", err)
	}
	return buf.Bytes(), nil
}

// stagesReader yields the batches stage records hold, then those of the stages' files.
type stagesReader struct {
	held  []arrow.RecordBatch
	next  int
	files *Scanner
	cur   arrow.RecordBatch
	refs  int64
}

func (r *stagesReader) Schema() *arrow.Schema { return r.files.Schema() }
func (r *stagesReader) Next() bool {
	if r.next < len(r.held) {
		r.cur = r.held[r.next]
		r.next++
		return true
	}
	r.cur = nil
	if r.files.Next() {
		r.cur = r.files.RecordBatch()
		return true
	}
	return false
}
func (r *stagesReader) RecordBatch() arrow.RecordBatch { return r.cur }
func (r *stagesReader) Record() arrow.RecordBatch      { return r.cur }
func (r *stagesReader) Err() error                     { return r.files.Err() }
func (r *stagesReader) Retain()                        { atomic.AddInt64(&r.refs, 1) }
func (r *stagesReader) Release() {
	if atomic.AddInt64(&r.refs, -1) == 0 {
		arrowschema.ReleaseBatches(r.held)
		r.held = nil
		r.files.Release()
	}
}
