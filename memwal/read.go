package memwal

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
)

// mergedReadAttempts bounds how often ScanMerged starts over when a fold merges and drains
// generations under it.
const mergedReadAttempts = 8

// errMergedSince: a shard's snapshot misses generations that a fold merged into a base
// version newer than the one being read (Snapshot.drained); read again from the newer version.
var errMergedSince = errors.New("memwal: generations were folded into a newer base version during the read")

// ScanMerged returns one consistent read of a table and its MemWAL shards: the base table at
// o.Version (0: the latest), plus, for every shard, the flushed generations above that version's
// merged-generation watermark for the shard and the memtable. Generations at or below the
// watermark are already in the base table and are skipped, so no row is counted twice even
// between a fold's append and its drain; and a generation the shard no longer lists because a
// fold merged and drained it after that version was read makes the read start over from
// the newer version, so no row is missed either.
//
// Without a primary key the result is the union: base rows, then each shard's rows. With one,
// the newest row of each key wins: a MemWAL row over every base row of its key; within a shard a
// later generation over an earlier one, the memtable over generations, a later WAL position over
// an earlier one. Base rows are returned as the engine holds them (the fold merges a keyed table
// with an upsert, so it adds no duplicates there). Keys are expected to live in one shard (route
// by key); if they do not, a later shard in shards wins.
//
// Reading never claims a shard: a *Shard reader is this process's writer, a *StoredShard the
// read-only view of storage (and a writer another process fenced is read through one).
//
// With o.Filter only the rows for which it is true are returned; "newest wins" is resolved on
// every MemWAL row first, so a newer row that does not match still supersedes an older one.
//
// The MemWAL rows are read into memory; base rows stream. The caller must Release the reader. For a read of an older version, pass no shards: the MemWAL holds
// the current rows, not that version's.
func ScanMerged(ctx context.Context, tbl *engine.Table, shards []ShardReader, o engine.ScanOptions) (array.RecordReader, error) {
	return scanMerged(ctx, tbl, shards, nil, o)
}

// scanMerged is ScanMerged with the cut of gate (nil: none) across the shards.
func scanMerged(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate, o engine.ScanOptions) (array.RecordReader, error) {
	m, mem, err := captureMerged(ctx, tbl, shards, gate, o.Version)
	if err != nil {
		return nil, err
	}
	r, err := newMergedReader(ctx, tbl, m, mem, o)
	if err != nil {
		arrowschema.ReleaseBatches(mem)
		return nil, err
	}
	return r, nil
}

// snapshotShards captures every shard's unmerged rows above m's watermarks, less the puts a
// read's cut hides (epochGate). Release the snapshots (releaseSnapshots).
func snapshotShards(ctx context.Context, m *engine.Manifest, shards []ShardReader, cut readCut) ([]*Snapshot, error) {
	out := make([]*Snapshot, 0, len(shards))
	for _, sh := range shards {
		watermark := m.MemWALMerged[sh.ShardID()]
		var sn *Snapshot
		var err error
		switch r := sh.(type) {
		case *Shard:
			sn, err = r.snapshot(ctx, watermark, cut)
			if errors.Is(err, ErrFenced) {
				// A writer another process fenced: read what the shard holds from storage.
				sn, err = r.storedView().Snapshot(ctx, watermark)
			}
		default:
			sn, err = sh.Snapshot(ctx, watermark)
		}
		if err != nil {
			releaseSnapshots(out)
			return nil, err
		}
		out = append(out, sn)
		if sn.drained {
			releaseSnapshots(out)
			return nil, fmt.Errorf("memwal shard %s above merged generation %d: %w", sh.ShardID(), watermark, errMergedSince)
		}
	}
	return out, nil
}

// readSnapshots reads the rows of the snapshots, shard by shard, each oldest first, and releases
// the snapshots.
func readSnapshots(ctx context.Context, sns []*Snapshot) ([]arrow.RecordBatch, error) {
	defer releaseSnapshots(sns)
	var out []arrow.RecordBatch
	for _, sn := range sns {
		bs, err := sn.ReadAll(ctx)
		if err != nil {
			arrowschema.ReleaseBatches(out)
			return nil, err
		}
		out = append(out, bs...)
	}
	return out, nil
}

func releaseSnapshots(sns []*Snapshot) {
	for _, sn := range sns {
		sn.Release()
	}
}

