package memwal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// The commit path of a shard writer: a put is conformed to the table schema, admitted against
// the unflushed-bytes bound, queued, grouped with the puts queued beside it into one WAL entry,
// and acknowledged once that entry is durable and in the memtable.

// putRequest is one Put waiting for its group's WAL entry.
type putRequest struct {
	ctx   context.Context
	put   wal.Put
	bytes int64
	done  chan struct{}
	pos   uint64
	err   error
}

// entryBytes is what the put adds to its group's WAL entry: its batches, or nothing for a
// streamed put (its batches are in stream records already).
func (r *putRequest) entryBytes() int64 {
	if r.put.Stream != nil {
		return 0
	}
	return r.bytes
}

// PutResult says where a put landed.
type PutResult struct {
	// Position of the WAL entry that holds the put (0 for a put with nothing to write).
	Position uint64
	Rows     int64
}

// Put appends batches to the shard as one put and returns once the WAL entry holding them is
// durable and the writer has confirmed it still owns the shard. epoch, when not nil, is the
// streaming identity of the rows: a shard holds each identity at most once, so a put of an
// identity it already holds fails with an *epochid.CommittedError (epochid.ErrCommitted) saying where.
// Send every row an epoch has for this shard in one put.
//
// Batches must fit the shard's schema (columns matched by name); they are retained, not copied.
// Put fails with ErrFenced when another writer claimed the shard, ErrBackpressure when the
// unflushed backlog stays over its limit, ErrClosed after Close. When ctx ends first the put's
// outcome is unknown.
func (s *Shard) Put(ctx context.Context, epoch *epochid.ID, batches ...arrow.RecordBatch) (PutResult, error) {
	put, err := s.conform(epoch, batches)
	if err != nil {
		return PutResult{}, err
	}
	if put.Rows == 0 && epoch == nil {
		releasePut(put)
		return PutResult{}, nil
	}
	req := &putRequest{ctx: ctx, put: put, bytes: wal.BatchBytes([]wal.Put{put}), done: make(chan struct{})}
	if err := s.admit(ctx, req.bytes, 0); err != nil {
		releasePut(put)
		return PutResult{}, err
	}
	return s.enqueue(ctx, req)
}

// enqueue queues an admitted put for the next group, writes the group when the WAL is idle, and
// waits for the put's outcome. The put's batches are the shard's from here on: released on
// failure, kept by the memtable on success.
func (s *Shard) enqueue(ctx context.Context, req *putRequest) (PutResult, error) {
	put := req.put
	s.qmu.Lock()
	if s.qclosed {
		s.qmu.Unlock()
		s.mu.Lock()
		s.queued -= req.bytes
		s.mu.Unlock()
		releasePut(put)
		req.err = fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
		close(req.done)
		return PutResult{}, req.err
	}
	s.queue = append(s.queue, req)
	s.qmu.Unlock()
	if s.opts.WALFlushInterval > 0 || !s.commitMu.TryLock() {
		s.signalQueued() // the committer waits for the group to fill, or is writing one now
	} else {
		// The WAL is idle: write the group here. Puts that queue meanwhile join the next group,
		// which this loop writes too; one that queued after the last take signalled the
		// committer, since TryLock failed for it.
		for {
			group := s.takeGroup()
			if len(group) == 0 {
				break
			}
			s.commitGroup(group)
		}
		s.commitMu.Unlock()
	}
	select {
	case <-req.done:
		return PutResult{Position: req.pos, Rows: put.Rows}, req.err
	case <-ctx.Done():
		return PutResult{}, fmt.Errorf("memwal shard %s: put abandoned, outcome unknown: %w", s.id, ctx.Err())
	}
}

// signalQueued wakes the committer: the queue is not empty.
func (s *Shard) signalQueued() {
	select {
	case s.qsignal <- struct{}{}:
	default:
	}
}

