package memwal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
)

// Streamed puts: a large put written to the WAL as its batches arrive.
//
// A put is one WAL entry written by the group committer once all of it is at hand: receive,
// encode and write run one after the other. On a local disk (wal/segment.go) a large put can instead
// be streamed (Shard.StreamPut): each batch, as it arrives, is encoded as a stream record — an
// Arrow IPC stream like an entry, of kind "stream", carrying the writer epoch, a stream id (a
// random UUID) and the record's index in its stream, and no position — and appended to the
// writer's segment without an fdatasync, its write-back started at once (sync_file_range), while
// the next batch is received. At the end the put goes through the group committer as a normal
// put whose metadata names its stream (id, record count, CRC-32C of the records' payloads in
// order) instead of carrying batches: the commit entry. Its one fdatasync makes the records in
// its segment durable with it; a segment holding stream records is fdatasync'd before the next
// one is opened.
//
// Stream records count only through a commit entry that counts (the fence rule,
// docs/storage.md): one of the same writer epoch naming their stream, whose records are all there
// and match its count and CRC (anything else is corrupt: a durable commit covers its records).
// Records of a stream without a counting commit — an aborted stream, a crash before the commit, a
// commit refused as a duplicate, a fenced writer's — are ignored by every reader and never
// resurrect: a stream id is never reused. A segment holding records of an open stream is not
// recycled; one holding records of a committed stream is freed only once the commit is flushed.
//
// Replay holds stream records as slices of the segment bytes it reads anyway; the records of
// streams no counting entry commits are dropped from the index when the list ends, and records
// are decoded only when their commit is read.
//
// On an object store every entry is an object created put-if-absent: the store arbitrates
// positions, and an object cannot grow as batches arrive. A streamed put there (ShardSet's
// ShardStream) keeps the buffered path: its batches are held and put as one entry at the end.

// PutStream is a put being streamed into the shard's WAL (Shard.StreamPut). Append adds batches;
// Commit makes the put durable as Put does; Abort (or a failed Append or Commit) leaves only
// records no reader counts. A PutStream is used by one goroutine.
type PutStream struct {
	s        *Shard
	ctx      context.Context
	put      wal.Put
	ref      *wal.StreamRef
	admitted int64 // bytes admitted (Shard.admit) for the put so far
	ended    bool

	// The writer goroutine encodes and appends the batches sent on work; it owns buf, seq and
	// ref's count and CRC until wdone is closed, and sets werr (read by Append once wfail is
	// closed, or after wdone).
	work  chan arrow.RecordBatch
	wdone chan struct{}
	wfail chan struct{}
	werr  error
	buf   bytes.Buffer
	// pending counts the batches sent on work and not yet written (or failed): waitWritten.
	pending sync.WaitGroup
}

// waitWritten waits until every batch appended so far is written as a stream record or failed.
func (p *PutStream) waitWritten() { p.pending.Wait() }

// CanStream reports whether the shard's WAL takes streamed puts: a local disk's segments.
func (s *Shard) CanStream() bool { return s.wal.Segmented() }

