package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Operation names the kind of a transaction.
type Operation string

// Operations the engine commits.
const (
	OpCreate    Operation = "Create"
	OpAppend    Operation = "Append"
	OpOverwrite Operation = "Overwrite"
)

// Transaction property keys the streaming sink stamps on every epoch commit.
const (
	PropQueryID = "flight_sink.streaming.query_id"
	PropEpochID = "flight_sink.streaming.epoch_id"
)

// EpochIdentity is a streaming epoch: the query that produced it and its epoch number.
type EpochIdentity struct {
	QueryID string `json:"query_id"`
	EpochID int64  `json:"epoch_id"`
}

// Transaction is what one commit does, as written to its transaction file.
type Transaction struct {
	ID          string            `json:"id"`
	ReadVersion uint64            `json:"read_version"`
	Operation   Operation         `json:"operation"`
	Properties  map[string]string `json:"properties,omitempty"`

	// Fragments added by Append, or the complete new contents of an Overwrite. Their IDs are
	// assigned when the commit lands, so they are zero here.
	Fragments []Fragment `json:"fragments,omitempty"`
	// Schema replaces the table schema (Overwrite only; empty keeps the schema).
	Schema []byte `json:"schema,omitempty"`
	// MemWALMerged advances MemWAL shards' merged-generation watermarks in the same transaction
	// as the Append that folds those generations into the table (shard id -> generation).
	MemWALMerged map[string]uint64 `json:"memwal_merged,omitempty"`
}

// Epoch returns the streaming identity stamped in the properties, if any.
func (t *Transaction) Epoch() (EpochIdentity, bool) { return epochFromProperties(t.Properties) }

func epochFromProperties(p map[string]string) (EpochIdentity, bool) {
	q, ok := p[PropQueryID]
	if !ok {
		return EpochIdentity{}, false
	}
	e, err := strconv.ParseInt(p[PropEpochID], 10, 64)
	if err != nil {
		return EpochIdentity{}, false
	}
	return EpochIdentity{QueryID: q, EpochID: e}, true
}

func encodeTransaction(t *Transaction) ([]byte, error) { return json.Marshal(t) }

func decodeTransaction(key string, data []byte) (*Transaction, error) {
	var t Transaction
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("corrupt transaction file %s: %w", key, err)
	}
	return &t, nil
}

// checkConflict decides whether ours (which read an older version) can land after theirs, which
// was committed at version theirVersion. It returns nil when ours can be rebased on top.
//
// The matrix (docs/conflicts.md):
//
//	ours \ theirs   Create  Append   Overwrite
//	Append          ok      ok       conflict (the table ours read was replaced)
//	Overwrite       ok      ok       ok       (a blind replace; last writer wins)
func checkConflict(table string, ours *Transaction, theirs TransactionSummary, theirVersion uint64) error {
	conflict := func(reason string) error {
		return &ConflictError{Table: table, Operation: ours.Operation, ReadVersion: ours.ReadVersion,
			TheirOp: theirs.Operation, TheirVersion: theirVersion, Reason: reason}
	}
	switch ours.Operation {
	case OpAppend:
		switch theirs.Operation {
		case OpAppend, OpCreate:
			return nil
		case OpOverwrite:
			return conflict("the table was overwritten after this append read it; retry the append against the new version")
		}
	case OpOverwrite:
		return nil
	}
	return conflict("no rule to reconcile these operations")
}
