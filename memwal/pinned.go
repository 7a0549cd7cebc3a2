package memwal

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/objstore"
)

// PinnedRead is one consistent capture of a table's MemWAL rows: the latest base version and,
// read at that version's merged-generation watermarks, every shard's rows the base table does not
// hold yet (flushed generations and memtables), held in memory. It is what a read of the table
// "now" merges with the base version, frozen so that several readers (the endpoints of one
// GetFlightInfo) can each read a part of the same state later, whatever the shards do meanwhile.
//
// Without a primary key every MemWAL row is part of the read. With one, the newest row of each
// key wins (as ScanMerged resolves it), and the base rows of the winners' keys are superseded:
// Superseded finds them in the base version.
//
// A PinnedRead is safe for concurrent use once made; Release it when done.
type PinnedRead struct {
	table    *engine.Table
	manifest *engine.Manifest
	mem      []arrow.RecordBatch
	keep     []*array.Boolean    // keyed with rows: the winning rows of each batch of mem
	keys     map[string]struct{} // keyed: the winners' keys (expr.KeyEncoder)
	rows     int64               // rows of the read: winners
	bytes    int64
}

// pin captures the MemWAL rows of shards over tbl's latest version, in the cut of gate (nil: none)
// across the shards (ShardSet.Pin).
func pin(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate) (*PinnedRead, error) {
	m, mem, err := captureMerged(ctx, tbl, shards, gate, 0)
	if err != nil {
		return nil, err
	}
	p := newPinnedRead(tbl, m, mem)
	if err := p.resolve(); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// newPinnedRead holds mem, captured over base version m; resolve it before use.
func newPinnedRead(tbl *engine.Table, m *engine.Manifest, mem []arrow.RecordBatch) *PinnedRead {
	return &PinnedRead{table: tbl, manifest: m, mem: mem}
}

// resolve finds the winning rows (with a primary key) and counts the rows and bytes.
func (p *PinnedRead) resolve() error {
	if pk := p.manifest.PrimaryKey; len(pk) > 0 {
		var err error
		if p.keep, p.keys, err = winners(p.mem, pk); err != nil {
			return err
		}
	}
	for i, b := range p.mem {
		p.bytes += arrowschema.RecordBytes(b)
		if p.keep == nil {
			p.rows += b.NumRows()
			continue
		}
		for j := 0; j < p.keep[i].Len(); j++ {
			if p.keep[i].Value(j) {
				p.rows++
			}
		}
	}
	return nil
}

// VisibleRows counts the rows a read of the capture returns: the base version's live rows less
// those the MemWAL rows supersede, and the MemWAL rows (with a primary key one per key).
func (p *PinnedRead) VisibleRows(ctx context.Context) (baseRows, memwalRows int64, err error) {
	superseded, err := p.Superseded(ctx)
	if err != nil {
		return 0, 0, err
	}
	return p.manifest.Rows() - superseded.Len(), p.rows, nil
}

// Manifest returns the base version the rows were captured over.
func (p *PinnedRead) Manifest() *engine.Manifest { return p.manifest }

// Rows returns the number of MemWAL rows the read holds (with a primary key: one per key).
func (p *PinnedRead) Rows() int64 { return p.rows }

// Bytes returns the in-memory size of the captured batches.
func (p *PinnedRead) Bytes() int64 { return p.bytes }

// Superseded returns the addresses of the live base rows that the MemWAL rows supersede: with a
// primary key, the base rows of the winners' keys; without one, none (nil).
func (p *PinnedRead) Superseded(ctx context.Context) (*rowset.Set, error) {
	if len(p.keys) == 0 {
		return nil, nil
	}
	return p.table.LocateKeys(ctx, p.manifest, p.keys)
}

// Scan returns the MemWAL rows of the read with columns (empty: every column), only those for
// which filter is true when it is set. Release the reader; it holds the PinnedRead's batches, not
// the PinnedRead itself.
func (p *PinnedRead) Scan(ctx context.Context, columns []string, filter *expr.Predicate) (array.RecordReader, error) {
	full := p.manifest.ArrowSchema()
	if filter != nil {
		if err := filter.Validate(full); err != nil {
			return nil, fmt.Errorf("table %s: %w", p.table.Name(), err)
		}
	}
	out, err := arrowschema.ProjectSchema(full, columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", p.table.Name(), err)
	}
	for _, b := range p.mem {
		b.Retain()
	}
	for _, k := range p.keep {
		k.Retain()
	}
	r := &mergedReader{refs: 1, schema: out}
	r.sources = []batchSource{memSource(ctx, p.mem, p.keep, filter, full, out)}
	r.closers = []func(){func() { arrowschema.ReleaseBatches(p.mem); releaseBools(p.keep) }}
	return r, nil
}

// Release frees the captured rows (readers Scan returned keep theirs).
func (p *PinnedRead) Release() {
	arrowschema.ReleaseBatches(p.mem)
	releaseBools(p.keep)
	p.mem, p.keep = nil, nil
}

// captureMerged reads base version version (0: the latest) and every shard's rows above its merged
// watermarks, shard by shard, each oldest first. At the latest version it starts over when a
// fold merges and drains generations under it (the newer base version holds their rows).
//
// With a gate the capture is one cut across the shards (epochGate): it takes the cut before it
// reads the base version, so an epoch the cut hides is in neither; when a part of a hidden epoch
// was flushed before the epoch ended, it waits for the epoch to end and starts over.
func captureMerged(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate, version uint64) (*engine.Manifest, []arrow.RecordBatch, error) {
	for attempt := 0; ; {
		m, mem, err := captureOnce(ctx, tbl, shards, gate, version)
		if err == nil {
			return m, mem, nil
		}
		if inFlight := (*epochInFlightError)(nil); errors.As(err, &inFlight) {
			// Each wait is for an epoch that was in flight: progress, not a spin.
			if err := gate.awaitEnd(ctx, inFlight.key); err != nil {
				return nil, nil, err
			}
			continue
		}
		attempt++
		// A fold merged (and drained or deleted) generations after we read the base
		// version: the newer base version holds their rows, so read again from there.
		retry := errors.Is(err, objstore.ErrNotFound) || errors.Is(err, errMergedSince)
		if !retry || version != 0 || attempt >= mergedReadAttempts {
			return nil, nil, err
		}
	}
}

// captureOnce is one attempt of captureMerged.
func captureOnce(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate, version uint64) (*engine.Manifest, []arrow.RecordBatch, error) {
	m, sns, err := snapshotCut(ctx, tbl, shards, gate, version)
	if err != nil {
		return nil, nil, err
	}
	// The generations are read after the cut is released: a snapshot's generations are fixed, and
	// no epoch need wait for their reads.
	mem, err := readSnapshots(ctx, sns)
	if err != nil {
		return nil, nil, err
	}
	return m, mem, nil
}

// snapshotCut reads the base version and snapshots the shards inside one cut of gate (nil: none).
func snapshotCut(ctx context.Context, tbl *engine.Table, shards []ShardReader, gate *epochGate, version uint64) (*engine.Manifest, []*Snapshot, error) {
	var cut readCut
	if gate != nil {
		c, release, err := gate.capture(ctx)
		if err != nil {
			return nil, nil, err
		}
		defer release()
		cut = c
	}
	var m *engine.Manifest
	var err error
	if version == 0 {
		m, err = tbl.Latest(ctx)
	} else {
		m, err = tbl.Manifest(ctx, version)
	}
	if err != nil {
		return nil, nil, err
	}
	sns, err := snapshotShards(ctx, m, shards, cut)
	if err != nil {
		return nil, nil, err
	}
	return m, sns, nil
}

// winners resolves "newest wins" among MemWAL rows (later batches, and later rows of a batch,
// override): it returns, per batch, which rows win, and the set of the winners' keys. Keys are
// compared as the fold's upsert compares them (expr.KeyEncoder), so a read before a fold and
// one after it agree on which rows share a key. A row with a null key (refused by puts) shadows
// nothing and is kept. keep is nil when mem has no keyed row.
func winners(mem []arrow.RecordBatch, pk []string) ([]*array.Boolean, map[string]struct{}, error) {
	type ref struct{ batch, row int }
	win := make(map[string]ref)
	var kb []byte
	for bi, b := range mem {
		enc, err := expr.NewKeyEncoder(b, pk)
		if err != nil {
			return nil, nil, err
		}
		for row := 0; row < int(b.NumRows()); row++ {
			var ok bool
			if kb, ok = enc.AppendKey(kb[:0], row); ok {
				win[string(kb)] = ref{bi, row}
			}
		}
	}
	keys := make(map[string]struct{}, len(win))
	for k := range win {
		keys[k] = struct{}{}
	}
	if len(win) == 0 {
		return nil, keys, nil
	}
	keep := make([]*array.Boolean, len(mem))
	for bi, b := range mem {
		enc, _ := expr.NewKeyEncoder(b, pk)
		bb := array.NewBooleanBuilder(memory.DefaultAllocator)
		for row := 0; row < int(b.NumRows()); row++ {
			var ok bool
			kb, ok = enc.AppendKey(kb[:0], row)
			bb.Append(!ok || win[string(kb)] == ref{bi, row})
		}
		keep[bi] = bb.NewBooleanArray()
		bb.Release()
	}
	return keep, keys, nil
}

// memSource yields the rows of mem that keep marks (all when keep is nil) and filter accepts,
// projected to out (full: the table schema out projects, see filterProject).
func memSource(ctx context.Context, mem []arrow.RecordBatch, keep []*array.Boolean, filter *expr.Predicate, full, out *arrow.Schema) batchSource {
	i := 0
	return func() (arrow.RecordBatch, error) {
		for i < len(mem) {
			b := mem[i]
			var mask *array.Boolean
			if keep != nil {
				mask = keep[i]
			}
			i++
			rb, err := filterProject(ctx, b, mask, filter, full, out)
			if err != nil || rb != nil {
				return rb, err
			}
		}
		return nil, nil
	}
}
