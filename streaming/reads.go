package streaming

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Parallel reads (GetFlightInfo endpoints: docs/protocol.md, Endpoint tickets).
//
// PlanRead describes one consistent state of a table as parts that can be read independently and
// in parallel, each by its own DoGet: groups of base fragments of about a target size, and the
// MemWAL rows. Read reads one part (or the whole table). The union of the parts' rows is exactly
// what one read of the whole table returned at the moment of the plan.
//
// The base parts are pinned by their version and fragment ids: any server can read them until
// cleanup removes the version. The MemWAL rows change with every put, flush and fold, so a plan of
// a table with MemWAL rows captures them (memwal.PinnedRead) and keeps the capture in this
// process's memory, under a read snapshot id, for ReadSnapshotTTL; the MemWAL part names it. With
// a primary key a MemWAL row supersedes the base rows of its key: the plan finds those rows
// (engine.Table.LocateKeys, through the primary-key index where it covers a fragment) and every
// base part of the plan names the snapshot too, so that it leaves them out. Without one the base
// parts do not need the snapshot. A part that names a snapshot this process no longer holds
// (expired, evicted, another server, a restart) fails with ErrReadSnapshotNotFound: plan again.

// ErrReadSnapshotNotFound: a read names a MemWAL read snapshot this process does not hold.
var ErrReadSnapshotNotFound = errors.New("read snapshot not found")

// Defaults of the read snapshots.
const (
	DefaultReadSnapshotTTL      = 10 * time.Minute
	DefaultReadSnapshotMaxBytes = 1 << 30
	// DefaultEndpointBytes is the target size of the fragments of one base part of a plan.
	DefaultEndpointBytes = 128 << 20
)

// ReadRequest is one read: of the whole table, or of one part of a plan.
type ReadRequest struct {
	Table string
	// Version is the base version (0: the latest, merged with the MemWAL rows of now, unless
	// Snapshot is set: then the snapshot's version).
	Version uint64
	// Columns to return, in order (empty: every column).
	Columns []string
	// Filter returns only the rows for which it is true (nil: every row).
	Filter *expr.Predicate
	// Fragments restricts the base rows to these fragments of the version (nil: every fragment;
	// empty: none).
	Fragments []uint64
	// Snapshot names the MemWAL read snapshot of a plan: base rows it supersedes are left out.
	Snapshot string
	// MemWAL reads the snapshot's MemWAL rows too (Snapshot required).
	MemWAL bool
	// TableID, when set, is the table incarnation (engine.Manifest.TableID) the read was planned
	// on: a version of another one (the table was dropped, perhaps created anew) is
	// engine.ErrTableNotFound.
	TableID string
	// Allocator, when set, holds the buffers of the base table's batches
	// (engine.ScanOptions.Allocator); a read merged with MemWAL rows by key uses the table's.
	Allocator memory.Allocator
}

// ReadPlan is PlanRead's answer.
type ReadPlan struct {
	Manifest *engine.Manifest
	// Snapshot is the MemWAL read snapshot the plan holds ("" when it has no MemWAL rows).
	Snapshot string
	Parts    []ReadPart
	// Rows is the number of rows the parts return together (without a filter): the base rows
	// of the version, less those MemWAL rows supersede, plus the MemWAL rows.
	Rows int64
	// BaseRows and MemWALRows split Rows.
	BaseRows, MemWALRows int64
	Bytes                int64
}

// ReadPart is one independently readable part of a plan.
type ReadPart struct {
	// Fragments are the base fragments the part reads (empty: none).
	Fragments []uint64
	// Snapshot is the plan's snapshot when the part needs it ("" otherwise).
	Snapshot string
	// MemWAL: the part is the plan's MemWAL rows.
	MemWAL bool
	Rows   int64
	Bytes  int64
}

