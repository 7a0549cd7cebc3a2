package memwal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// The flush path of a shard writer: a full memtable is sealed and the flusher goroutine writes it
// as a flushed generation, commits the shard manifest that lists it (advancing replay_after) and
// frees the WAL it covered.

// sealLocked makes the active memtable immutable and hands it to the flusher.
//
// REQUIRES: s.mu held.
func (s *Shard) sealLocked() {
	if s.active.empty() {
		return
	}
	s.sealed = append(s.sealed, s.active)
	s.active = &memtable{}
	select {
	case s.flushSignal <- struct{}{}:
	default:
	}
}

// Flush seals the memtable and waits until every sealed memtable is a flushed generation.
func (s *Shard) Flush(ctx context.Context) error {
	s.mu.Lock()
	s.sealLocked()
	s.mu.Unlock()
	for {
		s.mu.Lock()
		pending, failed, closed, progress := len(s.sealed), s.failed, s.closed, s.progress
		s.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case pending == 0:
			return nil
		case closed:
			return fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxFlushFailures bounds the consecutive failed attempts to flush one memtable (a store outage
// of a few seconds, with the back-off below) before the writer stops with the error.
const maxFlushFailures = 8

// runFlusher flushes sealed memtables in order and seals the active one when it gets too old.
func (s *Shard) runFlusher() {
	defer s.wg.Done()
	tick := time.Second
	if age := s.opts.memtableAgeLimit(); age > 0 && age/4 < tick {
		tick = max(age/4, time.Millisecond)
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	failures := 0
	for {
		select {
		case <-s.stop:
			return
		case <-s.flushSignal:
		case <-ticker.C:
			s.mu.Lock()
			if age := s.opts.memtableAgeLimit(); age > 0 && !s.active.empty() && time.Since(s.active.created) >= age {
				s.sealLocked()
			}
			s.mu.Unlock()
		}
		for {
			s.mu.Lock()
			var mt *memtable
			if len(s.sealed) > 0 && s.failed == nil {
				mt = s.sealed[0]
			}
			s.mu.Unlock()
			if mt == nil {
				break
			}
			err := panics.Recover(s.opts.Logger, "memwal flush", func() error { return s.flush(mt) })
			if err != nil {
				failures++
				// A fenced writer, one of a dropped table, a panic (the memtable cannot be encoded:
				// it would panic again) or a failure that outlasts the retries stops the writer: its
				// puts and every Flush waiting on it get the error instead of waiting for ever. The
				// rows are durable in the WAL; the writer opened next replays them.
				switch {
				case errors.Is(err, ErrFenced), errors.Is(err, engine.ErrTableNotFound): // taken over, or dropped
					_ = s.fail(err)
				case errors.Is(err, panics.ErrPanic) || failures >= maxFlushFailures:
					_ = s.fail(fmt.Errorf("memwal shard %s: flush failed %d times, the writer stops: %w", s.id, failures, err))
				}
				if s.Err() != nil {
					s.signalProgress()
					return
				}
				s.opts.Logger.Warn("memwal: flush failed, will retry", "shard", s.id, "err", err, "failures", failures)
				select {
				case <-s.stop:
					return
				case <-time.After(min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)):
				}
				continue
			}
			failures = 0
		}
	}
}

// flush writes mt as the next generation and commits it to the shard manifest.
func (s *Shard) flush(mt *memtable) error {
	ctx := context.Background()
	s.mu.Lock()
	g, prevReplayAfter := s.nextGen, s.replayAfter
	s.mu.Unlock()
	fg, err := writeGeneration(ctx, s.table.Store(), s.paths, g, s.schema, mt.batches(), s.opts.Allocator)
	if err != nil {
		return err
	}
	fg.FirstWALPosition, fg.LastWALPosition = mt.firstPos, mt.lastPos
	now := time.Now().UnixNano()
	fg.FlushedAtNanos = now
	if !mt.created.IsZero() {
		fg.FirstRowAtNanos = mt.created.UnixNano()
	}
	m, err := s.ms.CommitUpdate(ctx, s.epoch, func(m *ShardManifest) error {
		if m.NextGeneration == g+1 {
			// CommitUpdate checked that we still own the shard, and only the owner numbers
			// generations: this is our own commit of g, which landed although the attempt that
			// made it reported an error.
			return errNoUpdate
		}
		if m.NextGeneration > g {
			return &FencedError{Shard: s.id, WriterEpoch: s.epoch, Op: fmt.Sprintf("flush generation %d (manifest is at %d)", g, m.NextGeneration)}
		}
		m.NextGeneration = g + 1
		if mt.lastPos > m.ReplayAfterWALEntryPosition {
			m.ReplayAfterWALEntryPosition = mt.lastPos
		}
		flushed := map[string][]int64{}
		mt.identities(func(q string, e int64, _ uint64) { flushed[q] = append(flushed[q], e) })
		fg.Epochs = epochSpans(flushed)
		m.FlushedGenerations = append(m.FlushedGenerations, fg)
		for q, epochs := range flushed {
			wm, ok := m.queryWatermark(q) // an archived query flushing again comes back to Queries
			m.Queries[q] = wm.advance(ok, epochs, g, now)
		}
		cutoff := now - int64(s.opts.QueryWatermarkRetention)
		for q, wm := range m.Queries {
			if wm.UpdatedNanos < cutoff {
				delete(m.Queries, q)
			}
		}
		return s.ms.spillQueries(ctx, m, now)
	})
	if err != nil {
		// The generation's file is unreferenced garbage (or, if the outcome was unknown, it is
		// referenced and must stay): leave it; the fold sweeps unlisted directories.
		return fmt.Errorf("memwal shard %s: commit generation %d: %w", s.id, g, err)
	}
	s.mu.Lock()
	s.manifest = m
	s.nextGen = g + 1
	s.replayAfter = m.ReplayAfterWALEntryPosition
	s.sealed = s.sealed[1:]
	s.unflushed -= mt.bytes
	for k, h := range s.identities {
		if h.pos <= s.replayAfter {
			delete(s.identities, k)
		}
	}
	s.mu.Unlock()
	mt.release()
	s.signalProgress()
	// Delete after the manifest update: until replay_after passed them, a reopened writer needed
	// these entries. An entry left behind is below replay_after and never read again.
	s.wal.DeleteEntries(ctx, prevReplayAfter+1, mt.lastPos, s.opts.Logger.Warn)
	if s.opts.AfterFlush != nil {
		s.opts.AfterFlush(g)
	}
	return nil
}

func (s *Shard) signalProgress() {
	s.mu.Lock()
	close(s.progress)
	s.progress = make(chan struct{})
	s.mu.Unlock()
}

func (s *Shard) releaseMemtables() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, mt := range s.sealed {
		mt.release()
	}
	s.sealed = nil
	s.active.release()
	s.active = &memtable{}
	s.unflushed = 0
}
