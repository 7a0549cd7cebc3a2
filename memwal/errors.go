package memwal

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on. They are wrapped with the shard and what was attempted.
var (
	// ErrFenced: another writer claimed the shard with a newer writer epoch. The writer that gets
	// it has acknowledged nothing since the claim and must stop; reopen the shard to write again.
	ErrFenced = errors.New("memwal shard writer fenced by a newer writer")
	// ErrNoManifest: the shard has never been claimed; it holds no data.
	ErrNoManifest = errors.New("memwal shard has no manifest")
	// ErrBackpressure: the shard's unflushed data stayed above Options.MaxUnflushedBytes for
	// longer than Options.BackpressureWait. Over Flight it is ResourceExhausted.
	ErrBackpressure = errors.New("memwal shard backlog over its limit")
	// ErrClosed: the shard was closed, or failed and must be reopened.
	ErrClosed = errors.New("memwal shard closed")
	// ErrCorrupt: a shard manifest or WAL entry could not be decoded.
	ErrCorrupt = errors.New("corrupt memwal object")
)

// FencedError names the epochs involved when a writer is fenced.
type FencedError struct {
	Shard        string
	WriterEpoch  uint64 // the fenced writer's epoch
	CurrentEpoch uint64 // the epoch that fenced it, when known (0 otherwise)
	Op           string // what the fenced writer was doing
}

func (e *FencedError) Error() string {
	if e.CurrentEpoch == 0 {
		return fmt.Sprintf("memwal shard %s: %s: writer epoch %d is fenced by a newer writer", e.Shard, e.Op, e.WriterEpoch)
	}
	return fmt.Sprintf("memwal shard %s: %s: writer epoch %d is fenced by writer epoch %d", e.Shard, e.Op, e.WriterEpoch, e.CurrentEpoch)
}

func (e *FencedError) Unwrap() error { return ErrFenced }
