package streaming

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
)

// Epochs on MemWAL tables.
//
// A table created with {"memwal": {"shards": N}} routes append and update epochs (route "auto" or
// "memwal") to its shards: one durable WAL put per shard instead of a base-table transaction per
// epoch. Without a primary key an epoch goes to one shard this server owns (memwal.ShardSet.Route:
// every query of the server shares its group commit), and a replay is recognised in whichever
// shard holds it, since a query may hop servers (memwal.ShardSet.EpochHeld); with one, its rows
// are split by key hash so a key always lands in the same shard, and every shard gets a put
// (identity only when it has no rows, every shard at once: putShards) so "every shard holds the
// epoch" means the epoch is whole.
// Replays are recognised from shard state: the WAL entries not yet flushed carry their epoch
// identity and each shard manifest keeps a per-query watermark of flushed epochs.
//
// Complete epochs take the direct route: they first flush and fold every shard into the base
// table, so the Overwrite replaces their rows too.
//
// Multi-writer (partition) epochs take the route one DoPut of the whole epoch would: each part
// is staged (stage.go: files and a stage record, durable and invisible when its DoPut is
// acknowledged, on whichever server it reached), and commit_epoch lands the parts it names as
// the epoch's one MemWAL put (commitStagedMemWAL). The parts wait in the table's staging area,
// not in a shard's WAL: a part needs no shard, so the tasks of one epoch reaching several
// servers claim and fence nothing, and every WAL entry stays a visible put (a flush, a fold and
// a replay never meet a part that may still be dropped).
//
// The shards themselves (the writers this process claimed, reopening after fencing, folds as a
// maintenance step, the fold ceiling, flush and fold-shard) are the table's memwal.ShardSet;
// what is here are the epoch rules on top of it.

// shardSet returns the table's MemWAL shard set (memwal.ShardSet: the writers this process owns,
// reopening after fencing, fold scheduling) for version m, made on first use. A set of another
// incarnation of the table (m.TableID), or whose shards differ from ids, is closed and replaced.
func (s *Sink) shardSet(t *engine.Table, m *engine.Manifest, ids []string) *memwal.ShardSet {
	s.mu.Lock()
	ss := s.memwal[t.Name()]
	// A set of another incarnation (the table was dropped and created again) holds the dropped
	// table's writers and cached shard manifests: replaced, never used for the new table.
	if ss != nil && ss.TableID() == m.TableID && slices.Equal(ss.IDs(), ids) {
		s.mu.Unlock()
		return ss
	}
	old := ss
	ss = memwal.NewShardSet(t, ids, &memwal.ShardSetOptions{
		Shard: s.opts.MemWAL, FoldGenerations: s.opts.MemWALFoldGenerations, Maintainer: s.maintainerOptions(t),
		Freshness: s.freshness(m), TableID: m.TableID,
	})
	s.memwal[t.Name()] = ss
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return ss
}

// DefaultMemWALFreshness is Options.MemWALFreshness unless set: a MemWAL row is visible to
// Iceberg readers within about this long of its acknowledgement.
const DefaultMemWALFreshness = 5 * time.Second

// freshness is the freshness bound of the MemWAL table at version m: its memwal.ConfigFreshness,
// else the sink's; 0 when off. The shard set takes it when this server first opens the table's
// shards.
func (s *Sink) freshness(m *engine.Manifest) time.Duration {
	return max(memwal.FreshnessOf(m, s.opts.MemWALFreshness), 0)
}

// knownShardSet returns the shard set this sink already made for table t, or nil: no read.
func (s *Sink) knownShardSet(t *engine.Table) *memwal.ShardSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memwal[t.Name()]
}

// tableShards returns table t's shard set as of version m, or nil when it has no MemWAL shards.
func (s *Sink) tableShards(t *engine.Table, m *engine.Manifest) (*memwal.ShardSet, error) {
	ids, err := memwal.TableShardIDs(m)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return s.shardSet(t, m, ids), nil
}

