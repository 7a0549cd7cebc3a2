package memwal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"go.opentelemetry.io/otel/metric"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
)

// A ShardSet is one table's MemWAL shards as one process serves them: the writers it owns, the
// read views of the others, and the scheduling of the folds that move flushed generations into
// the base table.
//
// Lifecycle:
//
//  1. NewShardSet opens nothing. A shard is claimed (OpenShard: the writer epoch bumped, a fence
//     left at the WAL tip) by the first Put that needs it, and only by a put: reads (Scan,
//     Readers, Stats) use this process's writer where it has one and otherwise the read-only
//     StoredShard view of storage, so asking about a shard never fences the server writing it.
//  2. Put stalls at the fold ceiling first (below), then hands the batches to the writer. A writer
//     that was fenced by another server, or that failed, is closed and the shard reopened
//     (claimed again) once: a fenced put acknowledged nothing, and the reopened writer replays the
//     WAL, so the retry cannot duplicate.
//  3. Folds are a maintenance step of the table (FoldStep, run by engine.TableMaintainer before
//     optimize indices, compaction and cleanup, since a fold adds the fragments they work on).
//     Puts and flushes make no base commit, so the set starts the table's maintenance itself
//     (engine.TableMaintainer.MaintainAfterWrite) when a shard is due: after a put in inline mode
//     (the put waits for it) and background mode, and after every flush in background mode (the
//     flusher runs behind the puts, so a stream that stops still has its last generations
//     folded); never in mode "off".
//  4. Close closes the writers; acknowledged puts are durable in the WAL and the next writer of
//     the shard, in any process, replays them.
//
// The fold ceiling (bounds hold under any load: docs/operations.md). Automatic folds run behind
// the puts and only when the table's maintenance is on; with maintenance off, or a fold that keeps
// failing slowly, generations would pile up without limit and every read would merge them all.
// So a put to a shard whose backlog is at Options.MaxUnfoldedGenerations stalls before it is
// written: it waits for the fold another stalled put of this set is running, or runs one itself,
// until the backlog is below the ceiling. The backlog counts the flushed generations above the
// base table's merged watermark and the sealed memtables still to be flushed (each becomes one),
// so a shard holds at most the ceiling plus the puts in flight, and an active memtable an age seal
// closes. The ceiling holds whatever the maintenance mode, "off" included, and with automatic
// folds disabled: a bound that depends on maintenance is not a bound. A stall ends with the put's
// ctx; a fold that fails fails the put, with nothing written.
//
// A ShardSet is safe for concurrent use.
type ShardSet struct {
	table *engine.Table
	ids   []string
	opts  ShardSetOptions
	turns FoldTurns // folds of one shard by this set run one at a time
	gauge metric.Registration
	own   *ownership // owner_*.go: the shards the set owns (leases), routing, dedupe across servers (peers)
	gate  *epochGate // visibility.go: epochs against reads (one cut across shards) and row operations

	// mu guards the writers and the per-shard fold state: writers, foldedAt and stallFolds.
	mu         sync.Mutex
	writers    []*Shard        // by shard index; nil until claimed, or after a failure
	foldedAt   []uint64        // shard i's next generation number when its last fold started
	stallFolds []chan struct{} // the fold a stalled put of shard i runs; closed when it ends

	// hookMu guards closed and the start of hooks. It is apart from mu because the writers'
	// flushers take it: mu is held while a writer closes, which waits for its flusher.
	hookMu sync.Mutex
	closed bool
	// hooks counts the after-flush hooks in flight, and foldByAge: Add under hookMu with closed
	// false, or in NewShardSet before the set is shared.
	hooks sync.WaitGroup
	// freshStop stops foldByAge (nil when Freshness is 0).
	freshStop chan struct{}
}

