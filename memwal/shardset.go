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
	"github.com/flight-sink/flight-sink/internal/panics"
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
	own   *ownership // owner.go: the shards the set owns, leases, dedupe across servers
	gate  *epochGate // visibility.go: epochs against reads (one cut across shards) and row operations

	mu         sync.Mutex
	writers    []*Shard        // by shard index; nil until claimed, or after a failure
	foldedAt   []uint64        // shard i's next generation number when its last fold started
	stallFolds []chan struct{} // the fold a stalled put of shard i runs; closed when it ends

	// hookMu guards closed and the start of hooks. It is apart from mu because the writers'
	// flushers take it: mu is held while a writer closes, which waits for its flusher.
	hookMu sync.Mutex
	closed bool
	hooks  sync.WaitGroup // after-flush hooks in flight, and foldByAge
	// freshStop stops foldByAge (nil when Freshness is 0).
	freshStop chan struct{}
}

// MaintainFold is the MemWAL fold's name as a maintenance step (reports, metrics, the
// PropMaintenance of its commits).
const MaintainFold engine.MaintenanceOperation = "memwal_fold"

// DefaultFoldGenerations is ShardSetOptions.FoldGenerations unless set.
const DefaultFoldGenerations = 4

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

// foldByAge schedules the table's maintenance whenever a shard's oldest flushed row reaches its
// fold age (readyLocked), every Freshness/16, until Close.
func (ss *ShardSet) foldByAge(stop <-chan struct{}) {
	defer ss.hooks.Done()
	t := time.NewTicker(max(ss.opts.Freshness/16, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ss.scheduleFold()
		}
	}
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
// the shards; call end once every part has returned, whatever their outcome. Until end, reads of
// the set (Scan, Pin) hide the epoch in every shard, so an epoch of several shards becomes
// visible to them at once. It waits while a row operation holds the set (Quiesce), so the epoch
// lands after it.
func (ss *ShardSet) BeginEpoch(ctx context.Context, id *epochid.ID) (end func(), err error) {
	return ss.gate.begin(ctx, id)
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

// Flush seals and flushes the memtables of the shards at the given indexes (every shard when
// none is given) to generations. It flushes the shards this set writes and claims (reason
// "flush") those that are free (owner.go), releasing them after on a table without a primary key;
// a shard another live server owns is that server's to flush and is skipped, so a flush never
// fences a live owner. A writer of the set that another server fenced (took the shard over) is
// dropped, and the shard is then flushed as one the set does not write: skipped while its new
// owner lives.
func (ss *ShardSet) Flush(ctx context.Context, shards ...int) error {
	if len(shards) == 0 {
		shards = ss.all()
	}
	for _, i := range shards {
		w := ss.healthyWriters()[i]
		if w != nil {
			err := w.Flush(ctx)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrFenced) {
				return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
			}
			// Fenced: the shard's new owner replays its WAL, this writer's acknowledged puts
			// included, so nothing is lost by dropping the writer.
			ss.opts.Shard.Logger.Warn("memwal: another server claimed a shard this server wrote; flushing it is that server's", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
			ss.unroute(i)
			ss.dropWriter(i, w)
			ss.own.noteFenced(i)
		}
		if err := ss.flushUnwritten(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// flushUnwritten flushes shard i, which the set does not write, when it is free: it claims the
// shard (reason "flush"), flushes it and releases it after on a table without a primary key. A
// shard that holds nothing, or that a live server owns, is skipped.
func (ss *ShardSet) flushUnwritten(ctx context.Context, i int) error {
	m, err := ss.readManifest(ctx, i)
	if err != nil {
		return fmt.Errorf("flush memwal shard %s: %w", ss.ids[i], err)
	}
	if m == nil || !ss.observe(i, m) {
		return nil // nothing was ever written there, or a live server owns it
	}
	w, err := ss.open(ctx, i, ClaimFlush, ss.claimFree(i))
	if errors.Is(err, errShardTaken) {
		return nil
	} else if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
	}
	ss.releaseUnrouted(ctx, i, w)
	return nil
}

// FoldShard folds shard i into the base table when it has at least minGenerations flushed
// generations waiting (Folder.FoldShardIfReady) and returns the generations reclaimed. It
// is the fold_memwal_shard action's fold, made on request: its commit carries no maintenance
// property, and the table's maintenance runs after it (MaintainAfterFold) as after any commit.
func (ss *ShardSet) FoldShard(ctx context.Context, i, minGenerations int) (int, error) {
	return ss.folder(nil).FoldShardIfReady(ctx, ss.ids[i], max(minGenerations, 1))
}

// FoldAll flushes every shard's memtable and folds every flushed generation into the base table:
// what a complete epoch must do before it overwrites the table, so that the Overwrite replaces
// the shards' rows too.
//
// It claims every shard it does not write (reason "fold_all"), fencing their owners: an overwrite
// must hold every row acknowledged before it. On a table without a primary key it releases those
// shards after (releaseUnrouted).
//
// A writer of the set that another server fenced (took the shard over) is dropped and the shard
// claimed again: the claim replays the shard's WAL, the dropped writer's acknowledged puts
// included. Each writer of the set is confirmed as its shard's owner (one manifest probe), even
// one with nothing to flush.
func (ss *ShardSet) FoldAll(ctx context.Context) error {
	for i := range ss.ids {
		for attempt := 0; ; attempt++ {
			claimed := ss.healthyWriters()[i] == nil
			w, err := ss.open(ctx, i, ClaimFoldAll, nil)
			if err != nil {
				return err
			}
			err = w.Flush(ctx)
			if err == nil && !claimed {
				// A writer with nothing to flush answers without reading the shard manifest:
				// confirm that it still owns the shard, or the rows another server acknowledged
				// there since it took the shard over stay out of the fold.
				err = w.confirmWriter(ctx)
			}
			if errors.Is(err, ErrFenced) && !claimed && attempt == 0 {
				ss.opts.Shard.Logger.Warn("memwal: another server claimed a shard this server wrote; claiming it again to fold every shard", "table", ss.table.Name(), "shard", w.ShardID(), "err", err)
				ss.unroute(i)
				ss.dropWriter(i, w)
				ss.own.noteFenced(i)
				continue
			}
			if err != nil {
				return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
			}
			if claimed {
				defer ss.releaseUnrouted(ctx, i, w)
			}
			break
		}
	}
	c := ss.folder(nil)
	for _, id := range ss.ids {
		if _, err := c.FoldShard(ctx, id); err != nil {
			return fmt.Errorf("fold memwal shard %s: %w", id, err)
		}
	}
	return nil
}

// Maintainer returns the table's maintainer with the set's fold step. Every maintainer of a
// table with shards should be this one, so that a background run serves every trigger.
func (ss *ShardSet) Maintainer() *engine.TableMaintainer {
	o := ss.opts.Maintainer
	o.Steps = append([]engine.MaintenanceStep{ss.FoldStep()}, o.Steps...)
	return engine.NewTableMaintainer(ss.table, &o)
}

// MaintainAfterFold runs the table's maintenance after a fold made outside maintenance (a
// fold_memwal_shard, a stalled put's fold): the fold is a commit like any other, it adds
// fragments and lets index catch-up advance.
func (ss *ShardSet) MaintainAfterFold(ctx context.Context) error {
	m, err := ss.table.Latest(ctx)
	if err != nil {
		return err
	}
	return ss.Maintainer().MaintainAfterWrite(ctx, m)
}

// AfterPut starts the table's maintenance when the fold step has work after puts of epoch data
// (m is the base version the puts were checked against): in inline mode it runs before AfterPut
// returns, and only a strict step failing makes it return an error (the puts are durable all the
// same: their replay is a duplicate).
func (ss *ShardSet) AfterPut(ctx context.Context, m *engine.Manifest) error {
	if !ss.foldDue() {
		return nil
	}
	return ss.Maintainer().MaintainAfterWrite(ctx, m)
}

// afterFlush is the writers' AfterFlush hook. The flusher runs behind the puts, so the put that
// sealed a memtable has returned before its generation is flushed; with background maintenance
// the flush itself schedules the fold that put could not, and a stream that stops leaves no more
// than FoldGenerations-1 generations waiting. Inline maintenance folds only in puts, and "off"
// never (but for a put stalled at the fold ceiling).
func (ss *ShardSet) afterFlush() {
	ss.hookMu.Lock()
	if ss.closed {
		ss.hookMu.Unlock()
		return
	}
	ss.hooks.Add(1)
	ss.hookMu.Unlock()
	go func() { // the hook must not wait: the writer's next flush waits for it
		defer ss.hooks.Done()
		ss.scheduleFold()
	}()
}

// scheduleFold starts the table's background maintenance when a shard is ready to fold.
func (ss *ShardSet) scheduleFold() {
	if !ss.foldDue() {
		return
	}
	log := ss.opts.Maintainer.Logger
	_ = panics.Recover(log, "memwal fold after a flush", func() error {
		ctx := ss.opts.Maintainer.BackgroundContext
		m, err := ss.table.Latest(ctx)
		if err != nil {
			return nil // the next put, flush or tick looks again
		}
		mt := ss.Maintainer()
		if mode, err := mt.Mode(m); err != nil || mode != engine.MaintenanceBackground {
			return nil
		}
		return mt.MaintainAfterWrite(ctx, m) // schedules: the run reports its own errors
	})
}

// FoldStep is the MemWAL fold as a step of the table's maintenance (engine.MaintenanceStep): it
// is due when a shard this set writes has flushed FoldGenerations generations, one of them since
// its last fold started (a writer's view of its generations is only refreshed by its own
// flushes, so a shard just folded is not tried again until it flushes), and it folds each such
// shard. Best effort: a fold that fails is logged, and the shard's next flush tries again.
func (ss *ShardSet) FoldStep() engine.MaintenanceStep {
	return engine.MaintenanceStep{
		Operation: MaintainFold,
		Policy:    engine.BestEffort,
		Due:       func(context.Context, *engine.Manifest) (bool, error) { return ss.foldDue(), nil },
		Run:       ss.fold,
	}
}

func (ss *ShardSet) fold(ctx context.Context, props map[string]string) error {
	var errs []error
	c := ss.folder(props)
	for i, id := range ss.ids {
		need, ok := ss.startFold(i)
		if !ok {
			continue
		}
		if _, err := c.FoldShardIfReady(ctx, id, need); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// foldDue reports whether a shard is ready to fold (readyLocked).
func (ss *ShardSet) foldDue() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := range ss.ids {
		if ss.readyLocked(i) {
			return true
		}
	}
	return false
}

// startFold reports whether shard i is ready to fold and, if so, records that its fold starts;
// need is the number of generations the fold needs (one when it folds by age).
func (ss *ShardSet) startFold(i int) (need int, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if need = ss.needLocked(i); need == 0 {
		return 0, false
	}
	ss.foldedAt[i] = ss.writers[i].Stats().NextGeneration
	return need, true
}

// readyLocked: this set's writer of shard i has flushed a generation since its last fold started,
// and either automatic folds are on and FoldGenerations generations wait, or the oldest flushed
// row is a quarter of the freshness bound old. REQUIRES: ss.mu.
func (ss *ShardSet) readyLocked(i int) bool { return ss.needLocked(i) > 0 }

// needLocked is the number of generations shard i's fold needs when it is ready (readyLocked),
// else 0. REQUIRES: ss.mu.
func (ss *ShardSet) needLocked(i int) int {
	w := ss.writers[i]
	if w == nil {
		return 0
	}
	st := w.Stats()
	if st.Generations == 0 || st.NextGeneration <= ss.foldedAt[i] {
		return 0
	}
	need := ss.opts.FoldGenerations
	if need < 0 {
		return 0 // automatic folds are off
	}
	if st.Generations >= need {
		return need
	}
	if f := ss.opts.Freshness; f > 0 && !st.OldestGeneration.IsZero() && time.Since(st.OldestGeneration) >= f/4 {
		return 1
	}
	return 0
}

// folder returns a Folder that takes this set's fold turns and stamps props.
func (ss *ShardSet) folder(props map[string]string) *Folder {
	return NewFolder(ss.table, &FoldOptions{Shard: ss.opts.Shard, Turns: &ss.turns, Properties: props})
}

func (ss *ShardSet) all() []int {
	out := make([]int, len(ss.ids))
	for i := range out {
		out[i] = i
	}
	return out
}

// Put stall outcomes (the "outcome" attribute of flight_sink.memwal.put.stalls).
const (
	putStallFolded   = "folded"      // this put ran the fold that made room
	putStallWaited   = "waited"      // another fold, or the flusher, made room
	putStallNoChange = "no_progress" // nothing changed after several rounds; the put went ahead
	putStallFailed   = "failed"      // ctx ended or the fold failed; nothing written
)

// putStallRounds bounds the rounds of one stall that change nothing before the put goes ahead
// anyway: a fold folds every flushed generation, so one round normally suffices.
const putStallRounds = 3

// holdCeiling returns at once when shard i's backlog, as writer w and base version m see it, is
// below the fold ceiling, and otherwise stalls until a fold has brought it below.
func (ss *ShardSet) holdCeiling(ctx context.Context, m *engine.Manifest, i int, w *Shard) error {
	limit, shard, log := ss.opts.Shard.MaxUnfoldedGenerations, ss.ids[i], ss.opts.Shard.Logger
	backlog := func(m *engine.Manifest) (unfolded, sealed int) {
		// Generations are numbered densely from 1 by this writer; the fold watermark is the last
		// one the base table holds.
		st := w.Stats()
		if last, merged := st.NextGeneration-1, m.MemWALMerged[shard]; st.NextGeneration > 0 && last > merged {
			unfolded = int(last - merged)
		}
		return unfolded, st.SealedMemtables
	}
	unfolded, sealed := backlog(m)
	if unfolded+sealed < limit {
		return nil
	}
	start, before, outcome := time.Now(), unfolded+sealed, putStallWaited
	end := func(after int, err error) {
		waited := time.Since(start)
		recordPutStall(ctx, outcome, waited)
		logf := log.Warn
		args := []any{"table", ss.table.Name(), "shard", shard, "generations", before, "ceiling", limit,
			"waited", waited.Round(time.Millisecond), "outcome", outcome, "generations_after", after}
		if err != nil {
			logf = log.Error
			args = append(args, "err", err)
		}
		logf("memwal put stalled at the fold ceiling (max unfolded generations) until a fold made room", args...)
	}
	fail := func(err error) error {
		outcome = putStallFailed
		end(-1, err)
		return fmt.Errorf("memwal shard %s: put stalled with %d generations waiting to be folded (ceiling %d); nothing was written: %w", shard, before, limit, err)
	}
	for idle := 0; unfolded+sealed >= limit; {
		if idle == putStallRounds {
			outcome = putStallNoChange
			break
		}
		was := unfolded + sealed
		if unfolded == 0 {
			// Only memtables waiting for the flusher: they become generations as it catches up.
			if err := w.Flush(ctx); err != nil {
				return fail(err)
			}
		} else if ran, err := ss.stallFold(ctx, m, i); err != nil {
			return fail(err)
		} else if ran {
			outcome = putStallFolded
		}
		var err error
		if m, err = ss.table.Latest(ctx); err != nil {
			return fail(err)
		}
		if unfolded, sealed = backlog(m); unfolded+sealed >= was {
			idle++
		}
	}
	end(unfolded+sealed, nil)
	return nil
}

// stallFold folds shard i for a stalled put: it runs the fold when no other stalled put of this
// set is running one, and otherwise waits for that one (or ctx). It reports whether it ran the
// fold. A maintenance fold of the shard that is running is waited for inside the folder (the
// set's fold turns). The fold's commit is a maintenance commit (its trigger "fold_ceiling"),
// and the table's maintenance runs after it as after a fold_memwal_shard.
func (ss *ShardSet) stallFold(ctx context.Context, m *engine.Manifest, i int) (bool, error) {
	ss.mu.Lock()
	if ch := ss.stallFolds[i]; ch != nil {
		ss.mu.Unlock()
		select {
		case <-ch:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	ch := make(chan struct{})
	ss.stallFolds[i] = ch
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		ss.stallFolds[i] = nil
		ss.mu.Unlock()
		close(ch)
	}()
	props := map[string]string{engine.PropMaintenance: string(MaintainFold),
		engine.PropMaintenanceAfter: strconv.FormatUint(m.Version, 10), engine.PropMaintenanceTrigger: "fold_ceiling"}
	n, err := ss.folder(props).FoldShardIfReady(ctx, ss.ids[i], 1)
	if err != nil {
		return true, fmt.Errorf("fold: %w", err)
	}
	if n > 0 {
		// The fold is a base commit like any other; its maintenance failing does not undo it.
		if err := ss.MaintainAfterFold(ctx); err != nil {
			ss.opts.Shard.Logger.Warn("memwal: maintenance after a stalled put's fold failed", "table", ss.table.Name(), "shard", ss.ids[i], "err", err)
		}
	}
	return true, nil
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
