package memwal

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/backoff"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// ShardReader gives a consistent view of one shard's rows that the base table does not hold yet.
// *Shard (the resident writer, whose memtable is in memory) and *StoredShard (any shard, read
// from storage) implement it.
type ShardReader interface {
	ShardID() string
	// Snapshot captures the flushed generations above mergedWatermark (the base manifest's
	// MemWALMerged entry for the shard) and the memtable. Release it when done.
	Snapshot(ctx context.Context, mergedWatermark uint64) (*Snapshot, error)
}

// Snapshot is one shard's unmerged rows at a point in time: flushed generations, read from
// storage on demand, and memtable batches, held in memory. Rows come oldest first (generations
// ascending, then the memtable in WAL order), which is the order "newest wins" resolves in.
type Snapshot struct {
	shard  string
	store  objstore.Store
	paths  shardPaths
	schema *arrow.Schema
	alloc  memory.Allocator
	gens   []FlushedGeneration
	mem    []arrow.RecordBatch // retained
	// drained: the manifest the snapshot was taken from no longer lists a generation above the
	// caller's merged watermark that the shard flushed. A fold merged it into a base
	// version newer than the caller's and drained it, so the caller's base version misses its
	// rows: read again from a newer base version.
	drained bool
}

// Snapshot implements ShardReader for the resident writer. It fails with ErrFenced when another
// writer has claimed the shard: the memtable would miss what the new owner acknowledged and hold
// rows the new owner may have flushed and folded (read the shard from storage instead).
func (s *Shard) Snapshot(ctx context.Context, mergedWatermark uint64) (*Snapshot, error) {
	return s.snapshot(ctx, mergedWatermark, readCut{})
}

// snapshot is Snapshot less the puts a read's cut hides (epochGate). It fails with an
// *epochInFlightError when the shard holds an epoch in flight at the cut in a flushed generation:
// a part put before the epoch ended, or an earlier copy of it, cannot be left out of it, and
// must not be read without the rest of its epoch.
func (s *Shard) snapshot(ctx context.Context, mergedWatermark uint64, cut readCut) (*Snapshot, error) {
	if err := s.confirmWriter(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
	}
	for k := range cut.epochs {
		// An epoch in flight the shard holds outside its memtable (the identities are the
		// memtable's epochs) was flushed: its rows cannot be left out of the generation.
		if _, inMemtable := s.identities[k]; !inMemtable {
			if _, held := s.epochLocationLocked(k.QueryID, k.EpochID); held {
				return nil, &epochInFlightError{shard: s.id, key: k}
			}
		}
	}
	sn := &Snapshot{shard: s.id, store: s.table.Store(), paths: s.paths, schema: s.schema, alloc: s.opts.Allocator,
		gens: s.manifest.GenerationsAbove(mergedWatermark), drained: s.manifest.drainedAbove(mergedWatermark)}
	for _, mt := range s.sealed {
		sn.mem = append(sn.mem, mt.batchesHiding(cut)...)
	}
	sn.mem = append(sn.mem, s.active.batchesHiding(cut)...)
	for _, b := range sn.mem {
		b.Retain()
	}
	return sn, nil
}

// Shard returns the shard id.
func (sn *Snapshot) Shard() string { return sn.shard }

// Generations returns the flushed generations the snapshot reads, ascending.
func (sn *Snapshot) Generations() []FlushedGeneration { return sn.gens }

// MemtableRows returns the number of rows the snapshot holds in memory.
func (sn *Snapshot) MemtableRows() int64 {
	var n int64
	for _, b := range sn.mem {
		n += b.NumRows()
	}
	return n
}