// PlanRead plans a parallel read of table at version (0: the latest, with its MemWAL rows; a
// given version is the base table as it was, without MemWAL rows, as Read reads it). Fragments
// are grouped in the version's order into parts of about targetBytes of data each (<= 0:
// DefaultEndpointBytes); fragments whose every row is deleted are left out, and so are those
// whose partition or column ranges prove that filter (nil: none; already validated against the
// version's schema) matches none of their rows, so Bytes and the parts count only what a filtered read
// opens. A plan always has at least one part.
func (s *Sink) PlanRead(ctx context.Context, table string, version uint64, targetBytes int64, filter *expr.Predicate) (ReadPlan, error) {
	if targetBytes <= 0 {
		targetBytes = DefaultEndpointBytes
	}
	t, err := s.Table(ctx, table)
	if err != nil {
		return ReadPlan{}, err
	}
	var m *engine.Manifest
	if version == 0 {
		m, err = t.Latest(ctx)
	} else {
		m, err = t.Manifest(ctx, version)
	}
	if err != nil {
		return ReadPlan{}, err
	}
	var pin *pinnedEntry
	if version == 0 {
		if pin, err = s.pinMemWAL(ctx, t, m); err != nil {
			return ReadPlan{}, err
		}
	}
	plan := ReadPlan{Manifest: m}
	var superseded *rowset.Set
	baseSnapshot := ""
	if pin != nil {
		plan.Manifest, plan.Snapshot, superseded = pin.pin.Manifest(), pin.id, pin.superseded
		if superseded != nil {
			baseSnapshot = pin.id
		}
	}
	var cur *ReadPart
	pruner := engine.NewPartitionPruner(plan.Manifest, filter)
	for _, f := range plan.Manifest.Fragments {
		if f.LiveRows() == 0 || !pruner.MayMatch(f) || !f.MayMatch(filter, plan.Manifest.ArrowSchema()) {
			continue
		}
		rows := f.LiveRows()
		if ex := superseded.Offsets(f.ID); ex != nil {
			rows -= int64(ex.GetCardinality())
		}
		if cur == nil || cur.Bytes >= targetBytes {
			plan.Parts = append(plan.Parts, ReadPart{Fragments: []uint64{}, Snapshot: baseSnapshot})
			cur = &plan.Parts[len(plan.Parts)-1]
		}
		cur.Fragments = append(cur.Fragments, f.ID)
		cur.Rows += rows
		cur.Bytes += f.DataBytes()
		plan.BaseRows += rows
		plan.Bytes += f.DataBytes()
	}
	if pin != nil {
		plan.MemWALRows = pin.pin.Rows()
		plan.Parts = append(plan.Parts, ReadPart{Fragments: []uint64{}, Snapshot: pin.id, MemWAL: true,
			Rows: plan.MemWALRows, Bytes: pin.pin.Bytes()})
	}
	if len(plan.Parts) == 0 {
		plan.Parts = []ReadPart{{Fragments: []uint64{}}} // an empty table still has its schema
	}
	plan.Rows = plan.BaseRows + plan.MemWALRows
	return plan, nil
}

// pinMemWAL captures table t's MemWAL rows over its latest version and keeps them as a read
// snapshot; nil when the table has no MemWAL shards or they hold no rows.
func (s *Sink) pinMemWAL(ctx context.Context, t *engine.Table, m *engine.Manifest) (*pinnedEntry, error) {
	ss, err := s.tableShards(t, m)
	if err != nil || ss == nil {
		return nil, err
	}
	pin, err := ss.Pin(ctx)
	if err != nil {
		return nil, err
	}
	if pin.Rows() == 0 {
		pin.Release()
		return nil, nil
	}
	superseded, err := pin.Superseded(ctx)
	if err != nil {
		pin.Release()
		return nil, err
	}
	if superseded.IsEmpty() {
		superseded = nil
	}
	e := &pinnedEntry{id: uuid.NewString(), table: t.Name(), pin: pin, superseded: superseded, refs: 1}
	s.pins.add(e, s.opts.ReadSnapshotTTL, s.opts.ReadSnapshotMaxBytes)
	return e, nil
}

