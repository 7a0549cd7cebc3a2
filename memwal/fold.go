package memwal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// Transaction properties stamped on the Append that folds a shard's generations into the table.
const (
	PropFoldShard       = "flight_sink.memwal.shard"
	PropFoldGenerations = "flight_sink.memwal.generations" // "<first>-<last>"
	PropFoldRows        = "flight_sink.memwal.rows"
)

// RetirePolicy reports whether a merged generation's files may be deleted now. The fold only
// asks about generations at or below the shard's merged watermark, which the base table holds.
// The default is index catch-up (engine): every index of the latest base version is proven to
// cover the generation (engine.IndexesCoverGeneration), which always holds on a table without
// indices.
type RetirePolicy func(shard string, generation uint64) bool

// FoldOptions configure a Folder. The zero value is usable.
type FoldOptions struct {
	// CanRetire gates the deletion of merged generations' directories. Nil means index catch-up:
	// a generation is retired once every index of the latest base version covers it (at once on
	// a table without indices). A generation it holds back is deleted by a later fold of
	// the shard once it says yes.
	CanRetire RetirePolicy
	// Properties are stamped on the fold transaction, beside the PropFold* ones.
	Properties map[string]string
	// Shard options (manifest retries and retention, allocator, logger).
	Shard Options
	// Turns, when set, is shared with other Folders so that folds of one shard among
	// them run one at a time (a ShardSet passes its own). Nil: the Folder's own. Folds
	// that do not share turns stay correct (the base manifest's watermark decides), they only
	// race for the same generations.
	Turns *FoldTurns
	// BeforeDrain, when set, runs after the fold committed (or was found already merged) and
	// before the drain; an error stops the fold there. It exists for crash-safety tests.
	BeforeDrain func(ctx context.Context, shard string) error
}

// FoldTurns serialises the folds of each shard among the Folders that share it
// (FoldOptions.Turns). The zero value is ready to use; safe for concurrent use.
type FoldTurns struct {
	mu     sync.Mutex
	shards map[string]*sync.Mutex // by table and shard
}

