package engine

import (
	"context"
	"runtime"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/flight-sink/flight-sink/objstore"
)

// Background work (compaction, and the MemWAL's folds) runs its CPU-heavy
// steps (Parquet encoding; on a local store, where reads and writes are copies to and from the page
// cache, also decoding and file writes) in one of max(1, GOMAXPROCS-1) process-wide slots, so
// together it never keeps every core busy: a core is left to the puts whose acknowledgements
// wait (on two cores, a fold's goroutines running at once delayed acks by a scheduler time
// slice, about 10 ms, each). Work in the foreground (a direct-route commit's encoding, a read a
// client waits on, a memtable flush that held-back puts wait for) takes no slot and uses every
// core.
//
// A slot is held for one step (a column of a row group, a batch of a scan), never while waiting
// for another slot, so holders cannot deadlock, and never across a remote store's round trip.
var backgroundSlots = newSlots(int64(max(1, runtime.GOMAXPROCS(0)-1)))

// slots is a semaphore that also counts its holders: busy now, peak the most at once (tests read
// it).
type slots struct {
	sem        *semaphore.Weighted
	busy, peak atomic.Int64
}

func newSlots(n int64) *slots { return &slots{sem: semaphore.NewWeighted(n)} }

// RunInBackground runs fn holding a background slot, waiting for one first (or until ctx ends).
func RunInBackground(ctx context.Context, fn func() error) error {
	s := backgroundSlots // one semaphore from acquire to release (a test swaps it)
	if err := s.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	defer s.sem.Release(1)
	n := s.busy.Add(1)
	defer s.busy.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	return fn()
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// InBackground makes the writer encode in background slots (RunInBackground): for work no put is
// waiting on, such as compaction and MemWAL folds.
func InBackground() WriterOption { return func(w *Writer) { w.background = true } }

// localStore reports whether the table's store is a local directory.
func (t *Table) localStore() bool {
	_, ok := t.store.(*objstore.Local)
	return ok
}