// Read reads r: a whole table (no Fragments, no Snapshot: at the latest version merged with the
// MemWAL rows of now, at a given version the base table as it was), or one part of a plan. The
// caller must Release the reader. A read of a version cleanup removed (its manifest, or its data
// files while reading) fails with an error wrapping engine.ErrVersionNotFound.
func (s *Sink) Read(ctx context.Context, r ReadRequest) (array.RecordReader, error) {
	if r.MemWAL && r.Snapshot == "" {
		return nil, invalid("reading the MemWAL rows of a plan needs its read snapshot")
	}
	t, err := s.Table(ctx, r.Table)
	if err != nil {
		return nil, err
	}
	var pin *pinnedEntry
	if r.Snapshot != "" {
		if pin = s.pins.get(r.Snapshot); pin == nil {
			return nil, fmt.Errorf("%w: table %s: read snapshot %s has expired (kept %v), was evicted, or was made by another server or before a restart; describe the table again (GetFlightInfo)",
				ErrReadSnapshotNotFound, r.Table, r.Snapshot, s.opts.ReadSnapshotTTL)
		}
		pv := pin.pin.Manifest().Version
		if pin.table != t.Name() || (r.Version != 0 && r.Version != pv) {
			s.pins.release(pin)
			return nil, invalid("read snapshot %s belongs to table %s version %d, not table %s version %d", r.Snapshot, pin.table, pv, r.Table, r.Version)
		}
		r.Version = pv
	}
	if pin == nil && r.Fragments == nil && r.Version == 0 {
		if r.TableID != "" {
			m, err := t.Latest(ctx)
			if err != nil {
				return nil, err
			}
			if err := sameIncarnation(r, m); err != nil {
				return nil, err
			}
		}
		return s.scanLatest(ctx, t, engine.ScanOptions{Columns: r.Columns, Filter: r.Filter, Allocator: r.Allocator})
	}
	rd, err := s.readPart(ctx, t, r, pin)
	if err != nil {
		if pin != nil {
			s.pins.release(pin)
		}
		return nil, cleanedUp(r, err)
	}
	return &partReader{RecordReader: rd, req: r, done: func() {
		if pin != nil {
			s.pins.release(pin)
		}
	}}, nil
}

// scanLatest reads the latest version merged with the MemWAL rows of now (o.Version unused).
func (s *Sink) scanLatest(ctx context.Context, t *engine.Table, o engine.ScanOptions) (array.RecordReader, error) {
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil {
		return nil, err
	}
	if ss == nil {
		return t.ScanManifest(ctx, m, o)
	}
	o.Allocator = nil
	return ss.Scan(ctx, o)
}

// readPart reads the base fragments r names (less the rows pin supersedes) and, with r.MemWAL,
// pin's MemWAL rows after them.
func (s *Sink) readPart(ctx context.Context, t *engine.Table, r ReadRequest, pin *pinnedEntry) (array.RecordReader, error) {
	var m *engine.Manifest
	var err error
	if r.Version == 0 {
		m, err = t.Latest(ctx)
	} else {
		m, err = t.Manifest(ctx, r.Version) // also when pinned: proves cleanup has not removed it
	}
	if err != nil {
		return nil, err
	}
	if err := sameIncarnation(r, m); err != nil {
		return nil, err
	}
	o := engine.ScanOptions{Columns: r.Columns, Filter: r.Filter, Fragments: r.Fragments, Allocator: r.Allocator}
	if pin != nil {
		o.Exclude = pin.superseded
	}
	base, err := t.ScanManifest(ctx, m, o)
	if err != nil {
		return nil, err
	}
	if !r.MemWAL {
		return base, nil
	}
	mem, err := pin.pin.Scan(ctx, r.Columns, r.Filter)
	if err != nil {
		base.Release()
		return nil, err
	}
	return &chainReader{readers: []array.RecordReader{base, mem}, schema: base.Schema(), refs: 1}, nil
}

// sameIncarnation checks that m is of the table incarnation r was planned on (r.TableID), so
// that a ticket of a dropped table never reads the table created anew under its name.
func sameIncarnation(r ReadRequest, m *engine.Manifest) error {
	if r.TableID == "" || r.TableID == m.TableID {
		return nil
	}
	return fmt.Errorf("%w: table %s was dropped after the read was planned (table id %s, now %s): describe it again",
		engine.ErrTableNotFound, r.Table, r.TableID, m.TableID)
}

// cleanedUp marks a read error caused by a removed file of the version as the version being gone
// (cleanup removed it after the plan was made).
func cleanedUp(r ReadRequest, err error) error {
	if err == nil || errors.Is(err, engine.ErrVersionNotFound) || !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: table %s version %d: a file of the version was removed (cleanup?): %w", engine.ErrVersionNotFound, r.Table, r.Version, err)
}

// partReader is a part's reader: it maps a removed file to ErrVersionNotFound and releases the
// read snapshot when released.
type partReader struct {
	array.RecordReader
	req  ReadRequest
	done func()
	once sync.Once
}

// Err returns the read's error.
func (p *partReader) Err() error { return cleanedUp(p.req, p.RecordReader.Err()) }

// Release releases the reader; the last release frees the read snapshot's reference too.
func (p *partReader) Release() {
	p.RecordReader.Release()
	p.once.Do(p.done) // a DoGet releases its reader once
}