// StreamPut starts a streamed put of epoch (nil: no identity) into the shard, on a local disk
// only (CanStream). It fails with an *epochid.CommittedError when the shard already holds the epoch,
// and with the writer's sticky error once it failed. ctx bounds the whole stream: when it ends,
// the put's outcome is as for Put.
func (s *Shard) StreamPut(ctx context.Context, epoch *epochid.ID) (*PutStream, error) {
	if !s.CanStream() {
		return nil, fmt.Errorf("memwal shard %s: streamed puts need a WAL on a local disk", s.id)
	}
	s.mu.Lock()
	err := s.failed
	switch {
	case err != nil:
	case s.closed:
		err = fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
	case epoch != nil:
		if loc, dup := s.epochLocationLocked(epoch.QueryID, epoch.EpochID); dup {
			err = &epochid.CommittedError{Shard: s.id, QueryID: epoch.QueryID, EpochID: epoch.EpochID, Location: loc}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	p := &PutStream{s: s, ctx: ctx, work: make(chan arrow.RecordBatch, 2), wdone: make(chan struct{}), wfail: make(chan struct{})}
	if epoch != nil {
		e := *epoch
		p.put.Epoch = &e
	}
	p.ref = s.wal.StartStream()
	go p.writeRecords()
	return p, nil
}

// writeRecords is the stream's writer goroutine: it appends each batch as the next stream record
// while the caller receives the next one.
func (p *PutStream) writeRecords() {
	defer close(p.wdone)
	for b := range p.work {
		if p.werr != nil {
			p.pending.Done()
			continue // drain: Append sees the error
		}
		err := wal.WriteStreamRecord(&p.buf, wal.SegmentHeaderSize, p.s.epoch, p.ref.ID, p.ref.Records, p.s.schema, b)
		if err == nil {
			payload := p.buf.Bytes()[wal.SegmentHeaderSize:]
			p.ref.CRC = wal.UpdateStreamCRC(p.ref.CRC, payload)
			if err = p.s.wal.AppendStreamRecord(p.buf.Bytes()); err != nil {
				// The segment's state after a failed write is unknown: the writer stops.
				err = p.s.fail(fmt.Errorf("memwal shard %s: write stream record: %w, reopen the shard", p.s.id, err))
			}
		}
		if err != nil {
			p.werr = err
			close(p.wfail)
			p.pending.Done()
			continue
		}
		p.ref.Records++
		p.pending.Done()
	}
}

// Append adds batches to the put: each must fit the shard's schema, as for Put; it is retained,
// not copied, and written as a stream record in the background. An error ends the stream (as
// Abort): nothing of it is acknowledged.
func (p *PutStream) Append(batches ...arrow.RecordBatch) error {
	if p.ended {
		return fmt.Errorf("memwal shard %s: append to an ended stream", p.s.id)
	}
	add, err := p.s.conform(nil, batches)
	if err == nil {
		n := wal.BatchBytes([]wal.Put{add})
		if err = p.s.admit(p.ctx, n, p.admitted); err == nil {
			p.admitted += n
		}
	}
	if err != nil {
		releasePut(add)
		p.Abort()
		return err
	}
	p.put.Batches = append(p.put.Batches, add.Batches...)
	p.put.Rows += add.Rows
	for _, b := range add.Batches {
		p.pending.Add(1)
		select {
		case p.work <- b:
		case <-p.wfail:
			p.pending.Done()
			err := p.werr
			p.Abort()
			return err
		case <-p.ctx.Done():
			p.pending.Done()
			p.Abort()
			return p.ctx.Err()
		}
	}
	return nil
}

// Commit makes the streamed put durable and acknowledged, as Put does for a put of every batch
// appended: it fails with an *epochid.CommittedError when the epoch landed meanwhile (the stream's
// records then never count), ErrFenced when another writer claimed the shard.
func (p *PutStream) Commit() (PutResult, error) {
	if p.ended {
		return PutResult{}, fmt.Errorf("memwal shard %s: commit of an ended stream", p.s.id)
	}
	p.ended = true
	close(p.work)
	<-p.wdone
	if p.werr == nil {
		p.werr = p.ctx.Err()
	}
	if p.werr != nil {
		p.release()
		p.unpin()
		return PutResult{}, p.werr
	}
	p.put.Stream = p.ref
	req := &putRequest{ctx: p.ctx, put: p.put, bytes: p.admitted, done: make(chan struct{})}
	// From here the put is the group committer's: it releases or keeps the batches.
	res, err := p.s.enqueue(p.ctx, req)
	select {
	case <-req.done:
		p.unpin()
	default:
		// The caller's context ended while the group is still being written: the commit's
		// entry may land yet, and the records it names must not be freed before it raised their
		// segments' positions (appendWith), so the pin ends once the group is done.
		go func() {
			<-req.done
			p.unpin()
		}()
	}
	return res, err
}

// unpin ends the stream's hold on its segments and, when they hold nothing else that is needed
// (the stream did not commit), frees them now rather than at the next flush.
func (p *PutStream) unpin() {
	p.s.wal.UnpinStream(p.ref)
	p.s.mu.Lock()
	replayAfter := p.s.replayAfter
	p.s.mu.Unlock()
	p.s.wal.ReleaseSegments(replayAfter)
}

// Abort ends the stream without a commit: its records are left for no reader to count. It is a
// no-op after Commit or Abort.
func (p *PutStream) Abort() {
	if p.ended {
		return
	}
	p.ended = true
	close(p.work)
	<-p.wdone
	p.release()
	p.unpin()
}

// release drops the stream's batches and their admission.
func (p *PutStream) release() {
	releasePut(p.put)
	p.put.Batches = nil
	p.s.mu.Lock()
	p.s.queued -= p.admitted
	p.s.mu.Unlock()
	p.admitted = 0
}

// ShardStream is a streamed put of an epoch of a table without a primary key (ShardSet.StreamPut):
// streamed into the WAL on a local disk, buffered and put at Commit on an object store. It keeps
// a reference to every batch appended (no copy), so a commit that finds the writer fenced is put
// again, routed afresh, as PutUnkeyed does.
type ShardStream struct {
	ss      *ShardSet
	i       int
	m       *engine.Manifest
	id      *epochid.ID
	since   time.Time
	decide  func(EpochHolding) (bool, error)
	held    func(*Shard) (bool, error)
	w       *Shard
	ps      *PutStream // nil: buffered
	batches []arrow.RecordBatch
	ended   bool
}

// StreamPut starts a streamed put of epoch id of a table without a primary key, with
// PutUnkeyed's rules (since as there): the shard is the one Route chooses (one this set owns), decide is asked
// where the shards hold the epoch (EpochHeld: every shard, whichever server wrote it) and held
// is the writer's own rule; when either says it is a replay, StreamPut returns (nil, true, nil)
// and the caller drains its stream and writes nothing. The fold ceiling is held before the
// stream starts. End the stream with Commit or Abort.
func (ss *ShardSet) StreamPut(ctx context.Context, since time.Time, m *engine.Manifest, id *epochid.ID,
	decide func(EpochHolding) (bool, error), held func(*Shard) (bool, error)) (*ShardStream, bool, error) {
	reroutes := 0
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			since = time.Now()
		}
		i, err := ss.Route(ctx, id.QueryID)
		if err != nil {
			return nil, false, err
		}
		h, err := ss.EpochHeld(ctx, since, id.QueryID, id.EpochID, i)
		if err != nil {
			return nil, false, err
		}
		if done, err := decide(h); err != nil || done {
			return nil, done, err
		}
		w, err := ss.writer(ctx, i)
		if err != nil {
			return nil, false, err
		}
		if done, err := held(w); err != nil || done {
			return nil, done, err
		}
		if attempt == 0 && m != nil && !arrowschema.EqualIgnoringFieldIDs(w.Schema(), m.ArrowSchema()) {
			ss.dropWriter(i, w) // as in Put: reopen to store the rows in the new schema
			continue
		}
		if err := ss.holdCeiling(ctx, m, i, w); err != nil {
			return nil, false, err
		}
		st := &ShardStream{ss: ss, i: i, m: m, id: id, since: since, decide: decide, held: held, w: w}
		if !w.CanStream() {
			return st, false, nil
		}
		st.ps, err = w.StreamPut(ctx, id)
		switch {
		case err == nil:
			return st, false, nil
		case errors.Is(err, epochid.ErrCommitted):
			return nil, true, nil
		case (errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed)) && reroutes < 2 && ss.unroute(i):
			// Another server claimed the shard this set owned: route again, as PutUnkeyed does.
			reroutes++
			ss.dropWriter(i, w)
			continue
		case (errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed)) && attempt == 0:
			ss.dropWriter(i, w)
			ss.own.noteFenced(i)
			continue
		default:
			return nil, false, err
		}
	}
}