// take waits for shard's turn and returns the function that ends it.
func (ct *FoldTurns) take(table, shard string) func() {
	ct.mu.Lock()
	if ct.shards == nil {
		ct.shards = make(map[string]*sync.Mutex)
	}
	k := table + "|" + shard
	mu := ct.shards[k]
	if mu == nil {
		mu = &sync.Mutex{}
		ct.shards[k] = mu
	}
	ct.mu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// Folder folds a table's MemWAL shards into its base table. It needs no ownership
// of a shard and so never fences its writer: the base manifest's merged-generation watermark,
// advanced in the fold's own transaction, proves which generations the table holds, and the drain
// removes only those. A Folder is safe for concurrent use; folds of one shard run one at
// a time among the Folders sharing FoldOptions.Turns.
type Folder struct {
	table *engine.Table
	opts  FoldOptions
}

// NewFolder returns a Folder of tbl's shards.
func NewFolder(tbl *engine.Table, o *FoldOptions) *Folder {
	c := &Folder{table: tbl}
	if o != nil {
		c.opts = *o
	}
	c.opts.Shard.EnsureDefaults()
	if c.opts.Turns == nil {
		c.opts.Turns = &FoldTurns{}
	}
	return c
}

// FoldShard folds every flushed generation of shard that the base table does not hold yet into
// the table and reclaims the merged generations. It returns how many generations it drained from
// the shard manifest: 0 when nothing is pending or the shard has no manifest.
//
// The sequence, each step safe to interrupt:
//
//  1. Read the shard manifest and the base manifest's merged watermark W for the shard.
//  2. Append the rows of every listed generation above W to the table in ONE transaction (an
//     Upsert by the primary key when the table has one) that also raises the watermark to the
//     highest of them. From that commit on, readers skip those
//     generations. If the engine finds them already merged (another folder, or a rerun), the
//     fold is skipped.
//  3. Drain: remove from the current shard manifest exactly the generations read in step 1 that
//     are at or below the watermark; a generation flushed meanwhile stays.
//  4. Delete the drained generations' directories, best effort, once CanRetire allows.
//
// replay_after_wal_entry_position is never touched: the generations' WAL entries were behind it
// before the fold began.
func (c *Folder) FoldShard(ctx context.Context, shard string) (int, error) {
	return c.foldShard(ctx, shard, 0)
}

// FoldShardIfReady is FoldShard when at least minGenerations generations are waiting to be
// folded, and returns 0 without touching anything otherwise.
func (c *Folder) FoldShardIfReady(ctx context.Context, shard string, minGenerations int) (int, error) {
	return c.foldShard(ctx, shard, max(minGenerations, 1))
}

func (c *Folder) foldShard(ctx context.Context, shard string, minPending int) (int, error) {
	defer c.opts.Turns.take(c.table.Store().String()+"|"+c.table.Name(), shard)()
	log := c.opts.Shard.Logger
	ms := NewManifestStore(c.table.Store(), c.table.Name(), shard, &c.opts.Shard)
	read, err := ms.ReadLatest(ctx)
	if errors.Is(err, ErrNoManifest) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	base, err := c.table.Latest(ctx)
	if err != nil {
		return 0, err
	}
	watermark := base.MemWALMerged[shard]
	pending := read.GenerationsAbove(watermark)
	// through is where the fold leaves the watermark: past the pending generations and past any
	// quarantined one above it (recorded by a fold that stopped before raising the watermark).
	quarantined := read.quarantinedAbove(watermark)
	through := quarantined
	if n := len(pending); n > 0 {
		through = max(through, pending[n-1].Generation)
	}
	if len(pending) < minPending && (len(pending) > 0 || quarantined == 0) {
		return 0, nil // with nothing pending, a quarantined generation is passed at once
	}
	if through > watermark {
		watermark, err = c.fold(ctx, shard, ms.paths, base, pending, through)
		if isFoldDataError(err) {
			// Some generation's data cannot be appended: fold them one at a time, setting aside
			// the ones that fail so that the others, and the shard's later generations, fold.
			watermark, err = c.foldEach(ctx, shard, ms, pending, through, err)
		}
		if err != nil {
			return 0, err
		}
	}
	if c.opts.BeforeDrain != nil {
		if err := c.opts.BeforeDrain(ctx, shard); err != nil {
			return 0, fmt.Errorf("memwal shard %s: before drain: %w", shard, err)
		}
	}

	// Drain exactly the generations we read that the base table holds, against the current
	// manifest: a generation flushed after step 1 is not in merged and survives.
	merged := make(map[uint64]bool)
	for _, g := range read.FlushedGenerations {
		if g.Generation <= watermark {
			merged[g.Generation] = true
		}
	}
	var drained []FlushedGeneration
	if len(merged) > 0 {
		_, err := ms.commitUnowned(ctx, "drain merged generations", func(cur *ShardManifest) error {
			drained = drained[:0]
			keep := cur.FlushedGenerations[:0]
			for _, g := range cur.FlushedGenerations {
				if merged[g.Generation] {
					drained = append(drained, g)
				} else {
					keep = append(keep, g)
				}
			}
			if len(drained) == 0 {
				return errNoUpdate // drained already (by a folder that was interrupted after it)
			}
			cur.FlushedGenerations = keep
			return nil
		})
		if err != nil {
			// The rows are in the table and the watermark hides the generations from readers;
			// the next fold drains them.
			return 0, fmt.Errorf("memwal shard %s: drain merged generations: %w", shard, err)
		}
	}

	// Delete after the drain, never before: until the manifest stopped listing a generation, a
	// reader of an older base version could still resolve it.
	canRetire := c.retirePolicy(ctx)
	for _, g := range drained {
		c.retire(ctx, shard, ms.paths, g.Generation, canRetire, log)
	}
	c.sweep(ctx, shard, ms, watermark, canRetire, log)
	return len(drained), nil
}

// retirePolicy returns CanRetire, or the index catch-up policy judged on the latest base
// version (read now, after the fold: catch-up positions only grow).
func (c *Folder) retirePolicy(ctx context.Context) RetirePolicy {
	if c.opts.CanRetire != nil {
		return c.opts.CanRetire
	}
	m, err := c.table.Latest(ctx)
	if err != nil {
		c.opts.Shard.Logger.Warn("memwal: cannot read the base table to check index catch-up; keeping merged generations for a later fold",
			"table", c.table.Name(), "err", err)
		return func(string, uint64) bool { return false }
	}
	return func(shard string, g uint64) bool { return engine.IndexesCoverGeneration(m, shard, g) }
}

// fold writes the rows of gens (ascending, all above base's watermark) into the table in one
// transaction that raises the shard's merged watermark to the last of them: an Append, or an
// Upsert by the primary key when the table has one (so the base table holds one row per key,
// the newest). It returns the watermark after the fold: the last generation, or whatever a
// concurrent folder raised it to when the engine finds the generations already merged.
//
// through (at least the last of gens) is the watermark the fold sets: above the last of gens when
// quarantined generations follow them. With no gens the fold appends nothing and only raises the
// watermark past quarantined generations.
func (c *Folder) fold(ctx context.Context, shard string, paths shardPaths, base *engine.Manifest, gens []FlushedGeneration, through uint64) (uint64, error) {
	first, last := base.MemWALMerged[shard]+1, through
	if len(gens) > 0 {
		first = gens[0].Generation
	}
	txn := &engine.Transaction{Operation: engine.OpAppend}
	discard := func() {}
	var rows int64
	var err error
	switch {
	case len(gens) == 0:
	case len(base.PrimaryKey) == 0:
		txn, discard, rows, err = c.prepareAppend(ctx, paths, base, gens)
	default:
		txn, discard, rows, err = c.prepareUpsert(ctx, paths, base, gens)
	}
	if err != nil {
		return 0, fmt.Errorf("memwal shard %s: fold generations %d-%d: %w", shard, first, last, asFoldDataError(err))
	}
	props := make(map[string]string, len(c.opts.Properties)+3)
	for k, v := range c.opts.Properties {
		props[k] = v
	}
	props[PropFoldShard] = shard
	props[PropFoldGenerations] = fmt.Sprintf("%d-%d", first, last)
	props[PropFoldRows] = strconv.FormatInt(rows, 10)
	txn.Properties = props
	txn.ReadVersion = base.Version
	// The watermark this fold read: if another folder (in another process) raised it since,
	// the engine refuses the fold instead of counting the overlapping generations twice.
	txn.MemWALMerged = map[string]uint64{shard: last}
	txn.MemWALMergedFrom = map[string]uint64{shard: base.MemWALMerged[shard]}
	if _, err := c.table.Commit(ctx, txn); err != nil {
		if engine.CommitDefinitelyFailed(err) {
			discard()
		} // else the outcome is unknown: the files may be referenced, leave them to cleanup
		if !errors.Is(err, engine.ErrGenerationAlreadyMerged) {
			return 0, fmt.Errorf("memwal shard %s: fold generations %d-%d: %w", shard, first, last, err)
		}
		now, lerr := c.table.Latest(ctx)
		if lerr != nil {
			return 0, lerr
		}
		c.opts.Shard.Logger.Info("memwal: generations already merged, skipping to the drain", "table", c.table.Name(),
			"shard", shard, "generations", props[PropFoldGenerations], "watermark", now.MemWALMerged[shard])
		return now.MemWALMerged[shard], nil
	}
	return last, nil
}

// prepareAppend streams the generations' rows into new data files and returns the uncommitted
// Append, a function that deletes its files, and the row count.
func (c *Folder) prepareAppend(ctx context.Context, paths shardPaths, base *engine.Manifest, gens []FlushedGeneration) (*engine.Transaction, func(), int64, error) {
	schema := base.ArrowSchema()
	w, err := c.table.NewWriterFor(schema, schema, engine.InBackground(), engine.WithoutPartitionLimit()) // a fold is background work
	if err != nil {
		return nil, nil, 0, err
	}
	var rows int64
	for _, g := range gens {
		err := readGeneration(ctx, c.table.Store(), paths, g, schema, c.opts.Shard.Allocator, true, func(b arrow.RecordBatch) error {
			rows += b.NumRows()
			return w.Write(ctx, b)
		})
		if err != nil {
			w.Abort(ctx)
			return nil, nil, 0, err
		}
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		w.Abort(ctx)
		return nil, nil, 0, err
	}
	return &engine.Transaction{Operation: engine.OpAppend, Fragments: frags}, func() { w.Abort(ctx) }, rows, nil
}

// prepareUpsert reads the generations' rows, oldest first, and prepares one Upsert of them: the
// last row of a key (the newest generation, the latest WAL position) is the one written.
func (c *Folder) prepareUpsert(ctx context.Context, paths shardPaths, base *engine.Manifest, gens []FlushedGeneration) (*engine.Transaction, func(), int64, error) {
	schema := base.ArrowSchema()
	var batches []arrow.RecordBatch
	defer func() { arrowschema.ReleaseBatches(batches) }()
	var rows int64
	for _, g := range gens {
		err := readGeneration(ctx, c.table.Store(), paths, g, schema, c.opts.Shard.Allocator, true, func(b arrow.RecordBatch) error {
			b.Retain()
			batches = append(batches, b)
			rows += b.NumRows()
			return nil
		})
		if err != nil {
			return nil, nil, 0, err
		}
	}
	txn, err := c.table.PrepareUpsert(ctx, base, batches, engine.InBackground()) // a fold is background work
	if err != nil {
		return nil, nil, 0, err
	}
	return txn, func() { c.table.Discard(ctx, txn) }, rows, nil
}

// retire deletes generation g's directory if the retirement policy allows; a failure only warns.
func (c *Folder) retire(ctx context.Context, shard string, paths shardPaths, g uint64, canRetire RetirePolicy, log *slog.Logger) {
	if !canRetire(shard, g) {
		return
	}
	dir := paths.root + makeGenDir(g)
	if err := c.table.Store().DeletePrefix(ctx, dir); err != nil {
		log.Warn("memwal: could not delete merged generation; it is unreferenced and a later fold retries",
			"table", c.table.Name(), "shard", shard, "generation", g, "dir", dir, "err", err)
	}
}

// sweep deletes generation directories at or below the watermark that the shard manifest no
// longer lists: left by a fold interrupted between drain and delete, held back by the
// retirement policy, or written by a flush that never committed.
func (c *Folder) sweep(ctx context.Context, shard string, ms *ManifestStore, watermark uint64, canRetire RetirePolicy, log *slog.Logger) {
	if watermark == 0 {
		return
	}
	names, err := objstore.ListPrefixes(ctx, c.table.Store(), ms.paths.genPrefix())
	if err != nil {
		log.Warn("memwal: could not list generations to sweep", "table", c.table.Name(), "shard", shard, "err", err)
		return
	}
	cur, err := ms.ReadLatest(ctx)
	if err != nil {
		return
	}
	for _, n := range names {
		g, ok := parseGenDir(n)
		if !ok || g > watermark {
			continue
		}
		if _, listed := cur.Generation(g); listed || cur.isQuarantined(g) {
			continue
		}
		c.retire(ctx, shard, ms.paths, g, canRetire, log)
	}
}