// ShardSetOptions configure a ShardSet. The zero value is usable.
type ShardSetOptions struct {
	// Shard options of the writers and read views. Its AfterFlush is the set's own hook.
	// MaxUnfoldedGenerations 0 means four times FoldGenerations (16 when automatic folds are off).
	Shard Options
	// FoldGenerations folds a shard once this many flushed generations wait in it, as a step of
	// the table's maintenance. Default DefaultFoldGenerations; negative: no automatic fold (the
	// fold ceiling, FoldShard and FoldAll still fold).
	FoldGenerations int
	// Maintainer are the options of the table's maintainer (Maintainer); the set adds its fold
	// step to them. Its BackgroundContext also bounds the set's after-flush hooks.
	Maintainer engine.MaintainerOptions
	// Freshness bounds how long an acknowledged row waits before a fold puts it in the base table
	// (where Iceberg readers see it once published): memtables are sealed and flushed once their
	// oldest row is Freshness/4 old (or sooner, Shard.MemtableMaxAge), and a shard whose oldest
	// flushed row is Freshness/4 old folds whatever number of generations it has, checked every
	// Freshness/16; the rest of the bound is left to the fold and the Iceberg publish after it.
	// It acts with background maintenance (the fold is its step) and automatic folds on
	// (FoldGenerations not negative). 0: folds by FoldGenerations only.
	Freshness time.Duration
	// TableID is the incarnation of the table (engine.Manifest.TableID) the set serves: a table
	// dropped and created again under the name is another incarnation and needs a set of its
	// own (the caller compares it, ShardSet.TableID).
	TableID string
}

// ConfigFreshness is the table configuration key of a MemWAL table's freshness bound
// (ShardSetOptions.Freshness), in milliseconds; "0" turns folds by age off for the table.
const ConfigFreshness = "flight_sink.memwal.freshness_ms"

// FreshnessOf is version m's ConfigFreshness, or def when it sets none (or no valid non-negative
// number of milliseconds).
func FreshnessOf(m *engine.Manifest, def time.Duration) time.Duration {
	if ms, err := strconv.ParseInt(m.Config[ConfigFreshness], 10, 64); err == nil && ms >= 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return def
}

// EnsureDefaults fills unset options with their defaults and returns o.
func (o *ShardSetOptions) EnsureDefaults() *ShardSetOptions {
	if o.FoldGenerations == 0 {
		o.FoldGenerations = DefaultFoldGenerations
	}
	if o.Shard.MaxUnfoldedGenerations <= 0 {
		o.Shard.MaxUnfoldedGenerations = 16
		if o.FoldGenerations > 0 {
			o.Shard.MaxUnfoldedGenerations = 4 * o.FoldGenerations
		}
	}
	o.Shard.EnsureDefaults()
	if age := o.Freshness / 4; age > 0 && (o.Shard.MemtableMaxAge < 0 || o.Shard.MemtableMaxAge > age) {
		o.Shard.MemtableMaxAge = age
	}
	if o.Maintainer.Logger == nil {
		o.Maintainer.Logger = o.Shard.Logger
	}
	if o.Maintainer.BackgroundContext == nil {
		o.Maintainer.BackgroundContext = context.Background()
	}
	return o
}

// NewShardSet returns the set of tbl's shards ids (TableShardIDs of its manifest). It claims
// nothing.
func NewShardSet(tbl *engine.Table, ids []string, o *ShardSetOptions) *ShardSet {
	ss := &ShardSet{table: tbl, ids: ids, gate: newEpochGate()}
	if o != nil {
		ss.opts = *o
	}
	ss.opts.EnsureDefaults()
	n := len(ids)
	ss.writers, ss.foldedAt, ss.stallFolds = make([]*Shard, n), make([]uint64, n), make([]chan struct{}, n)
	ss.gauge = registerBacklogGauges(ss)
	ss.own = newOwnership(ss)
	if ss.opts.Freshness > 0 {
		ss.freshStop = make(chan struct{})
		ss.hooks.Add(1)
		go ss.foldByAge(ss.freshStop) // its own copy: Close clears the field
	}
	return ss
}

// TableID returns the table incarnation the set serves (ShardSetOptions.TableID).
func (ss *ShardSet) TableID() string { return ss.opts.TableID }

// IDs returns the shard ids, in shard index order. The caller must not modify them.
func (ss *ShardSet) IDs() []string { return ss.ids }

// Table returns the table the shards belong to.
func (ss *ShardSet) Table() *engine.Table { return ss.table }

// writer returns an open writer of shard i, opening (claiming) it when the set has none or the
// one it has failed.
func (ss *ShardSet) writer(ctx context.Context, i int) (*Shard, error) {
	return ss.open(ctx, i, "", nil)
}

