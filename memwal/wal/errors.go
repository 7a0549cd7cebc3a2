package wal

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on. They are wrapped with the shard and what was attempted.
// memwal re-exports each as its own (memwal.ErrFenced is ErrFenced, and so on), so a caller
// branches on either name.
var (
	// ErrFenced reports that another writer claimed the shard with a newer writer epoch: a
	// fence entry, or an entry of a newer epoch, holds the position a writer tried to take. The
	// writer that gets it must stop.
	ErrFenced = errors.New("memwal shard writer fenced by a newer writer")
	// ErrClosed reports that the WAL writer was closed: a stream record appended after Close
	// fails with it.
	ErrClosed = errors.New("memwal shard closed")
	// ErrCorrupt reports that stored WAL bytes (an entry, a stream record, a segment's records,
	// or any Arrow IPC stream OpenIPC opens) could not be decoded.
	ErrCorrupt = errors.New("corrupt memwal object")
)

// FencedError names the epochs involved when a writer is fenced. It wraps ErrFenced.
type FencedError struct {
	// Shard is the id of the shard the writer wrote.
	Shard string
	// WriterEpoch is the fenced writer's epoch.
	WriterEpoch uint64
	// CurrentEpoch is the epoch that fenced it, when known (0 otherwise).
	CurrentEpoch uint64
	// Op says what the fenced writer was doing.
	Op string
}

// Error returns a message naming the shard, the operation and both epochs.
func (e *FencedError) Error() string {
	if e.CurrentEpoch == 0 {
		return fmt.Sprintf("memwal shard %s: %s: writer epoch %d is fenced by a newer writer", e.Shard, e.Op, e.WriterEpoch)
	}
	return fmt.Sprintf("memwal shard %s: %s: writer epoch %d is fenced by writer epoch %d", e.Shard, e.Op, e.WriterEpoch, e.CurrentEpoch)
}

// Unwrap returns ErrFenced.
func (e *FencedError) Unwrap() error { return ErrFenced }
