package memwal

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/objstore"
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
}

// Snapshot implements ShardReader for the resident writer. It fails with ErrFenced when another
// writer has claimed the shard: the memtable would miss what the new owner acknowledged and hold
// rows the new owner may have flushed and folded (read the shard from storage instead).
func (s *Shard) Snapshot(ctx context.Context, mergedWatermark uint64) (*Snapshot, error) {
	if err := s.ms.confirmEpoch(ctx, s.epoch); err != nil {
		if errors.Is(err, ErrFenced) {
			s.fail(err)
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("memwal shard %s: %w", s.id, ErrClosed)
	}
	sn := &Snapshot{shard: s.id, store: s.table.Store(), paths: s.paths, schema: s.schema, alloc: s.opts.Allocator,
		gens: s.manifest.GenerationsAbove(mergedWatermark)}
	for _, mt := range s.sealed {
		sn.mem = append(sn.mem, mt.batches()...)
	}
	sn.mem = append(sn.mem, s.active.batches()...)
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
// call. A generation that compaction has merged and deleted since the snapshot was taken fails
// with an error wrapping objstore.ErrNotFound; read again against a newer base version.
func (sn *Snapshot) Read(ctx context.Context, fn func(arrow.RecordBatch) error) error {
	for _, g := range sn.gens {
		if err := readGeneration(ctx, sn.store, sn.paths, g, sn.schema, sn.alloc, fn); err != nil {
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
		releaseAll(out)
		return nil, err
	}
	return out, nil
}

// Release drops the snapshot's memtable references.
func (sn *Snapshot) Release() {
	releaseAll(sn.mem)
	sn.mem = nil
}

// StoredShard reads a shard from storage without claiming it, for shards whose writer lives in
// another process (or nowhere). It sees what that writer acknowledged: the generations its
// manifest lists and the WAL entries after replay_after.
type StoredShard struct {
	table *engine.Table
	id    string
	ms    *ManifestStore
	wal   *walLog
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
		wal: &walLog{store: tbl.Store(), shard: shardID, paths: paths}}
}

// ShardID implements ShardReader.
func (ss *StoredShard) ShardID() string { return ss.id }

// Manifest returns the shard's newest manifest (an error wrapping ErrNoManifest when it has none).
func (ss *StoredShard) Manifest(ctx context.Context) (*ShardManifest, error) {
	return ss.ms.ReadLatest(ctx)
}

// Stats describes the shard from storage: its manifest and the WAL entries not yet flushed
// (MemtableRows counts their rows). A shard with no manifest has zero stats.
func (ss *StoredShard) Stats(ctx context.Context) (ShardStats, error) {
	st := ShardStats{Shard: ss.id}
	m, err := ss.ms.ReadLatest(ctx)
	if errors.Is(err, ErrNoManifest) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.WriterEpoch, st.ManifestVersion, st.Generations = m.WriterEpoch, m.Version, len(m.FlushedGenerations)
	st.ReplayAfterWALEntryPosition, st.NextGeneration = m.ReplayAfterWALEntryPosition, m.NextGeneration
	for _, g := range m.FlushedGenerations {
		st.GenerationRows += g.Rows
	}
	positions, err := ss.wal.list(ctx, m.ReplayAfterWALEntryPosition)
	if err != nil {
		return st, err
	}
	st.NextWALPosition = m.ReplayAfterWALEntryPosition + 1
	for _, pos := range positions {
		e, err := ss.wal.read(ctx, pos, nil, ss.opts.Allocator)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // flushed and deleted meanwhile
		}
		if err != nil {
			return st, err
		}
		for _, p := range e.Puts {
			st.MemtableRows += p.Rows
		}
		e.release()
		st.NextWALPosition = pos + 1
	}
	return st, nil
}

// storedSnapshotAttempts bounds how often a stored snapshot re-reads when a flush moves
// replay_after under it.
const storedSnapshotAttempts = 8

// Snapshot implements ShardReader. It reads the manifest, then the WAL entries after its
// replay_after, then the manifest again: if a flush moved replay_after meanwhile (and may have
// deleted entries it had listed), it starts over.
func (ss *StoredShard) Snapshot(ctx context.Context, mergedWatermark uint64) (*Snapshot, error) {
	base, err := ss.table.Latest(ctx)
	if err != nil {
		return nil, err
	}
	schema := base.ArrowSchema()
	for attempt := 0; attempt < storedSnapshotAttempts; attempt++ {
		m, err := ss.ms.ReadLatest(ctx)
		if errors.Is(err, ErrNoManifest) {
			return &Snapshot{shard: ss.id, store: ss.table.Store(), paths: ss.paths, schema: schema, alloc: ss.opts.Allocator}, nil
		}
		if err != nil {
			return nil, err
		}
		mem, err := ss.readWAL(ctx, m, schema)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // an entry was deleted under us by a flush
		}
		if err != nil {
			return nil, err
		}
		again, err := ss.ms.ReadLatest(ctx)
		if err != nil {
			releaseAll(mem)
			return nil, err
		}
		if again.ReplayAfterWALEntryPosition != m.ReplayAfterWALEntryPosition {
			releaseAll(mem)
			continue
		}
		return &Snapshot{shard: ss.id, store: ss.table.Store(), paths: ss.paths, schema: schema, alloc: ss.opts.Allocator,
			gens: again.GenerationsAbove(mergedWatermark), mem: mem}, nil
	}
	return nil, fmt.Errorf("memwal shard %s: snapshot kept racing flushes (%d attempts)", ss.id, storedSnapshotAttempts)
}

// readWAL reads the batches of the entries after m's replay_after, skipping repeated epochs the
// way replay does.
func (ss *StoredShard) readWAL(ctx context.Context, m *ShardManifest, schema *arrow.Schema) ([]arrow.RecordBatch, error) {
	positions, err := ss.wal.list(ctx, m.ReplayAfterWALEntryPosition)
	if err != nil {
		return nil, err
	}
	var out []arrow.RecordBatch
	seen := make(map[EpochKey]bool)
	for _, pos := range positions {
		e, err := ss.wal.read(ctx, pos, schema, ss.opts.Allocator)
		if err != nil {
			releaseAll(out)
			return nil, err
		}
		if e.Fence {
			continue
		}
		for _, p := range e.Puts {
			if p.Epoch != nil {
				k := EpochKey{p.Epoch.QueryID, p.Epoch.EpochID}
				if wm, ok := m.Queries[k.QueryID]; seen[k] || (ok && k.EpochID <= wm.Epoch) {
					releasePut(p)
					continue
				}
				seen[k] = true
			}
			out = append(out, p.Batches...)
		}
	}
	return out, nil
}

func releaseAll(bs []arrow.RecordBatch) {
	for _, b := range bs {
		if b != nil {
			b.Release()
		}
	}
}

func newRecordBatch(schema *arrow.Schema, cols []arrow.Array, rows int64) arrow.RecordBatch {
	return array.NewRecordBatch(schema, cols, rows)
}
