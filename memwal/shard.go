package memwal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Shard is the writer of one MemWAL shard: it owns the shard under a writer epoch, groups puts
// into WAL entries, keeps the memtable and flushes it to generations in the background.
//
// A Shard is safe for concurrent use. Once it fails (fenced, or a WAL write whose outcome is
// unknown) every later put returns the same error; Close it and open the shard again.
type Shard struct {
	table  *engine.Table
	id     string
	schema *arrow.Schema
	pk     []string // the table's primary key: its columns must be non-null
	opts   Options
	paths  shardPaths
	ms     *ManifestStore
	wal    *wal.Log
	epoch  uint64

	// qmu guards the put queue, which the committer goroutine drains.
	qmu     sync.Mutex
	queue   []*putRequest
	qclosed bool          // the committer is gone: nothing may be queued
	qsignal chan struct{} // capacity 1: the queue is not empty
	// commitMu is held by whoever writes groups: the committer goroutine, or a put that found
	// the WAL idle and writes its group itself (Put), saving two goroutine hand-offs per put.
	commitMu sync.Mutex

	mu          sync.Mutex
	manifest    *ShardManifest // newest manifest this writer committed or claimed
	active      *memtable
	sealed      []*memtable // oldest first; flushed in this order
	nextPos     uint64      // position of the next WAL entry
	nextGen     uint64      // number of the next flushed generation
	replayAfter uint64      // manifest's replay_after as this writer last committed it
	identities  map[EpochKey]heldEpoch
	unflushed   int64 // bytes in memtables not yet in a generation
	queued      int64 // bytes of puts admitted but not yet in the memtable
	progress    chan struct{}
	failed      error // sticky: set when the writer can no longer acknowledge puts
	closed      bool

	flushSignal chan struct{} // capacity 1: a memtable was sealed
	stop        chan struct{}
	wg          sync.WaitGroup
}

// EpochKey identifies a streaming epoch inside a shard.
type EpochKey struct {
	QueryID string
	EpochID int64
}

// heldEpoch is where a shard's memtable holds an epoch: the WAL entry, and the rows its put has.
type heldEpoch struct {
	pos  uint64
	rows int64
}

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