// EpochCommitted reports whether the shard r reads holds epoch epochID of query queryID, with the
// answer and location of Shard.EpochCommitted. It never claims the shard: a resident writer
// answers from memory, confirming (one manifest probe) that it still owns the shard before it
// answers "no"; a StoredShard, or a writer another process has fenced, answers from the
// read-only view of storage, which sees every epoch any writer acknowledged.
func EpochCommitted(ctx context.Context, r ShardReader, queryID string, epochID int64) (bool, EpochLocation, error) {
	switch r := r.(type) {
	case *Shard:
		if ok, loc := r.EpochCommitted(queryID, epochID); ok {
			return true, loc, nil // durable: true whoever owns the shard now
		}
		stored, err := r.storedIfFenced(ctx)
		if err != nil || stored == nil {
			return false, EpochLocation{}, err
		}
		return stored.EpochCommitted(ctx, queryID, epochID)
	case *StoredShard:
		return r.EpochCommitted(ctx, queryID, epochID)
	}
	return false, EpochLocation{}, fmt.Errorf("memwal: EpochCommitted: unknown shard reader %T", r)
}

// ReadStats describes the shard r reads without claiming it: a resident writer's own view while it
// still owns the shard (confirmed by one manifest probe), else the read-only view of storage.
func ReadStats(ctx context.Context, r ShardReader) (ShardStats, error) {
	switch r := r.(type) {
	case *Shard:
		stored, err := r.storedIfFenced(ctx)
		if err != nil {
			return ShardStats{Shard: r.id}, err
		}
		if stored == nil {
			return r.Stats(), nil
		}
		st, err := stored.Stats(ctx)
		st.Failed = r.Err().Error() // this process's writer was fenced; st is the new owner's shard
		return st, err
	case *StoredShard:
		return r.Stats(ctx)
	}
	return ShardStats{}, fmt.Errorf("memwal: ReadStats: unknown shard reader %T", r)
}

// storedView returns the read-only view of the writer's shard.
func (s *Shard) storedView() *StoredShard { return NewStoredShard(s.table, s.id, &s.opts) }

// confirmWriter returns nil when the writer still owns its shard (one manifest probe); when
// another writer claimed it, it marks the writer failed and returns the error, which wraps
// ErrFenced.
func (s *Shard) confirmWriter(ctx context.Context) error {
	err := s.ms.confirmEpoch(ctx, s.epoch)
	if errors.Is(err, ErrFenced) {
		_ = s.fail(err)
	}
	return err
}

// storedIfFenced confirms that the writer still owns its shard and returns nil, or, when another
// writer claimed it, marks the writer failed and returns the shard's read-only view.
func (s *Shard) storedIfFenced(ctx context.Context) (*StoredShard, error) {
	err := s.confirmWriter(ctx)
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, ErrFenced):
		return s.storedView(), nil
	}
	return nil, err
}

func newMergedReader(ctx context.Context, tbl *engine.Table, m *engine.Manifest, mem []arrow.RecordBatch, o engine.ScanOptions) (*mergedReader, error) {
	full := m.ArrowSchema()
	out, err := arrowschema.ProjectSchema(full, o.Columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", tbl.Name(), err)
	}
	outNames := make([]string, out.NumFields())
	for i, f := range out.Fields() {
		outNames[i] = f.Name
	}
	if o.Filter != nil {
		if err := o.Filter.Validate(full); err != nil {
			return nil, fmt.Errorf("table %s: %w", tbl.Name(), err)
		}
	}
	r := &mergedReader{refs: 1, schema: out}
	pk := m.PrimaryKey

	if len(pk) == 0 {
		sc, err := tbl.ScanManifest(ctx, m, engine.ScanOptions{Columns: outNames, BatchSize: o.BatchSize, Filter: o.Filter})
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, sc.Release, func() { arrowschema.ReleaseBatches(mem) })
		r.sources = []batchSource{scannerSource(ctx, sc, nil, out), memSource(ctx, mem, nil, o.Filter, full, out)}
		return r, nil
	}

	// Newest wins among MemWAL rows; a base row of a winner's key is shadowed.
	keep, win, err := winners(mem, pk)
	if err != nil {
		return nil, err
	}
	scanCols := append([]string(nil), outNames...)
	for _, k := range pk {
		if !contains(scanCols, k) {
			scanCols = append(scanCols, k)
		}
	}
	sc, err := tbl.ScanManifest(ctx, m, engine.ScanOptions{Columns: scanCols, BatchSize: o.BatchSize, Filter: o.Filter})
	if err != nil {
		releaseBools(keep)
		return nil, err
	}
	var baseKeep func(b arrow.RecordBatch) (*array.Boolean, error)
	if len(win) > 0 {
		var kb []byte
		baseKeep = func(b arrow.RecordBatch) (*array.Boolean, error) {
			enc, err := expr.NewKeyEncoder(b, pk)
			if err != nil {
				return nil, err
			}
			bb := array.NewBooleanBuilder(memory.DefaultAllocator)
			defer bb.Release()
			for row := 0; row < int(b.NumRows()); row++ {
				var ok bool
				kb, ok = enc.AppendKey(kb[:0], row)
				_, shadowed := win[string(kb)]
				bb.Append(!ok || !shadowed)
			}
			return bb.NewBooleanArray(), nil
		}
	}
	r.closers = append(r.closers, sc.Release, func() { arrowschema.ReleaseBatches(mem); releaseBools(keep) })
	r.sources = []batchSource{scannerSource(ctx, sc, baseKeep, out), memSource(ctx, mem, keep, o.Filter, full, out)}
	return r, nil
}