// Read calls fn with every batch of the snapshot, oldest first. A batch is valid only during its
// call. A generation that a fold has merged and deleted since the snapshot was taken fails
// with an error wrapping objstore.ErrNotFound; read again against a newer base version.
func (sn *Snapshot) Read(ctx context.Context, fn func(arrow.RecordBatch) error) error {
	for _, g := range sn.gens {
		if err := readGeneration(ctx, sn.store, sn.paths, g, sn.schema, sn.alloc, false, fn); err != nil {
			return fmt.Errorf("memwal shard %s: %w", sn.shard, err)
		}
	}
	for _, b := range sn.mem {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// ReadAll returns every batch of the snapshot, oldest first; the caller releases them.
func (sn *Snapshot) ReadAll(ctx context.Context) ([]arrow.RecordBatch, error) {
	var out []arrow.RecordBatch
	err := sn.Read(ctx, func(b arrow.RecordBatch) error {
		b.Retain()
		out = append(out, b)
		return nil
	})
	if err != nil {
		arrowschema.ReleaseBatches(out)
		return nil, err
	}
	return out, nil
}

// Release drops the snapshot's memtable references.
func (sn *Snapshot) Release() {
	arrowschema.ReleaseBatches(sn.mem)
	sn.mem = nil
}

// StoredShard is the read-only view of a shard: it reads the shard from storage and never claims
// it, writes nothing and fences no one, so any process may read any shard, whoever writes it. It
// sees everything the shard's writers acknowledged (acknowledged means durable in the WAL): the
// generations its manifest lists and the WAL entries after replay_after, including entries
// written after this view's manifest version by a writer that claimed the shard meanwhile. It
// answers what the shard's next writer would hold after replaying it.
type StoredShard struct {
	table *engine.Table
	id    string
	ms    *ManifestStore
	wal   *wal.Log
	paths shardPaths
	opts  Options
}

// NewStoredShard returns a reader of shard shardID of tbl.
func NewStoredShard(tbl *engine.Table, shardID string, opts *Options) *StoredShard {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	paths := newShardPaths(tbl.Name(), shardID)
	return &StoredShard{table: tbl, id: shardID, paths: paths, opts: o,
		ms:  NewManifestStore(tbl.Store(), tbl.Name(), shardID, &o),
		wal: wal.NewLog(wal.Config{Store: tbl.Store(), Shard: shardID, Prefix: paths.walPrefix()})}
}

// ShardID implements ShardReader.
func (ss *StoredShard) ShardID() string { return ss.id }

// Manifest returns the shard's newest manifest (an error wrapping ErrNoManifest when it has none).
func (ss *StoredShard) Manifest(ctx context.Context) (*ShardManifest, error) {
	return ss.ms.ReadLatest(ctx)
}

// Stats describes the shard from storage: its manifest and the WAL entries not yet flushed
// (MemtableRows counts the rows a replay would hold; UnflushedBytes and SealedMemtables, which
// only a writer's memory has, are 0). A shard with no manifest has zero stats. It reads entry
// headers only, never their rows.
func (ss *StoredShard) Stats(ctx context.Context) (ShardStats, error) {
	st := ShardStats{Shard: ss.id}
	v, err := ss.view(ctx, nil)
	if err != nil || v.manifest == nil {
		return st, err
	}
	m := v.manifest
	st.WriterEpoch, st.ManifestVersion, st.Generations = m.WriterEpoch, m.Version, len(m.FlushedGenerations)
	st.Quarantined = m.Quarantined
	st.ReplayAfterWALEntryPosition, st.NextGeneration = m.ReplayAfterWALEntryPosition, m.NextGeneration
	for _, g := range m.FlushedGenerations {
		st.GenerationRows += g.Rows
		if t := g.firstRowAt(); st.OldestGeneration.IsZero() || t.Before(st.OldestGeneration) {
			st.OldestGeneration = t
		}
	}
	st.OldestUnfolded = st.OldestGeneration // the WAL's entries carry no time
	st.NextWALPosition = m.ReplayAfterWALEntryPosition + 1
	if n := len(v.entries); n > 0 {
		st.NextWALPosition = v.entries[n-1].Position + 1
	}
	v.replayed(func(_ uint64, p wal.Put) { st.MemtableRows += p.Rows })
	return st, nil
}

// EpochCommitted reports, from storage, whether the shard holds epoch epochID of query queryID,
// with the answer and location the shard's writer (Shard.EpochCommitted) would give once it had
// replayed the shard now: a WAL entry not yet flushed that a replay keeps, else the query's
// watermark of flushed epochs. It reads entry headers only, never their rows.
func (ss *StoredShard) EpochCommitted(ctx context.Context, queryID string, epochID int64) (bool, EpochLocation, error) {
	v, err := ss.view(ctx, nil)
	if err != nil || v.manifest == nil {
		return false, EpochLocation{}, err
	}
	found := uint64(0)
	v.replayed(func(pos uint64, p wal.Put) {
		if found == 0 && p.Epoch != nil && p.Epoch.QueryID == queryID && p.Epoch.EpochID == epochID {
			found = pos
		}
	})
	if found != 0 {
		return true, EpochLocation{Position: found}, nil
	}
	if wm, ok := v.manifest.queryWatermark(queryID); ok {
		loc, held := wm.location(epochID)
		return held, loc, nil
	}
	return false, EpochLocation{}, nil
}

// Snapshot implements ShardReader from the read-only view: the generations the view's manifest
// lists above mergedWatermark, and the rows of the WAL entries after its replay_after that a
// replay keeps. A read's cut hides nothing here: the shards a set reads from storage are written
// by other processes (or by a writer of this one that another process fenced), whose epochs are
// visible part by part as each becomes durable (epochGate).
func (ss *StoredShard) Snapshot(ctx context.Context, mergedWatermark uint64) (*Snapshot, error) {
	base, err := ss.table.Latest(ctx)
	if err != nil {
		return nil, err
	}
	schema := base.ArrowSchema()
	v, err := ss.view(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer v.release()
	sn := &Snapshot{shard: ss.id, store: ss.table.Store(), paths: ss.paths, schema: schema, alloc: ss.opts.Allocator}
	if v.manifest == nil {
		return sn, nil
	}
	sn.gens, sn.drained = v.manifest.GenerationsAbove(mergedWatermark), v.manifest.drainedAbove(mergedWatermark)
	v.replayed(func(_ uint64, p wal.Put) {
		for _, b := range p.Batches {
			b.Retain()
			sn.mem = append(sn.mem, b)
		}
	})
	return sn, nil
}

// storedViewAttempts bounds how often the read-only view starts over when a flush moves the
// shard's replay_after under it.
const storedViewAttempts = 8

// storedView is one consistent read of a shard from storage: a manifest version and the WAL
// entries after its replay_after, ascending, fence entries included. manifest is nil when the
// shard has none (then it has no WAL either: a claim creates the manifest before its fence).
type storedView struct {
	manifest *ShardManifest
	entries  []*wal.Entry
}

// view reads the shard's read-only view: entries decoded whole in schema, or header only (no
// rows) when schema is nil. It writes nothing. Release the view when done.
//
// Consistency with a writer flushing meanwhile (in any process):
//
//  1. read the newest manifest M: its generations hold every acknowledged row at or below its
//     replay_after R; the entries after R hold the rest;
//  2. list the WAL after R and read every entry listed, up to the tip;
//  3. read the newest manifest again, M2.
//
// A flush commits a manifest that lists its generation, raises NextGeneration and advances
// replay_after past the entries it covers, and only then deletes those entries. So when M2 has
// M's replay_after and NextGeneration, no flush committed between 1 and 3: none of the entries
// read in 2 is in a generation M does not list, and none was deleted, so M's generations plus
// those entries hold each acknowledged row exactly once. When either moved, or an entry listed in
// 2 is gone when read (deleted by such a flush), a row could be read twice (entry and new
// generation) or missed (entry deleted, generation not in M): start over. Claims between 1 and 3
// bump only the writer epoch; a new writer's fence is skipped and its entries after it are
// acknowledged puts like any other. Entries written after the listing in 2 are puts concurrent
// with the read. Folds' drains do not move replay_after; the caller that merges with a
// base version checks them (ShardManifest.drainedAbove).
func (ss *StoredShard) view(ctx context.Context, schema *arrow.Schema) (*storedView, error) {
	for attempt := 0; attempt < storedViewAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff.Race.Sleep(ctx, attempt); err != nil {
				return nil, err
			}
		}
		m, err := ss.ms.ReadLatest(ctx)
		if errors.Is(err, ErrNoManifest) {
			return &storedView{}, nil
		}
		if err != nil {
			return nil, err
		}
		v := &storedView{manifest: m}
		err = ss.readEntries(ctx, v, schema)
		if errors.Is(err, objstore.ErrNotFound) {
			v.release()
			continue // step 2 lost an entry to a flush
		}
		if err != nil {
			v.release()
			return nil, err
		}
		again, err := ss.ms.ReadLatest(ctx)
		if err != nil {
			v.release()
			return nil, err
		}
		if again.ReplayAfterWALEntryPosition != m.ReplayAfterWALEntryPosition || again.NextGeneration != m.NextGeneration {
			v.release()
			continue // a flush committed between 1 and 3
		}
		return v, nil
	}
	return nil, fmt.Errorf("memwal shard %s: read-only view kept racing flushes (%d attempts)", ss.id, storedViewAttempts)
}

// readEntries reads the WAL entries after v.manifest's replay_after into v.
func (ss *StoredShard) readEntries(ctx context.Context, v *storedView, schema *arrow.Schema) error {
	positions, err := ss.wal.List(ctx, v.manifest.ReplayAfterWALEntryPosition)
	if err != nil {
		return err
	}
	for _, pos := range positions {
		var e *wal.Entry
		if schema == nil {
			e, err = ss.wal.ReadHeader(ctx, pos)
		} else {
			e, err = ss.wal.Read(ctx, pos, schema, ss.opts.Allocator)
		}
		if err != nil {
			return err
		}
		v.entries = append(v.entries, e)
	}
	return nil
}

// replayed calls fn with every put of the view that a replay keeps, in WAL order, with its entry's
// position: fence entries (data-less, left by claims) are skipped, and so is a put of an epoch
// that an earlier entry holds or that is at or below its query's flushed watermark, as
// Shard.replay does. fn must not keep the put's batches without retaining them.
func (v *storedView) replayed(fn func(pos uint64, p wal.Put)) {
	if v.manifest == nil {
		return
	}
	seen := make(map[epochid.ID]bool)
	for _, e := range v.entries {
		if e.Fence {
			continue
		}
		for _, p := range e.Puts {
			if p.Epoch != nil {
				k := epochid.ID{QueryID: p.Epoch.QueryID, EpochID: p.Epoch.EpochID}
				if wm, ok := v.manifest.queryWatermark(k.QueryID); seen[k] || (ok && k.EpochID <= wm.Epoch) {
					continue
				}
				seen[k] = true
			}
			fn(e.Position, p)
		}
	}
}

// release drops the view's batches.
func (v *storedView) release() {
	for _, e := range v.entries {
		e.Release()
	}
	v.entries = nil
}
