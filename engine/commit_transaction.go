package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/internal/epochid"
)

// Operation names the kind of a transaction.
type Operation string

// Operations the engine commits.
const (
	OpCreate    Operation = "Create"
	OpAppend    Operation = "Append"
	OpOverwrite Operation = "Overwrite"
	// OpDelete soft-deletes rows (Transaction.Deleted).
	OpDelete Operation = "Delete"
	// OpUpdate deletes the rows it changes (Deleted) and appends their new values (Fragments).
	OpUpdate Operation = "Update"
	// OpUpsert (merge-insert by primary key) deletes the rows whose keys it writes (Deleted) and
	// appends every row it writes (Fragments).
	OpUpsert Operation = "Upsert"
	// OpRewrite (compaction) replaces fragments by new ones holding their live rows and records
	// where each row went (Transaction.Rewrite).
	OpRewrite Operation = "Rewrite"
	// OpCreateIndex adds an index (Transaction.Index), built over the fragments it covers.
	OpCreateIndex Operation = "CreateIndex"
	// OpOptimizeIndex changes an index's segments (Transaction.Index): it appends a delta segment
	// for unindexed fragments and/or replaces segments by one merged segment.
	OpOptimizeIndex Operation = "OptimizeIndex"
	// OpUpdateConfig sets and removes table config keys (Transaction.ConfigSet, ConfigUnset).
	OpUpdateConfig Operation = "UpdateConfig"
)

// Transaction property keys the streaming sink stamps on every epoch commit. PropEpochRows, the
// rows the epoch's writers sent, lets a replay of the epoch be compared with what landed; commits
// of base-table epochs carry it, others may not. PropEpochPartitionRows, on an epoch committed
// from staged partitions, holds each partition's rows ("<partition>:<rows>,...", by partition),
// so a replay of one partition can be compared too. PropRunID is the run of the query that
// committed the epoch (Spark's StreamingQuery.runId), when its writer sent one.
const (
	PropQueryID            = "flight_sink.streaming.query_id"
	PropEpochID            = "flight_sink.streaming.epoch_id"
	PropEpochRows          = "flight_sink.streaming.rows"
	PropEpochPartitionRows = "flight_sink.streaming.partition_rows"
	PropRunID              = "flight_sink.streaming.run_id"
)

// Transaction is what one commit does, as written to its transaction file.
type Transaction struct {
	ID          string            `json:"id"`
	ReadVersion uint64            `json:"read_version"`
	Operation   Operation         `json:"operation"`
	Properties  map[string]string `json:"properties,omitempty"`

	// Fragments added by Append, Update or Upsert, the complete new contents of an Overwrite, or
	// the fragments a Rewrite writes. Their IDs are assigned when the commit lands, so they are
	// zero here.
	Fragments []Fragment `json:"fragments,omitempty"`
	// Schema is the table schema the transaction's rows are written in when it changes the table
	// schema: an Overwrite's new schema, or an Append's, Upsert's or Overwrite's merged schema
	// (MergeSchema), committed with the rows in this one transaction. Empty keeps the schema.
	// Fields the table has keep their field ids; new ones get ids at commit (setSchema).
	Schema []byte `json:"schema,omitempty"`
	// MemWALMerged advances MemWAL shards' merged-generation watermarks in the same transaction
	// as the Append that folds those generations into the table (shard id -> generation).
	MemWALMerged map[string]uint64 `json:"memwal_merged,omitempty"`
	// MemWALMergedFrom states, per shard in MemWALMerged, the merged-generation watermark the
	// fold read (absent from the manifest = 0). The commit is refused with
	// ErrGenerationAlreadyMerged if the watermark moved since: another compactor folded some of
	// the same generations, and folding them again would count their rows twice.
	MemWALMergedFrom map[string]uint64 `json:"memwal_merged_from,omitempty"`

	// Deleted holds the rows a Delete, Update or Upsert removes, as row addresses of ReadVersion
	// (the affected-rows bitmap). A commit that lands after a Rewrite maps them to their new
	// addresses; the file keeps them as prepared.
	Deleted *rowset.Set `json:"deleted,omitempty"`
	// Rewrite is a Rewrite's change-of-address mapping: which fragments it replaced and where
	// each of their live rows went.
	Rewrite *ChangeOfAddress `json:"rewrite,omitempty"`
	// Index is what a CreateIndex or OptimizeIndex does to one index.
	Index *IndexChange `json:"index,omitempty"`
	// ConfigSet and ConfigUnset are an UpdateConfig's changes to the table config.
	ConfigSet   map[string]string `json:"config_set,omitempty"`
	ConfigUnset []string          `json:"config_unset,omitempty"`

	// FilesDurable, when set, is waited for once, before the first manifest attempt: it reports
	// whether the data files the transaction references are stored (Writer.Durable after
	// Writer.FinishLater). An error fails the commit before any manifest names the files.
	FilesDurable func(context.Context) error `json:"-"`

	// In-process state of a prepared transaction; not part of the file.
	schema                    *arrow.Schema       // Schema decoded (SetSchema)
	base                      *Manifest           // the version it was prepared against
	upsertKeys                map[string]struct{} // Upsert: the encoded keys it writes
	rowsUpdated, rowsInserted int64               // Update/Upsert counts for WriteResult
}

// SetSchema makes sc the table schema the transaction commits with its rows (Schema).
func (t *Transaction) SetSchema(sc *arrow.Schema) error {
	b, err := arrowschema.EncodeSchema(sc)
	if err != nil {
		return err
	}
	t.Schema, t.schema = b, sc
	return nil
}

// rowsDeleted returns how many rows the transaction deletes as prepared.
func (t *Transaction) rowsDeleted() int64 { return t.Deleted.Len() }

// Epoch returns the streaming identity stamped in the properties, if any.
func (t *Transaction) Epoch() (epochid.ID, bool) { return epochFromProperties(t.Properties) }

func epochFromProperties(p map[string]string) (epochid.ID, bool) {
	q, ok := p[PropQueryID]
	if !ok {
		return epochid.ID{}, false
	}
	e, err := strconv.ParseInt(p[PropEpochID], 10, 64)
	if err != nil {
		return epochid.ID{}, false
	}
	return epochid.ID{QueryID: q, EpochID: e}, true
}

func encodeTransaction(t *Transaction) ([]byte, error) { return json.Marshal(t) }

func decodeTransaction(key string, data []byte) (*Transaction, error) {
	var t Transaction
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("corrupt transaction file %s: %w", key, err)
	}
	return &t, nil
}