// conform checks the batches against the shard schema and returns them reshaped to it, retained.
func (s *Shard) conform(epoch *epochid.ID, batches []arrow.RecordBatch) (wal.Put, error) {
	put := wal.Put{}
	if epoch != nil {
		e := *epoch
		put.Epoch = &e
	}
	for _, b := range batches {
		// Batches of an older schema of the table fit (omitted nullable columns, narrower types);
		// a schema change never goes through a shard (the sink commits it directly).
		if err := arrowschema.CheckWriteSchema(s.schema, b.Schema(), s.pk); err != nil {
			releasePut(put)
			return wal.Put{}, fmt.Errorf("memwal shard %s: %w", s.id, err)
		}
		if b.NumRows() == 0 {
			continue
		}
		conf, err := arrowschema.ConformToTable(s.schema, b)
		if err != nil {
			releasePut(put)
			return wal.Put{}, fmt.Errorf("memwal shard %s: %w: %w", s.id, arrowschema.ErrSchemaMismatch, err)
		}
		for _, k := range s.pk {
			if c := conf.Column(s.schema.FieldIndices(k)[0]); c.NullN() > 0 {
				conf.Release()
				releasePut(put)
				return wal.Put{}, fmt.Errorf("memwal shard %s: %w: primary key column %q has %d null values", s.id, arrowschema.ErrSchemaMismatch, k, c.NullN())
			}
		}
		put.Batches = append(put.Batches, conf)
		put.Rows += b.NumRows()
	}
	return put, nil
}

// admit applies back-pressure: while the unflushed backlog is over MaxUnflushedBytes it forces a
// flush and waits for progress, up to BackpressureWait. own is what the same put (a streamed
// one) has admitted already: a backlog that is all its own admits, as an empty one does.
func (s *Shard) admit(ctx context.Context, bytes, own int64) error {
	timer := time.NewTimer(s.opts.BackpressureWait)
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.failed != nil {
			return s.failed
		}
		if s.closed {
			return fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
		}
		backlog := s.unflushed + s.queued
		// An empty backlog always admits, so one oversized put cannot wedge the shard.
		if backlog == own || backlog+bytes <= s.opts.MaxUnflushedBytes {
			s.queued += bytes
			return nil
		}
		if !s.active.empty() {
			s.sealLocked()
		}
		progress := s.progress
		s.mu.Unlock()
		var err error
		select {
		case <-progress:
		case <-timer.C:
			err = fmt.Errorf("memwal shard %s: %d bytes unflushed (limit %d) for %v: %w",
				s.id, backlog, s.opts.MaxUnflushedBytes, s.opts.BackpressureWait, ErrBackpressure)
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.mu.Lock()
		if err != nil {
			return err
		}
	}
}

// runCommitter writes queued puts as WAL entries, one group at a time.
func (s *Shard) runCommitter() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			s.failQueued(fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed))
			return
		case <-s.qsignal:
		}
		s.commitMu.Lock()
		for {
			group := s.takeGroup()
			if len(group) == 0 {
				break
			}
			s.commitGroup(group)
		}
		s.commitMu.Unlock()
	}
}

// takeGroup takes the next group of queued puts: everything queued, up to WALMaxEntryBytes,
// after waiting up to WALFlushInterval for the group to fill.
func (s *Shard) takeGroup() []*putRequest {
	var group []*putRequest
	var bytes int64
	take := func() {
		s.qmu.Lock()
		defer s.qmu.Unlock()
		n := 0
		for n < len(s.queue) && (len(group) == 0 || bytes+s.queue[n].entryBytes() <= s.opts.WALMaxEntryBytes) {
			bytes += s.queue[n].entryBytes()
			group = append(group, s.queue[n])
			n++
		}
		s.queue = append(s.queue[:0], s.queue[n:]...)
	}
	take()
	if len(group) == 0 || s.opts.WALFlushInterval <= 0 {
		return group
	}
	timer := time.NewTimer(s.opts.WALFlushInterval)
	defer timer.Stop()
	for bytes < s.opts.WALMaxEntryBytes {
		select {
		case <-s.qsignal:
			take()
			continue
		case <-timer.C:
		case <-s.stop:
		}
		break
	}
	take()
	return group
}

