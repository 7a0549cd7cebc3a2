// Package epochid is the identity of a streaming epoch, (query_id, epoch_id), and the one
// exactly-once error every layer returns when a write carries an epoch that already landed: the
// base table (engine), a MemWAL shard (memwal), the WAL entries that record it (memwal/wal) and the
// streaming sink's dedupe (streaming) all speak of an epoch in these words. It imports nothing of
// the module, so the WAL's byte format does not depend on the table engine.
package epochid

import (
	"errors"
	"fmt"
)

// ID is a streaming epoch: the query that produced it and its epoch number. It is comparable, so
// it keys maps of epochs.
type ID struct {
	QueryID string `json:"query_id"`
	EpochID int64  `json:"epoch_id"`
}

// ErrCommitted: a streaming epoch a write carries is already committed, so the write must not
// land again. It is the one exactly-once sentinel: the base table (the manifest's watermark for
// the transaction's streaming query is already at or past its epoch) and a MemWAL shard (a put
// carries an epoch identity the shard already holds) both return it, wrapped in a
// *CommittedError that says where the epoch was found.
var ErrCommitted = errors.New("streaming epoch already committed")

// CommittedError reports that a write carried a streaming epoch (QueryID, EpochID) that is
// already committed, and where it was found. It wraps ErrCommitted.
//
// Exactly one of the two places is described. For the base table (Shard is empty) the table's
// watermark for the query already covers the epoch: either the very same epoch (a replay that
// raced another committer) or a later one; WatermarkEpoch and Version say which version raised the
// watermark to what. For a MemWAL shard (Shard is set) the shard already holds the epoch, at
// Location; WatermarkEpoch and Version are zero.
type CommittedError struct {
	// QueryID is the streaming query whose epoch the write carried.
	QueryID string
	// EpochID is the epoch the write carried.
	EpochID int64

	// WatermarkEpoch is the base table's watermark epoch for the query. It is set only when Shard
	// is empty.
	WatermarkEpoch int64
	// Version is the base table version that advanced the watermark to WatermarkEpoch. It is set
	// only when Shard is empty.
	Version uint64

	// Shard is the id of the MemWAL shard that holds the epoch; empty for the base table.
	Shard string
	// Location says where in Shard the epoch is (a memwal.EpochLocation: a WAL entry, or the
	// query's flushed watermark). It may be nil, and is nil for the base table.
	Location fmt.Stringer
}

// Error returns a message naming the epoch and where it was found.
func (e *CommittedError) Error() string {
	if e.Shard != "" {
		if e.Location == nil {
			return fmt.Sprintf("memwal shard %s: query %q epoch %d already committed", e.Shard, e.QueryID, e.EpochID)
		}
		return fmt.Sprintf("memwal shard %s: query %q epoch %d already committed (%s)", e.Shard, e.QueryID, e.EpochID, e.Location)
	}
	return fmt.Sprintf("query %q epoch %d: table watermark is already at epoch %d (version %d)",
		e.QueryID, e.EpochID, e.WatermarkEpoch, e.Version)
}

// Unwrap returns ErrCommitted.
func (e *CommittedError) Unwrap() error { return ErrCommitted }