// Append adds batches to the put (retained, not copied). After an error the stream is ended.
func (st *ShardStream) Append(batches ...arrow.RecordBatch) error {
	for _, b := range batches {
		b.Retain()
		st.batches = append(st.batches, b)
	}
	if st.ps != nil {
		if err := st.ps.Append(batches...); err != nil {
			st.Abort()
			return err
		}
	}
	return nil
}

// Commit makes the put durable; it reports true when the shard turned out to hold the epoch
// already (nothing of this put counts), as ShardSet.Put does.
func (st *ShardStream) Commit(ctx context.Context) (bool, error) {
	if st.ended {
		return false, fmt.Errorf("memwal: commit of an ended stream")
	}
	st.ended = true
	defer arrowschema.ReleaseBatches(st.batches)
	if st.ps == nil {
		return st.ss.PutUnkeyed(ctx, st.since, st.m, st.id, st.batches, st.decide, st.held)
	}
	_, err := st.ps.Commit()
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, epochid.ErrCommitted):
		return true, nil
	case errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed):
		// The stream's records never count; the batches are still at hand: put them again,
		// routed afresh (another server may own the shard now, and may hold the epoch: PutUnkeyed
		// looks at every shard first).
		st.ss.opts.Shard.Logger.Warn("memwal writer fenced or closed during a streamed put; putting it again", "table", st.ss.table.Name(), "shard", st.w.ShardID(), "err", err)
		st.ss.unroute(st.i)
		st.ss.dropWriter(st.i, st.w)
		return st.ss.PutUnkeyed(ctx, time.Now(), st.m, st.id, st.batches, st.decide, st.held)
	default:
		return false, err
	}
}

// Abort ends the stream with nothing acknowledged. It is a no-op after Commit or Abort.
func (st *ShardStream) Abort() {
	if st.ended {
		return
	}
	st.ended = true
	if st.ps != nil {
		st.ps.Abort()
	}
	arrowschema.ReleaseBatches(st.batches)
}