// open is writer with the claim's reason (empty: start, or fenced when the set's writer of the
// shard failed) and condition (claimIf, nil for none: ManifestStore.claimEpoch). It records the
// set's instance as the shard's owner and counts the claim.
func (ss *ShardSet) open(ctx context.Context, i int, reason string, claimIf func(*ShardManifest) error) (*Shard, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.hookMu.Lock()
	closed := ss.closed
	ss.hookMu.Unlock()
	if closed {
		return nil, fmt.Errorf("memwal shard %s of table %s: %w", ss.ids[i], ss.table.Name(), ErrClosed)
	}
	if w := ss.writers[i]; w != nil && w.Err() == nil {
		return w, nil
	}
	if reason == "" {
		reason = ClaimStart
	}
	if w := ss.writers[i]; w != nil {
		w.Close()
		ss.writers[i] = nil
		ss.own.noteFenced(i)
	}
	if fenced := ss.own.takeFenced(i); fenced && reason == ClaimStart {
		reason = ClaimFenced
	}
	o := ss.opts.Shard
	o.AfterFlush = func(uint64) { ss.afterFlush() }
	o.owner, o.claimIf = ss.own.instance, claimIf
	w, err := OpenShard(ctx, ss.table, ss.ids[i], &o)
	if err != nil {
		return nil, err
	}
	ss.countClaim(ctx, reason)
	ss.writers[i] = w
	ss.startOwnerLoop()
	return w, nil
}

// dropWriter forgets writer w of shard i (after it was fenced), so the next use reopens it.
func (ss *ShardSet) dropWriter(i int, w *Shard) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.writers[i] == w {
		w.Close()
		ss.writers[i] = nil
	}
}

// Readers returns a reader of every shard: this process's writer where it has one (it sees its
// own memtable), else the read-only view of the shard's stored manifest and WAL. It never opens
// (claims) a shard: reads, table_stats and epoch_status must not fence the server that writes it.
func (ss *ShardSet) Readers() []ShardReader {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]ShardReader, len(ss.ids))
	for i, id := range ss.ids {
		if w := ss.writers[i]; w != nil && w.Err() == nil {
			out[i] = w
		} else {
			o := ss.opts.Shard
			out[i] = NewStoredShard(ss.table, id, &o)
		}
	}
	return out
}

// Scan reads the latest base version merged with every shard (ScanMerged), claiming none. The
// shards are read in one cut: every epoch put through BeginEpoch is in the read whole or not at
// all (epochGate).
func (ss *ShardSet) Scan(ctx context.Context, o engine.ScanOptions) (array.RecordReader, error) {
	return scanMerged(ctx, ss.table, ss.Readers(), ss.gate, o)
}

// Pin captures the MemWAL rows over the latest base version (a PinnedRead) in one cut, as Scan.
func (ss *ShardSet) Pin(ctx context.Context) (*PinnedRead, error) {
	return pin(ctx, ss.table, ss.Readers(), ss.gate)
}