// useMemWAL decides the route of an epoch on a table that has MemWAL shards or not.
func useMemWAL(r *EpochRequest, hasShards bool) (bool, error) {
	switch {
	case r.Route == RouteDirect:
		return false, nil
	case !hasShards && r.Route == RouteMemWAL:
		return false, fmt.Errorf("%w: route \"memwal\" needs a table created with MemWAL shards (\"create\": {\"memwal\": {\"shards\": N}})", ErrUnsupported)
	case !hasShards:
		return false, nil
	case r.Mode == ModeComplete:
		if r.Route == RouteMemWAL {
			return false, fmt.Errorf("%w: complete-mode epochs overwrite the table in one base transaction and cannot take route \"memwal\"; send them with route \"auto\" or \"direct\"", ErrUnsupported)
		}
		return false, nil // an overwrite is one base transaction by nature
	}
	return true, nil
}

// shardPuts splits the batches of an epoch of a keyed table into the puts of each shard by key
// hash: shard index -> batches.
// Every returned batch is retained; release them with releasePuts.
func shardPuts(ctx context.Context, m *engine.Manifest, n int, recs []arrow.RecordBatch) (map[int][]arrow.RecordBatch, error) {
	puts := make(map[int][]arrow.RecordBatch)
	for i := 0; i < n; i++ {
		puts[i] = nil // every shard gets a put, identity only when it has no rows
	}
	for _, rec := range recs {
		conf, err := arrowschema.ConformToTable(m.ArrowSchema(), rec)
		if err != nil {
			releasePuts(puts)
			return nil, err
		}
		parts, err := memwal.PartitionByKey(ctx, conf, m.PrimaryKey, n)
		conf.Release()
		if err != nil {
			releasePuts(puts)
			return nil, err
		}
		for i, p := range parts {
			if p != nil {
				puts[i] = append(puts[i], p)
			}
		}
	}
	return puts, nil
}

func releasePuts(puts map[int][]arrow.RecordBatch) {
	for _, bs := range puts {
		for _, b := range bs {
			b.Release()
		}
	}
}

// writeMemWALEpoch lands an epoch in the table's MemWAL shards, exactly once.
func (s *Sink) writeMemWALEpoch(ctx context.Context, e *epoch, src BatchSource) (Ack, error) {
	t, m, ss := e.table, e.base, e.shards
	recs, rest, err := s.memwalEpochHead(ctx, m, src)
	if err != nil {
		return Ack{}, err
	}
	id := epochid.ID{QueryID: e.QueryID, EpochID: e.EpochID}
	// Registered before its first part is put, ended after its last returned: the set's reads
	// hide the parts put with ctx until then, so its parts in several shards become visible at
	// once, and a delete (ShardSet.Quiesce) holds it whole or not at all.
	ctx, end, err := ss.BeginEpoch(ctx, &id)
	if err != nil {
		arrowschema.ReleaseBatches(recs)
		return Ack{}, err
	}
	defer end()
	if rest != nil { // a large epoch: streamed into its shard as it arrives (memwal_stream.go)
		return s.streamMemWALEpoch(ctx, e, recs, rest)
	}
	defer arrowschema.ReleaseBatches(recs)
	for _, rec := range recs {
		if err := arrowschema.CheckWriteSchema(m.ArrowSchema(), rec.Schema(), m.PrimaryKey); err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", t.Name(), err)
		}
	}
	rows := batchRows(recs)
	if rows == 0 {
		ack := newAck(StatusEmpty, &e.EpochRequest) // an empty append/update epoch writes nothing, as on the direct route
		ack.Route = RouteMemWAL
		return ack, nil
	}
	var found replayHolding // where a replay is held, to compare its rows with this one's
	if len(m.PrimaryKey) == 0 {
		dup, err := ss.PutUnkeyed(ctx, e.arrived, m, &id, recs,
			func(h memwal.EpochHolding) (bool, error) {
				held, err := heldElsewhere(h, &id)
				if held {
					found.note(h.Shard, h.Location, rows)
				}
				return held, err
			},
			func(w *memwal.Shard) (bool, error) { return shardHolds(w, &id, &found, rows) })
		if err != nil {
			return Ack{}, err
		}
		end()
		return s.memwalAck(ctx, e, rows, dup, &found)
	}
	puts, err := shardPuts(ctx, m, len(ss.IDs()), recs)
	if err != nil {
		return Ack{}, err
	}
	defer releasePuts(puts)
	held, err := putShards(ctx, ss, m, &id, puts, &found)
	if err != nil {
		return Ack{}, err
	}
	end() // the epoch is whole in every shard: visible before its ack
	return s.memwalAck(ctx, e, rows, held == len(puts), &found)
}

