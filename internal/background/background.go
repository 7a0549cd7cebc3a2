// Package background bounds the CPU that work nobody waits on may take.
//
// Background work (table compaction, MemWAL folds, the data files they write) runs its CPU-heavy
// steps (Parquet encoding; on a local store, where reads and writes are copies to and from the
// page cache, also decoding and file writes) in one of max(1, GOMAXPROCS-1) process-wide slots,
// so together it never keeps every core busy: a core is left to the puts whose acknowledgements
// wait (on two cores, a fold's goroutines running at once delayed acks by a scheduler time
// slice, about 10 ms, each). Work in the foreground (a direct-route commit's encoding, a read a
// client waits on, a memtable flush that held-back puts wait for) takes no slot and uses every
// core.
//
// A slot is held for one step (a column of a row group, a batch of a scan), never while waiting
// for another slot, so holders cannot deadlock, and never across a remote store's round trip.
package background

import (
	"context"
	"runtime"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// process is the process-wide set of slots Run takes from.
var process atomic.Pointer[Slots]

func init() { process.Store(NewSlots(int64(max(1, runtime.GOMAXPROCS(0)-1)))) }

// Slots is a semaphore that also counts its holders: busy now, and the most at once (Peak).
type Slots struct {
	sem        *semaphore.Weighted
	busy, peak atomic.Int64
}

// NewSlots returns n slots.
func NewSlots(n int64) *Slots { return &Slots{sem: semaphore.NewWeighted(n)} }

// Peak returns the most holders the slots had at once since they were made or ResetPeak.
func (s *Slots) Peak() int64 { return s.peak.Load() }

// ResetPeak forgets the peak.
func (s *Slots) ResetPeak() { s.peak.Store(0) }

// Replace makes s the process-wide slots and returns the ones it replaced. Work already running
// keeps the slots it took. For tests that count their own work's holders.
func Replace(s *Slots) *Slots { return process.Swap(s) }

// Run runs fn holding a process-wide slot, waiting for one first (or until ctx ends).
func Run(ctx context.Context, fn func() error) error {
	s := process.Load() // one semaphore from acquire to release (a test may replace it)
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