// OpenShard claims shard shardID of tbl for this process and replays its WAL: the writer epoch is
// bumped (fencing any other writer), a fence entry is left at the WAL tip, and every entry after
// replay_after_wal_entry_position is read back into the memtable. The shard's schema is the
// table's current schema. Close the Shard when done.
//
// NB: opening fences a writer of the same shard in this process too; route a table's shard
// through one Shard.
func OpenShard(ctx context.Context, tbl *engine.Table, shardID string, opts *Options) (*Shard, error) {
	if _, err := uuid.Parse(shardID); err != nil {
		return nil, fmt.Errorf("memwal: shard id %q is not a UUID", shardID)
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	base, err := tbl.Latest(ctx)
	if err != nil {
		return nil, err
	}
	// Every manifest version the writer creates is fenced by the drop of the incarnation it
	// opened: a writer of a dropped table must not leave shard state to a table created again
	// under the name.
	tableID := base.TableID
	o.dropFence = func(ctx context.Context) error {
		return engine.CheckNotDropped(ctx, tbl.Store(), tbl.Name(), tableID)
	}
	paths := newShardPaths(tbl.Name(), shardID)
	s := &Shard{
		table: tbl, id: shardID, schema: base.ArrowSchema(), pk: base.PrimaryKey, opts: o, paths: paths,
		ms: NewManifestStore(tbl.Store(), tbl.Name(), shardID, &o),
		wal: wal.NewLog(wal.Config{Store: tbl.Store(), Shard: shardID, Prefix: paths.walPrefix(), SegmentBytes: o.WALSegmentBytes,
			OnSegmentSync: func(d time.Duration) { recordWALSync("local", d) }}),
		qsignal:     make(chan struct{}, 1),
		active:      &memtable{},
		identities:  make(map[EpochKey]heldEpoch),
		progress:    make(chan struct{}),
		flushSignal: make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	m, fence, err := s.ms.claimEpoch(ctx, s.wal)
	if err != nil {
		s.wal.Close()
		return nil, fmt.Errorf("memwal shard %s: claim: %w", shardID, err)
	}
	s.manifest, s.epoch = m, m.WriterEpoch
	s.nextPos, s.nextGen, s.replayAfter = fence+1, m.NextGeneration, m.ReplayAfterWALEntryPosition
	err = s.replay(ctx, fence)
	s.wal.Forget()
	if err != nil {
		s.wal.Close()
		s.releaseMemtables()
		return nil, err
	}
	s.wg.Add(2)
	go s.runCommitter()
	go s.runFlusher()
	return s, nil
}

// replay reads the entries between replay_after and the fence into the memtable. Entries of
// older epochs are acknowledged puts of earlier writers; nothing of theirs lies past the fence.
func (s *Shard) replay(ctx context.Context, fence uint64) error {
	positions, err := s.wal.List(ctx, s.replayAfter)
	if err != nil {
		return err
	}
	for _, pos := range positions {
		if pos >= fence {
			break
		}
		e, err := s.wal.Read(ctx, pos, s.schema, s.opts.Allocator)
		if err != nil {
			return fmt.Errorf("memwal shard %s: replay: %w", s.id, err)
		}
		if e.Fence {
			continue
		}
		puts := e.Puts[:0]
		for _, p := range e.Puts {
			if p.Epoch != nil {
				if _, dup := s.epochLocationLocked(p.Epoch.QueryID, p.Epoch.EpochID); dup {
					// Only a writer racing its own fencing can leave a second copy; keep the first.
					s.opts.Logger.Warn("memwal: replay skips a repeated epoch", "shard", s.id, "query_id", p.Epoch.QueryID,
						"epoch_id", p.Epoch.EpochID, "position", pos)
					for _, b := range p.Batches {
						b.Release()
					}
					continue
				}
				s.identities[EpochKey{p.Epoch.QueryID, p.Epoch.EpochID}] = heldEpoch{pos: pos, rows: p.Rows}
			}
			puts = append(puts, p)
		}
		s.addEntryLocked(pos, puts, wal.BatchBytes(puts))
	}
	return nil
}

// ShardID returns the shard id (and implements ShardReader).
func (s *Shard) ShardID() string { return s.id }

// WriterEpoch returns the epoch this writer claimed.
func (s *Shard) WriterEpoch() uint64 { return s.epoch }

// Schema returns the schema rows are stored in (the table's schema when the shard was opened).
func (s *Shard) Schema() *arrow.Schema { return s.schema }

// Err returns the error that stopped the writer, or nil while it works.
func (s *Shard) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
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
// identity it already holds fails with an *engine.EpochCommittedError (engine.ErrEpochCommitted) saying where.
// Send every row an epoch has for this shard in one put.
//
// Batches must fit the shard's schema (columns matched by name); they are retained, not copied.
// Put fails with ErrFenced when another writer claimed the shard, ErrBackpressure when the
// unflushed backlog stays over its limit, ErrClosed after Close. When ctx ends first the put's
// outcome is unknown.
func (s *Shard) Put(ctx context.Context, epoch *engine.EpochIdentity, batches ...arrow.RecordBatch) (PutResult, error) {
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
func (s *Shard) conform(epoch *engine.EpochIdentity, batches []arrow.RecordBatch) (wal.Put, error) {
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
	seen := make(map[EpochKey]bool)
	var rejected []func()
	for _, r := range group {
		switch {
		case failed != nil:
			rejected = append(rejected, func() { releasePut(r.put); finish(r, 0, failed) })
		case r.ctx.Err() != nil:
			rejected = append(rejected, func() { releasePut(r.put); finish(r, 0, r.ctx.Err()) })
		case r.put.Epoch != nil:
			k := EpochKey{r.put.Epoch.QueryID, r.put.Epoch.EpochID}
			if loc, dup := s.epochLocationLocked(k.QueryID, k.EpochID); dup {
				e := &engine.EpochCommittedError{Shard: s.id, QueryID: k.QueryID, EpochID: k.EpochID, Location: loc}
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
		for i, r := range in {
			puts[i] = r.put
			if e := r.put.Epoch; e != nil {
				s.identities[EpochKey{e.QueryID, e.EpochID}] = heldEpoch{pos: pos, rows: r.put.Rows}
			}
		}
		s.addEntryLocked(pos, puts, wal.BatchBytes(puts))
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
		finish(r, 0, &engine.EpochCommittedError{Shard: s.id, QueryID: e.QueryID, EpochID: e.EpochID, Location: EpochLocation{Position: pos}})
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

func (s *Shard) tbl() *engine.Table { return s.table }

// fail makes err sticky: every later put returns it.
func (s *Shard) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = err
		s.opts.Logger.Warn("memwal: shard writer stopped", "shard", s.id, "writer_epoch", s.epoch, "err", err)
	}
	return s.failed
}

// addEntryLocked adds a durable entry to the active memtable and seals it at a threshold.
//
// REQUIRES: s.mu held.
func (s *Shard) addEntryLocked(pos uint64, puts []wal.Put, bytes int64) {
	s.active.add(pos, puts, bytes)
	s.unflushed += bytes
	if s.active.rows >= s.opts.MemtableMaxRows || s.active.bytes >= s.opts.MemtableMaxBytes {
		s.sealLocked()
	}
}

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

// EpochLocation says where a shard holds a streaming epoch.
type EpochLocation struct {
	// Position of the WAL entry holding the epoch, while it is not yet in a generation.
	Position uint64
	// Generation that raised the query's watermark to WatermarkEpoch, when the answer comes from
	// the watermark (FromWatermark): the epoch is at or below the highest epoch of the query
	// that reached a flushed generation.
	Generation     uint64
	WatermarkEpoch int64
	FromWatermark  bool
	// Exact: the watermark names this very epoch (its Epoch or PrevEpoch, QueryWatermark), so the
	// shard holds it for certain; otherwise an answer from the watermark only says the epoch is
	// below the query's flushed epochs.
	Exact bool
	// Rows is the number of rows the epoch's put in this shard holds, when HasRows: known while
	// the put is in a WAL entry this writer holds in its memtable (not yet flushed); a flushed
	// epoch, or one read from another server's shard, has no count.
	Rows    int64
	HasRows bool
}

func (l EpochLocation) String() string {
	if l.FromWatermark {
		return fmt.Sprintf("at or below the query's flushed watermark epoch %d, generation %d", l.WatermarkEpoch, l.Generation)
	}
	return fmt.Sprintf("wal entry %d", l.Position)
}

// EpochCommitted reports whether the shard holds epoch epochID of query queryID: in a WAL entry
// not yet flushed (exactly), or at or below the query's watermark of flushed epochs. The answer
// holds across restarts and needs no base-table transaction per epoch. An epoch below the
// watermark that this shard never held also answers true (Location.FromWatermark,
// WatermarkEpoch > epochID): streaming epochs of a query only grow, so the caller treats it as
// a replay or a reused query id.
func (s *Shard) EpochCommitted(queryID string, epochID int64) (bool, EpochLocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	loc, ok := s.epochLocationLocked(queryID, epochID)
	return ok, loc
}

func (s *Shard) epochLocationLocked(queryID string, epochID int64) (EpochLocation, bool) {
	if h, ok := s.identities[EpochKey{queryID, epochID}]; ok {
		return EpochLocation{Position: h.pos, Rows: h.rows, HasRows: true}, true
	}
	if wm, ok := s.manifest.queryWatermark(queryID); ok {
		return wm.location(epochID)
	}
	return EpochLocation{}, false
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

// Close stops the writer. Puts still queued fail with ErrClosed; a group being written finishes.
// The memtable is not flushed: its rows are in the WAL and the next writer replays them.
func (s *Shard) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.commitMu.Lock() // a put writing its group finishes it
	defer s.commitMu.Unlock()
	s.failQueued(fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed))
	s.wal.Close()
	s.releaseMemtables()
	s.signalProgress()
	return nil
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

// ShardStats describes a shard for table_stats.
type ShardStats struct {
	Shard                       string
	WriterEpoch                 uint64
	ManifestVersion             uint64
	Generations                 int // flushed, not yet drained by a fold
	GenerationRows              int64
	MemtableRows                int64 // acknowledged, not yet in a generation
	SealedMemtables             int
	UnflushedBytes              int64
	NextWALPosition             uint64
	ReplayAfterWALEntryPosition uint64
	NextGeneration              uint64
	Failed                      string
	// OldestGeneration is when the oldest row of the flushed generations was acknowledged, and
	// OldestUnfolded when the oldest row not yet folded into the base table was (generations and
	// memtables): zero when there is none. Folds by age (ShardSetOptions.Freshness) and the
	// freshness lag (rows Iceberg readers cannot see yet) read them.
	OldestGeneration, OldestUnfolded time.Time
	// Quarantined are the generations a fold set aside because their data cannot be appended
	// (fold_quarantine.go): acknowledged rows that are not in the table.
	Quarantined []QuarantinedGeneration
}

// Stats returns the writer's view of the shard. Generations reflect the newest manifest the
// writer has read, which a fold's drain may have changed since.
func (s *Shard) Stats() ShardStats {
	latest, _ := s.ms.cached()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.manifest
	if latest != nil && latest.Version > m.Version {
		m = latest
	}
	st := ShardStats{Shard: s.id, WriterEpoch: s.epoch, ManifestVersion: m.Version,
		Generations: len(m.FlushedGenerations), UnflushedBytes: s.unflushed, NextWALPosition: s.nextPos,
		ReplayAfterWALEntryPosition: s.replayAfter, NextGeneration: s.nextGen, SealedMemtables: len(s.sealed),
		Quarantined: m.Quarantined}
	older := func(cur, t time.Time) time.Time {
		if cur.IsZero() || t.Before(cur) {
			return t
		}
		return cur
	}
	for _, g := range m.FlushedGenerations {
		st.GenerationRows += g.Rows
		st.OldestGeneration = older(st.OldestGeneration, g.firstRowAt())
	}
	st.OldestUnfolded = st.OldestGeneration
	st.MemtableRows = s.active.rows
	for _, mt := range s.sealed {
		st.MemtableRows += mt.rows
		if !mt.empty() {
			st.OldestUnfolded = older(st.OldestUnfolded, mt.created)
		}
	}
	if !s.active.empty() {
		st.OldestUnfolded = older(st.OldestUnfolded, s.active.created)
	}
	if s.failed != nil {
		st.Failed = s.failed.Error()
	}
	return st
}

func releasePut(p wal.Put) {
	for _, b := range p.Batches {
		b.Release()
	}
}