// shardPutsAtOnce says whether putShards puts an epoch's shards concurrently. A variable only so
// the benchmark can measure the one-shard-after-another baseline.
var shardPutsAtOnce = true

// putShards puts each shard's part of a keyed epoch, every shard at once, and reports how many
// already held the epoch. Each part waits for its own shard's WAL commit (an fdatasync on a local
// disk, an object PUT on S3), so the epoch waits for the slowest shard instead of the sum of them,
// and each shard's group commit carries the parts of every epoch in flight on this server: N
// queries writing N shards share the shards' commits. A part that fails does not stop the
// others: the epoch is not acknowledged, and its retry finds the parts that landed held
// (shardHolds) and puts only the rest, so the retry cannot duplicate. found records the shards
// that held their part already, with the rows of this one's.
func putShards(ctx context.Context, ss *memwal.ShardSet, m *engine.Manifest, id *epochid.ID, puts map[int][]arrow.RecordBatch, found *replayHolding) (int, error) {
	var g errgroup.Group
	if !shardPutsAtOnce {
		g.SetLimit(1)
	}
	var held atomic.Int64
	for i, batches := range puts {
		g.Go(func() error {
			done, err := ss.Put(ctx, i, m, id, batches, func(w *memwal.Shard) (bool, error) { return shardHolds(w, id, found, batchRows(batches)) })
			if done {
				held.Add(1)
			}
			return err
		})
	}
	err := g.Wait()
	return int(held.Load()), err
}

// memwalAck acknowledges an epoch the shards hold: a duplicate (warned when found, where the
// shards held it, says it differs from this replay), or committed (then a fold may be due).
func (s *Sink) memwalAck(ctx context.Context, e *epoch, rows int64, dup bool, found *replayHolding) (Ack, error) {
	if dup {
		ack := newAck(StatusDuplicate, &e.EpochRequest)
		ack.Route = RouteMemWAL
		ack.Warning = found.warning(ctx, s, e.table.Name(), &e.EpochRequest)
		return ack, nil
	}
	// A fold is due: the table's maintenance runs (inline) or is scheduled (background).
	if err := e.shards.AfterPut(ctx, e.base); err != nil {
		return Ack{}, err // inline maintenance with a strict policy; the epoch itself is durable
	}
	s.recordHealthThresholds(ctx, e.table.Name(), e.base)
	ack := newAck(StatusCommitted, &e.EpochRequest)
	ack.Rows, ack.Route = rows, RouteMemWAL
	return ack, nil
}

// shardHolds is the dedupe rule of a shard put: whether writer w's shard already holds epoch id
// (an exact replay: nothing is put; found notes it, with the sent rows the put would have put).
// An epoch below a watermark the shard has flushed for its query, and that the shard does not
// hold, means the query id was reused by a new checkpoint.
func shardHolds(w *memwal.Shard, id *epochid.ID, found *replayHolding, sent int64) (bool, error) {
	ok, loc := w.EpochCommitted(id.QueryID, id.EpochID)
	if ok && loc.FromWatermark && !loc.Exact {
		return false, fmt.Errorf("%w: query %q has flushed epochs up to %d to MemWAL shard %s but epoch %d is not there; use a new query_id for a new checkpoint",
			ErrQueryReused, id.QueryID, loc.WatermarkEpoch, w.ShardID(), id.EpochID)
	}
	if ok {
		found.note(w.ShardID(), loc, sent)
	}
	return ok, nil
}