// chainReader reads its readers one after the other; they share schema.
type chainReader struct {
	readers []array.RecordReader
	schema  *arrow.Schema
	refs    int64
	err     error
}

func (c *chainReader) Schema() *arrow.Schema { return c.schema }
func (c *chainReader) Retain()               { atomic.AddInt64(&c.refs, 1) }
func (c *chainReader) Release() {
	if atomic.AddInt64(&c.refs, -1) == 0 {
		for _, r := range c.readers {
			r.Release()
		}
		c.readers = nil
	}
}
func (c *chainReader) Next() bool {
	for c.err == nil && len(c.readers) > 0 {
		if c.readers[0].Next() {
			return true
		}
		if c.err = c.readers[0].Err(); c.err != nil {
			return false
		}
		c.readers[0].Release()
		c.readers = c.readers[1:]
	}
	return false
}
func (c *chainReader) RecordBatch() arrow.RecordBatch { return c.readers[0].RecordBatch() }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (c *chainReader) Record() arrow.RecordBatch { return c.RecordBatch() }
func (c *chainReader) Err() error                { return c.err }

// pinnedEntry is one read snapshot: a MemWAL capture and the base rows it supersedes.
type pinnedEntry struct {
	id         string
	table      string
	pin        *memwal.PinnedRead
	superseded *rowset.Set // nil: none
	expires    time.Time
	refs       int // the registry's (until expiry or eviction) and one per reader; guarded by pinnedReads.mu
}

// pinnedReads holds a Sink's read snapshots for their TTL, within a memory budget: a new one
// evicts the oldest when the budget is full. The zero value is ready to use.
type pinnedReads struct {
	mu    sync.Mutex
	byID  map[string]*pinnedEntry
	order []*pinnedEntry // by expiry
	bytes int64
}

// add registers e (whose refs hold the registry's reference) for ttl.
func (p *pinnedReads) add(e *pinnedEntry, ttl time.Duration, maxBytes int64) {
	if ttl <= 0 {
		ttl = DefaultReadSnapshotTTL
	}
	if maxBytes <= 0 {
		maxBytes = DefaultReadSnapshotMaxBytes
	}
	now := time.Now()
	e.expires = now.Add(ttl)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = make(map[string]*pinnedEntry)
	}
	for len(p.order) > 0 && (p.order[0].expires.Before(now) || p.bytes+e.pin.Bytes() > maxBytes) {
		p.dropLocked(p.order[0])
	}
	p.byID[e.id] = e
	p.order = append(p.order, e)
	p.bytes += e.pin.Bytes()
}

// get returns the live snapshot id with a reference for the caller (release it), or nil.
func (p *pinnedReads) get(id string) *pinnedEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.byID[id]
	if e == nil {
		return nil
	}
	if e.expires.Before(time.Now()) {
		p.dropLocked(e)
		return nil
	}
	e.refs++
	return e
}

// release drops a reference get returned.
func (p *pinnedReads) release(e *pinnedEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unrefLocked(e)
}

// dropLocked removes e from the registry and drops the registry's reference.
func (p *pinnedReads) dropLocked(e *pinnedEntry) {
	if _, ok := p.byID[e.id]; !ok {
		return
	}
	delete(p.byID, e.id)
	p.order = slices.DeleteFunc(p.order, func(x *pinnedEntry) bool { return x == e })
	p.bytes -= e.pin.Bytes()
	p.unrefLocked(e)
}

func (p *pinnedReads) unrefLocked(e *pinnedEntry) {
	if e.refs--; e.refs == 0 {
		e.pin.Release()
	}
}

// TableState describes the latest version of table t as every view reports it, in one consistent
// snapshot: base rows, the MemWAL rows not folded into it yet (on a keyed table, the rows a read
// returns: one per key), each streaming query's last epoch from its watermarks or shard state,
// and the shards' own details (memwal.ShardSet.TableState). It claims no shard.
func (s *Sink) TableState(ctx context.Context, t *engine.Table) (memwal.TableState, error) {
	m, err := t.Latest(ctx)
	if err != nil {
		return memwal.TableState{}, err
	}
	ss, err := s.tableShards(t, m)
	if err != nil {
		return memwal.TableState{}, err
	}
	if ss == nil {
		return memwal.ReadTableState(ctx, t, m, nil)
	}
	return ss.TableState(ctx)
}
