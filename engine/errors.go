package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on. They are wrapped with the table and version involved.
var (
	// ErrTableNotFound: no version of the table exists.
	ErrTableNotFound = errors.New("table not found")
	// ErrTableExists: Create found an existing table.
	ErrTableExists = errors.New("table already exists")
	// ErrVersionNotFound: the requested version does not exist (or was cleaned up).
	ErrVersionNotFound = errors.New("version not found")
	// ErrInvalidTableName: the name does not follow ValidateTableName's grammar.
	ErrInvalidTableName = errors.New("invalid table name")
	// ErrCorruptManifest: a manifest, or a file it names by its content (the schema file, whose
	// name is its bytes' SHA-256; the watermark archive), could not be decoded or does not match
	// its name: the stored data is damaged.
	ErrCorruptManifest = errors.New("corrupt manifest")
	// ErrUnsupportedFormat: a manifest was written by a newer, unknown format version.
	ErrUnsupportedFormat = errors.New("unsupported manifest format version")
	// ErrCommitConflict: a concurrent commit cannot be reconciled with this one.
	ErrCommitConflict = errors.New("commit conflict")
	// ErrTooManyRetries: the commit lost the race for a new version too many times.
	ErrTooManyRetries = errors.New("commit retries exhausted")
	// ErrEpochCommitted: a streaming epoch a write carries is already committed, so the write
	// must not land again. It is the one exactly-once sentinel: the base table (the manifest's
	// watermark for the transaction's streaming query is already at or past its epoch) and a
	// MemWAL shard (a put carries an epoch identity the shard already holds) both return it,
	// wrapped in an *EpochCommittedError that says where the epoch was found.
	ErrEpochCommitted = errors.New("streaming epoch already committed")
	// ErrFragmentNotFound: a read names a fragment the version it reads does not have (a ticket
	// of another version, or made up).
	ErrFragmentNotFound = errors.New("fragment not found")
	// ErrGenerationAlreadyMerged: a MemWAL fold names a generation at or below the shard's
	// merged-generation watermark; its rows are already in the table.
	ErrGenerationAlreadyMerged = errors.New("memwal generation already merged")
	// ErrInvalidConfig: a table config setting names an unknown key or a value the key does not
	// take; the error names the key.
	ErrInvalidConfig = errors.New("invalid table config")
	// ErrTooManyPartitions: one write (an epoch, an append, an upsert) holds rows of more
	// partitions than the table's limit (ConfigMaxPartitionsPerWrite, Options.MaxPartitionsPerWrite);
	// nothing of it is committed.
	ErrTooManyPartitions = errors.New("too many partitions in one write")

	// errFilesNotDurable: a transaction's data files could not be stored (Transaction.FilesDurable);
	// the commit stopped before any manifest named them.
	errFilesNotDurable = errors.New("data files not stored")
)

// ConflictError names both sides of an unresolvable commit conflict.
type ConflictError struct {
	Table        string
	Operation    Operation // ours
	ReadVersion  uint64
	TheirOp      Operation
	TheirVersion uint64
	Reason       string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("commit conflict on table %s: %s (read version %d) conflicts with %s committed at version %d: %s",
		e.Table, e.Operation, e.ReadVersion, e.TheirOp, e.TheirVersion, e.Reason)
}

func (e *ConflictError) Unwrap() error { return ErrCommitConflict }

// EpochCommittedError reports that a write carried a streaming epoch (QueryID, EpochID) that is
// already committed, and where it was found. It wraps ErrEpochCommitted.
//
// Exactly one of the two places is described. For the base table (Shard is empty) the table's
// watermark for the query already covers the epoch: either the very same epoch (a replay that
// raced another committer) or a later one; WatermarkEpoch and Version say which version raised the
// watermark to what. For a MemWAL shard (Shard is set) the shard already holds the epoch, at
// Location; WatermarkEpoch and Version are zero.
type EpochCommittedError struct {
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
func (e *EpochCommittedError) Error() string {
	if e.Shard != "" {
		if e.Location == nil {
			return fmt.Sprintf("memwal shard %s: query %q epoch %d already committed", e.Shard, e.QueryID, e.EpochID)
		}
		return fmt.Sprintf("memwal shard %s: query %q epoch %d already committed (%s)", e.Shard, e.QueryID, e.EpochID, e.Location)
	}
	return fmt.Sprintf("query %q epoch %d: table watermark is already at epoch %d (version %d)",
		e.QueryID, e.EpochID, e.WatermarkEpoch, e.Version)
}

// Unwrap returns ErrEpochCommitted.
func (e *EpochCommittedError) Unwrap() error { return ErrEpochCommitted }