// batchSource yields batches the caller owns; nil, nil at the end.
type batchSource func() (arrow.RecordBatch, error)

// scannerSource yields sc's batches, filtered by keep (when set) and projected to out.
func scannerSource(ctx context.Context, sc *engine.Scanner, keep func(arrow.RecordBatch) (*array.Boolean, error), out *arrow.Schema) batchSource {
	return func() (arrow.RecordBatch, error) {
		for sc.Next() {
			b := sc.RecordBatch()
			var mask *array.Boolean
			if keep != nil {
				var err error
				if mask, err = keep(b); err != nil {
					return nil, err
				}
			}
			rb, err := filterProject(ctx, b, mask, nil, nil, out)
			if mask != nil {
				mask.Release()
			}
			if err != nil || rb != nil {
				return rb, err
			}
		}
		return nil, sc.Err()
	}
}

// filterProject returns the rows of b that mask keeps (all when mask is nil) and filter accepts
// (all when nil) with the columns of out, or nil when no row is kept. full is the table's latest
// schema (out projects it), which the filter's columns are read through. The result is the
// caller's.
func filterProject(ctx context.Context, b arrow.RecordBatch, mask *array.Boolean, filter *expr.Predicate, full, out *arrow.Schema) (arrow.RecordBatch, error) {
	var keep []int32 // the rows mask keeps; nil when it keeps every row
	if mask != nil {
		keep = make([]int32, 0, mask.Len())
		for i := 0; i < mask.Len(); i++ {
			if mask.IsValid(i) && mask.Value(i) {
				keep = append(keep, int32(i))
			}
		}
		switch len(keep) {
		case 0:
			return nil, nil
		case int(b.NumRows()):
			keep = nil
		}
	}
	if b.NumRows() == 0 {
		return nil, nil
	}
	src := b
	if keep != nil {
		f, err := arrowschema.TakeRecord(compute.GetAllocator(ctx), b, keep)
		if err != nil {
			return nil, fmt.Errorf("memwal: filter batch: %w", err)
		}
		defer f.Release()
		src = f
	}
	if filter != nil {
		// The filter names columns of the table's latest schema: a memtable or generation batch
		// of an older one reads through it first (columns added since as nulls).
		c, err := arrowschema.ConformToTable(full, src)
		if err != nil {
			return nil, fmt.Errorf("memwal: %w", err)
		}
		defer c.Release()
		f, err := expr.FilterBatch(ctx, filter, c)
		if err != nil || f == nil {
			return nil, err
		}
		defer f.Release()
		src = f
	}
	// A memtable or generation of an older schema of the table reads through the latest one
	// (columns added since as nulls, promoted types widened).
	rb, err := arrowschema.ConformToTable(out, src)
	if err != nil {
		return nil, fmt.Errorf("memwal: %w", err)
	}
	return rb, nil
}

// mergedReader chains batch sources into one array.RecordReader.
type mergedReader struct {
	refs    int64
	schema  *arrow.Schema
	sources []batchSource
	closers []func()
	cur     arrow.RecordBatch
	err     error
}

var _ array.RecordReader = (*mergedReader)(nil)

// Schema returns the projected table schema.
func (r *mergedReader) Schema() *arrow.Schema { return r.schema }

// Retain increases the reference count.
func (r *mergedReader) Retain() { atomic.AddInt64(&r.refs, 1) }

// Release decreases the reference count and frees everything at zero.
func (r *mergedReader) Release() {
	if atomic.AddInt64(&r.refs, -1) != 0 {
		return
	}
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	for _, c := range r.closers {
		c()
	}
	r.closers, r.sources = nil, nil
}

// Next advances to the next batch.
func (r *mergedReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	for r.err == nil && len(r.sources) > 0 {
		b, err := r.sources[0]()
		if err != nil {
			r.err = err
			return false
		}
		if b != nil {
			r.cur = b
			return true
		}
		r.sources = r.sources[1:]
	}
	return false
}

// RecordBatch returns the current batch, valid until the next call to Next.
func (r *mergedReader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (r *mergedReader) Record() arrow.RecordBatch { return r.cur }

// Err returns the first error met.
func (r *mergedReader) Err() error { return r.err }

func releaseBools(bs []*array.Boolean) {
	for _, b := range bs {
		if b != nil {
			b.Release()
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
