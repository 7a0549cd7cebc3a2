package memwal

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
)

// Shard is the writer of one MemWAL shard: it owns the shard under a writer epoch, groups puts
// into WAL entries, keeps the memtable and flushes it to generations in the background.
//
// A Shard is safe for concurrent use. Once it fails (fenced, or a WAL write whose outcome is
// unknown) every later put returns the same error; Close it and open the shard again.
type Shard struct {
	// Set by OpenShard and read-only after: the table, the shard, the writer epoch it claimed.
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

	// mu guards the writer's state: every field from manifest to closed. The committer adds a
	// group's entry under it (addEntryLocked), the flusher takes sealed memtables and records
	// their generations under it, and readers snapshot the memtables under it.
	mu          sync.Mutex
	manifest    *ShardManifest // newest manifest this writer committed or claimed
	active      *memtable
	sealed      []*memtable // oldest first; flushed in this order
	nextPos     uint64      // position of the next WAL entry
	nextGen     uint64      // number of the next flushed generation
	replayAfter uint64      // manifest's replay_after as this writer last committed it
	identities  map[epochid.ID]heldEpoch
	unflushed   int64 // bytes in memtables not yet in a generation
	queued      int64 // bytes of puts admitted but not yet in the memtable
	progress    chan struct{}
	failed      error // sticky: set when the writer can no longer acknowledge puts
	closed      bool

	// The flusher's signals and the background goroutines' lifetime; no lock.
	flushSignal chan struct{} // capacity 1: a memtable was sealed
	stop        chan struct{}
	wg          sync.WaitGroup
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
		identities:  make(map[epochid.ID]heldEpoch),
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
				s.identities[epochid.ID{QueryID: p.Epoch.QueryID, EpochID: p.Epoch.EpochID}] = heldEpoch{pos: pos, rows: p.Rows}
			}
			puts = append(puts, p)
		}
		s.addEntryLocked(pos, puts, nil, wal.BatchBytes(puts))
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

// EpochLocation says where a shard holds a streaming epoch.
// heldEpoch is where a shard's memtable holds an epoch: the WAL entry, and the rows its put has.
type heldEpoch struct {
	pos  uint64
	rows int64
}

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
	if h, ok := s.identities[epochid.ID{QueryID: queryID, EpochID: epochID}]; ok {
		return EpochLocation{Position: h.pos, Rows: h.rows, HasRows: true}, true
	}
	if wm, ok := s.manifest.queryWatermark(queryID); ok {
		return wm.location(epochID)
	}
	return EpochLocation{}, false
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
