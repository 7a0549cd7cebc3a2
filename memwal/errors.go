package memwal

import (
	"errors"

	"github.com/flight-sink/flight-sink/memwal/wal"
)

// Sentinel errors callers branch on. They are wrapped with the shard and what was attempted.
var (
	// ErrFenced: another writer claimed the shard with a newer writer epoch. The writer that gets
	// it has acknowledged nothing since the claim and must stop; reopen the shard to write again.
	// It is wal.ErrFenced.
	ErrFenced = wal.ErrFenced
	// ErrNoManifest: the shard has never been claimed; it holds no data.
	ErrNoManifest = errors.New("memwal shard has no manifest")
	// ErrBackpressure: the shard's unflushed data stayed above Options.MaxUnflushedBytes for
	// longer than Options.BackpressureWait. Over Flight it is ResourceExhausted.
	ErrBackpressure = errors.New("memwal shard backlog over its limit")
	// ErrClosed: the shard was closed, or failed and must be reopened. It is wal.ErrClosed.
	ErrClosed = wal.ErrClosed
	// ErrCorrupt: a shard manifest or WAL entry could not be decoded. It is wal.ErrCorrupt.
	ErrCorrupt = wal.ErrCorrupt
)

// FencedError names the epochs involved when a writer is fenced; it wraps ErrFenced. It is
// wal.FencedError: the WAL's put-if-absent and fence entries, and the shard's manifest commits
// and ownership probes, report a fence alike.
type FencedError = wal.FencedError
