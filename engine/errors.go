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