// failQueued fails every queued put and closes the queue; the committer is stopping.
func (s *Shard) failQueued(err error) {
	s.qmu.Lock()
	q := s.queue
	s.queue = nil
	s.qclosed = true
	s.qmu.Unlock()
	s.mu.Lock()
	for _, r := range q {
		s.queued -= r.bytes
	}
	s.mu.Unlock()
	for _, r := range q {
		releasePut(r.put)
		r.err = err
		close(r.done)
	}
}

// commitGroup writes one group as the WAL entry at the next position and, once it is durable
// and ownership is confirmed, adds it to the memtable and acknowledges its puts.
func (s *Shard) commitGroup(group []*putRequest) {
	var admitted int64
	for _, r := range group {
		admitted += r.bytes
	}
	finish := func(r *putRequest, pos uint64, err error) {
		r.pos, r.err = pos, err
		close(r.done)
	}
	// Decide which puts go in: not abandoned, and not an epoch the shard already holds (or
	// that an earlier put of this group holds).
	s.mu.Lock()
	failed := s.failed
	pos := s.nextPos
	var in []*putRequest
	var dups []*putRequest // same epoch as an earlier put of this group
	seen := make(map[epochid.ID]bool)
	var rejected []func()
	for _, r := range group {
		switch {
		case failed != nil:
			rejected = append(rejected, func() { releasePut(r.put); finish(r, 0, failed) })
		case r.ctx.Err() != nil:
			rejected = append(rejected, func() { releasePut(r.put); finish(r, 0, r.ctx.Err()) })
		case r.put.Epoch != nil:
			k := epochid.ID{QueryID: r.put.Epoch.QueryID, EpochID: r.put.Epoch.EpochID}
			if loc, dup := s.epochLocationLocked(k.QueryID, k.EpochID); dup {
				e := &epochid.CommittedError{Shard: s.id, QueryID: k.QueryID, EpochID: k.EpochID, Location: loc}
				rejected = append(rejected, func() { releasePut(r.put); finish(r, 0, e) })
			} else if seen[k] {
				dups = append(dups, r)
			} else {
				seen[k] = true
				in = append(in, r)
			}
		default:
			in = append(in, r)
		}
	}
	s.mu.Unlock()
	for _, f := range rejected {
		f()
	}
	var err error
	if len(in) > 0 {
		err = panics.Recover(s.opts.Logger, "memwal write wal entry", func() error { return s.writeEntry(pos, in) })
		if errors.Is(err, panics.ErrPanic) {
			_ = s.fail(err) // the entry's outcome is unknown: stop acknowledging
		}
	}
	s.mu.Lock()
	s.queued -= admitted
	if err == nil && len(in) > 0 {
		puts := make([]wal.Put, len(in))
		tokens := make([]uint64, len(in))
		for i, r := range in {
			puts[i], tokens[i] = r.put, putToken(r.ctx)
			if e := r.put.Epoch; e != nil {
				s.identities[epochid.ID{QueryID: e.QueryID, EpochID: e.EpochID}] = heldEpoch{pos: pos, rows: r.put.Rows}
			}
		}
		s.addEntryLocked(pos, puts, tokens, wal.BatchBytes(puts))
		s.nextPos = pos + 1
	}
	s.mu.Unlock()
	for _, r := range in {
		if err != nil {
			releasePut(r.put)
			finish(r, 0, err)
		} else {
			finish(r, pos, nil)
		}
	}
	for _, r := range dups {
		releasePut(r.put)
		if err != nil {
			finish(r, 0, err)
			continue
		}
		e := r.put.Epoch
		finish(r, 0, &epochid.CommittedError{Shard: s.id, QueryID: e.QueryID, EpochID: e.EpochID, Location: EpochLocation{Position: pos}})
	}
}