// BeginEpoch registers epoch id (nil: a put without identity) before its first part is put into
// the shards, and returns the context to put its parts with; call end once every part has
// returned, whatever their outcome. Until end, reads of the set (Scan, Pin) hide the parts put
// with that context, so an epoch of several shards becomes visible to them at once; an earlier
// copy of the epoch (a replay finds it held) stays visible. It waits while a row operation holds
// the set (Quiesce), so the epoch lands after it.
func (ss *ShardSet) BeginEpoch(ctx context.Context, id *epochid.ID) (putCtx context.Context, end func(), err error) {
	token, end, err := ss.gate.begin(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return withPutToken(ctx, token), end, nil
}

// Quiesce holds the set for an operation that must see every acknowledged row and no epoch half:
// it waits for the epochs in flight (BeginEpoch) to end, and epochs that begin later wait until
// release. Reads go on meanwhile.
func (ss *ShardSet) Quiesce(ctx context.Context) (release func(), err error) {
	return ss.gate.quiesce(ctx)
}

// Stats describes every shard, claiming none: a shard this process writes is described by its
// writer, any other by the read-only view of storage.
func (ss *ShardSet) Stats(ctx context.Context) ([]ShardStats, error) {
	out := make([]ShardStats, len(ss.ids))
	for i, r := range ss.Readers() {
		var err error
		if out[i], err = ReadStats(ctx, r); err != nil {
			return nil, fmt.Errorf("memwal shard %s of table %s: %w", ss.ids[i], ss.table.Name(), err)
		}
	}
	return out, nil
}

// TableState describes the table's latest version with its shards in one consistent snapshot
// (ReadLatestTableState), the shards' own details (Stats) included, claiming none. The keyed
// rows a read returns are counted in the cut a read takes (Scan).
func (ss *ShardSet) TableState(ctx context.Context) (TableState, error) {
	return readLatestState(ctx, ss.table, ss.Readers(), ss.gate, ss.Stats)
}

// Put puts batches, all of epoch id, into shard i; m is the base version the epoch was checked
// against. It claims the shard when this set has no writer of it, and stalls first at the fold
// ceiling (nothing is written by a put that gives up there). Before each attempt held, the
// caller's dedupe rule, says whether the shard already holds the epoch; then nothing is put and
// Put reports true, as it does when a concurrent put of the same epoch won. A writer found fenced
// or closed is reopened once and the put retried: a fenced put acknowledged nothing, and the
// reopened writer replays the WAL, so the retry cannot duplicate.
func (ss *ShardSet) Put(ctx context.Context, i int, m *engine.Manifest, id *epochid.ID, batches []arrow.RecordBatch, held func(*Shard) (bool, error)) (bool, error) {
	for attempt := 0; ; attempt++ {
		w, err := ss.writer(ctx, i)
		if err != nil {
			return false, err
		}
		if done, err := held(w); err != nil || done {
			return done, err
		}
		if attempt == 0 && m != nil && !arrowschema.EqualIgnoringFieldIDs(w.Schema(), m.ArrowSchema()) {
			// The table schema changed since the shard was opened (a schema merge): reopen it,
			// which reads its WAL through the new schema, so the put is stored in it.
			ss.dropWriter(i, w)
			continue
		}
		// The ceiling is judged before the put: a put that gives up there wrote nothing.
		if err = ss.holdCeiling(ctx, m, i, w); err == nil {
			_, err = w.Put(ctx, id, batches...)
		}
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, epochid.ErrCommitted):
			return true, nil // a concurrent put of the same epoch won
		case (errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed)) && ss.unroute(i):
			// A shard this set owned for its unkeyed puts: another server claimed it. Reclaiming
			// it would fence that server in turn; the caller routes the put again (PutUnkeyed).
			ss.opts.Shard.Logger.Warn("memwal: another server claimed a shard this server owned; routing again", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
			ss.dropWriter(i, w)
			return false, fmt.Errorf("%w: %w", errReroute, err)
		case (errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed)) && attempt == 0:
			ss.opts.Shard.Logger.Warn("memwal writer fenced or closed; reopening the shard", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
			ss.dropWriter(i, w)
			ss.own.noteFenced(i) // the reopen is a claim of reason "fenced"
			continue
		default:
			return false, err
		}
	}
}

func (ss *ShardSet) all() []int {
	out := make([]int, len(ss.ids))
	for i := range out {
		out[i] = i
	}
	return out
}

// Close closes the writers the set opened and waits for its after-flush hooks; a later Put
// fails with ErrClosed. Acknowledged puts are durable in the WAL already; the next writer
// replays them. Background maintenance runs the hooks scheduled are the maintainer's
// (engine.Maintenance.Wait); a fold in flight needs no writer.
//
// The shards the set owns are released (their Owner cleared, best effort), so that the next server
// to start, this one restarted included, claims them at once instead of after the lease TTL.
func (ss *ShardSet) Close() {
	ss.hookMu.Lock()
	ss.closed = true
	if ss.freshStop != nil {
		close(ss.freshStop)
		ss.freshStop = nil
	}
	ss.hookMu.Unlock()
	ss.stopOwnerLoop()
	ss.hooks.Wait()
	if ss.gauge != nil {
		_ = ss.gauge.Unregister()
	}
	ctx, cancel := context.WithTimeout(ss.opts.Maintainer.BackgroundContext, 5*time.Second)
	defer cancel()
	for i, w := range ss.healthyWriters() {
		ss.release(ctx, i, w)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, w := range ss.writers {
		if w != nil {
			w.Close()
			ss.writers[i] = nil
		}
	}
}