// heldElsewhere is the dedupe rule of an unkeyed epoch over every shard (h: where they hold it):
// a shard that holds it exactly makes the put a replay; else a shard that has flushed a later
// epoch of the query means the query id was reused by a new checkpoint (shardHolds' rule, across
// shards: a query's epochs may be in any shard).
func heldElsewhere(h memwal.EpochHolding, id *epochid.ID) (bool, error) {
	switch {
	case h.Held:
		return true, nil
	case h.Above:
		return false, fmt.Errorf("%w: query %q has flushed epochs up to %d to MemWAL shard %s but epoch %d is in no shard; use a new query_id for a new checkpoint",
			ErrQueryReused, id.QueryID, h.AboveEpoch, h.AboveShard, id.EpochID)
	}
	return false, nil
}

// MemWALRequest selects shards of a table for flush_memwal and fold_memwal_shard.
type MemWALRequest struct {
	Table          string
	Shard          string
	MinGenerations int
}

// selectShards returns the shard set of req's table and the indexes of the shards req names.
func (s *Sink) selectShards(ctx context.Context, req MemWALRequest) (*memwal.ShardSet, []int, error) {
	t, err := s.Table(ctx, req.Table)
	if err != nil {
		return nil, nil, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, nil, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil {
		return nil, nil, err
	}
	if ss == nil {
		return nil, nil, fmt.Errorf("%w: table %s has no MemWAL shards", ErrUnsupported, t.Name())
	}
	var sel []int
	for i, id := range ss.IDs() {
		if req.Shard == "" || req.Shard == id {
			sel = append(sel, i)
		}
	}
	if len(sel) == 0 {
		return nil, nil, fmt.Errorf("%w: table %s has no MemWAL shard %q (shards: %v)", ErrInvalidRequest, t.Name(), req.Shard, ss.IDs())
	}
	return ss, sel, nil
}

// FlushMemWAL seals and flushes the memtables of the selected shards to generations.
func (s *Sink) FlushMemWAL(ctx context.Context, req MemWALRequest) (int, error) {
	ss, sel, err := s.selectShards(ctx, req)
	if err != nil {
		return 0, err
	}
	if err := ss.Flush(ctx, sel...); err != nil {
		return 0, err
	}
	return len(sel), nil
}

// FoldMemWAL folds the flushed generations of the selected shards into the base table and
// returns how many generations it reclaimed. With MinGenerations, a shard is folded only when it
// has at least that many generations pending.
func (s *Sink) FoldMemWAL(ctx context.Context, req MemWALRequest) (int, error) {
	ss, sel, err := s.selectShards(ctx, req)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, i := range sel {
		n, err := ss.FoldShard(ctx, i, req.MinGenerations)
		total += n
		if err != nil {
			return total, err
		}
	}
	if total > 0 {
		return total, ss.MaintainAfterFold(ctx)
	}
	return total, nil
}

// Scan reads one version of a table: at the latest version, merged with its MemWAL shards
// (primary key: newest row wins); at an older version, the base table as it was.
func (s *Sink) Scan(ctx context.Context, table string, version uint64, columns []string) (array.RecordReader, error) {
	t, err := s.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	o := engine.ScanOptions{Version: version, Columns: columns}
	if version != 0 {
		return t.Scan(ctx, o)
	}
	return s.scanLatest(ctx, t, o)
}

// Close closes the MemWAL writers this sink opened, after its background maintenance (folds
// included) has ended: given 30 seconds, then cancelled. Acknowledged puts are durable in the WAL
// already; the next writer replays them.
func (s *Sink) Close() {
	s.mu.Lock()
	sets := make([]*memwal.ShardSet, 0, len(s.memwal))
	for _, ss := range s.memwal {
		sets = append(sets, ss)
	}
	clear(s.memwal) // a use after Close opens the shards afresh, as it always could
	s.mu.Unlock()
	// The sets first: no flush schedules a run after this, and a fold in flight needs no writer.
	for _, ss := range sets {
		ss.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.opts.Engine.Maintenance.Wait(ctx); err != nil {
		s.opts.Logger.Warn("background maintenance still running at close; cancelling it", "err", err)
		s.stop()
		if err := s.opts.Engine.Maintenance.Wait(context.Background()); err != nil {
			s.opts.Logger.Warn("background maintenance at close", "err", err)
		}
	}
	s.stop()
}