// writeEntry makes the group durable at pos. On failure the writer is marked failed unless the
// entry provably did not land.
func (s *Shard) writeEntry(pos uint64, in []*putRequest) error {
	ctx := context.Background() // a group outlives any single put's context
	puts := make([]wal.Put, len(in))
	for i, r := range in {
		puts[i] = r.put
	}
	if s.wal.Segmented() {
		// A local disk: one record appended to this writer's own segment, one fdatasync. No one
		// else writes there, so there is no taken position to find; a failed append leaves the
		// outcome unknown.
		if err := s.wal.AppendEntry(pos, s.epoch, s.schema, puts, s.opts.Allocator); err != nil {
			return s.fail(fmt.Errorf("%w, reopen the shard", err))
		}
		return s.confirmOwner(ctx, pos)
	}
	data, err := wal.EncodeEntry(pos, s.epoch, s.schema, puts, s.opts.Allocator)
	if err != nil {
		return fmt.Errorf("memwal shard %s: %w", s.id, err)
	}
	put := time.Now()
	err = s.wal.Create(ctx, pos, data)
	if err == nil {
		recordWALSync("object", time.Since(put))
	}
	if errors.Is(err, objstore.ErrExists) {
		// Someone else wrote our position: a newer writer's fence or entry.
		cur := uint64(0)
		if other, rerr := s.wal.Read(ctx, pos, nil, s.opts.Allocator); rerr == nil {
			other.Release()
			cur = other.WriterEpoch
		}
		return s.fail(&FencedError{Shard: s.id, WriterEpoch: s.epoch, CurrentEpoch: cur, Op: fmt.Sprintf("write wal entry %d", pos)})
	}
	if err != nil {
		if _, serr := s.tbl().Store().Stat(ctx, s.paths.makeWALKey(pos)); errors.Is(serr, objstore.ErrNotFound) {
			return err // provably not written: the position stays free for the next group
		}
		return s.fail(fmt.Errorf("memwal shard %s: wal entry %d outcome unknown, reopen the shard: %w", s.id, pos, err))
	}
	return s.confirmOwner(ctx, pos)
}

// confirmOwner checks, after the entry at pos is durable, that this writer still owns the shard.
func (s *Shard) confirmOwner(ctx context.Context, pos uint64) error {
	// The entry is durable, but a writer that was fenced while it slept may have written into a
	// position below the new owner's replay_after (one that a flush already deleted), or, on a
	// local disk, at or above the new owner's fence, where no replay will ever read it. Only the
	// current owner may acknowledge: confirm before we do. On a local disk this probe, after the
	// fdatasync, is what makes the fence rule safe (wal/segment.go).
	// Beside it, the drop fence: a table whose drop began may have been listed already, and an
	// entry acknowledged now would be lost with it, or inherited by a table created again under
	// the name; the entry is removed and nothing acknowledged.
	dropped := make(chan error, 1)
	go func() { dropped <- s.ms.checkNotDropped(ctx) }()
	err := s.ms.confirmEpoch(ctx, s.epoch)
	if derr := <-dropped; derr != nil {
		if errors.Is(derr, engine.ErrTableNotFound) && !s.wal.Segmented() {
			// A local segment holds other entries and goes with its writer's later ones; an
			// entry object goes now.
			s.wal.DeleteEntries(ctx, pos, pos, s.opts.Logger.Warn)
		}
		return s.fail(fmt.Errorf("memwal shard %s: wal entry %d: %w", s.id, pos, derr))
	}
	if err != nil {
		if errors.Is(err, ErrFenced) {
			return s.fail(err)
		}
		return s.fail(fmt.Errorf("memwal shard %s: confirm ownership after wal entry %d: %w", s.id, pos, err))
	}
	return nil
}

// addEntryLocked adds a durable entry, its puts made under tokens (nil: none; epochGate), to the
// active memtable and seals it at a threshold.
//
// REQUIRES: s.mu held.
func (s *Shard) addEntryLocked(pos uint64, puts []wal.Put, tokens []uint64, bytes int64) {
	s.active.add(pos, puts, tokens, bytes)
	s.unflushed += bytes
	if s.active.rows >= s.opts.MemtableMaxRows || s.active.bytes >= s.opts.MemtableMaxBytes {
		s.sealLocked()
	}
}
