package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/rowset"
	"github.com/flight-sink/flight-sink/internal/panics"
)

// Compaction rewrites small fragments, and fragments with many deleted rows, into fewer and
// denser ones, as one Rewrite transaction. It reads the version it plans against and writes new
// data files without holding anything up: appends, deletes, updates and upserts keep committing
// meanwhile, and the Rewrite rebases over them when it lands (docs/conflicts.md):
//
//   - appends add fragments the Rewrite does not touch;
//   - rows deleted from the old fragments after compaction read them are carried, through the
//     Rewrite's change-of-address mapping, into deletion files of the new fragments;
//   - a Delete/Update/Upsert that read a version before the Rewrite maps its rows through the
//     same mapping when it lands after it.
//
// Only a concurrent Overwrite, or another Rewrite of the same fragments, makes it fail.

// CompactOptions tune Compact. The zero value compacts with the defaults.
type CompactOptions struct {
	// TargetRowsPerFragment is the number of live rows a compacted fragment is filled to; a
	// fragment with fewer live rows is a candidate for merging with its neighbours. Default: the
	// table's Options.TargetRowsPerFragment (1,048,576 unless set).
	TargetRowsPerFragment int64
	// MaxDeletedShare: a fragment whose share of deleted rows exceeds it is rewritten (dropping
	// those rows) even when it has no neighbour to merge with. Default 0.1.
	MaxDeletedShare float64
	// MergeRatio, when positive, makes the plan incremental: a group grows from the newest
	// fragment of a run towards older ones and takes an older fragment only while that fragment
	// holds at most MergeRatio times the live rows already in the group. A large fragment is
	// then rewritten only once enough new rows have piled up behind it, so a row is rewritten
	// about log(target / epoch size) times over its life instead of at every compaction (a
	// stream of 1,000-row epochs into 1 M-row fragments: ~6 times instead of ~33, with ratio 4).
	// Background maintenance uses 4. Zero (an explicit compaction): merge every run of small fragments
	// into as few fragments as the target allows.
	MergeRatio float64
	// Concurrency is how many groups are rewritten at once. Default min(4, GOMAXPROCS).
	Concurrency int
	// BatchSize is the number of rows read per batch. Default 65,536.
	BatchSize int64
	// Properties are stamped on the Rewrite transaction.
	Properties map[string]string
	// Progress, when set, is called after every batch written (for progress bars). Calls are
	// serialized; it must not block for long.
	Progress func(CompactProgress)
}

// CompactProgress reports how far a compaction has come.
type CompactProgress struct {
	FragmentsTotal int   // fragments the plan rewrites
	FragmentsDone  int   // of those, fully rewritten
	RowsTotal      int64 // live rows to rewrite
	RowsDone       int64 // rows written so far
	BytesWritten   int64 // bytes of data files finished so far
}

// CompactReport says what a compaction did.
type CompactReport struct {
	ReadVersion uint64
	// Version is the version the Rewrite committed, 0 when there was nothing to compact.
	Version          uint64
	Groups           int
	FragmentsRemoved int
	FragmentsAdded   int
	RowsRewritten    int64
	// DeletedRowsDropped counts deleted rows the rewrite removed from the data for good.
	DeletedRowsDropped int64
	BytesRead          int64
	BytesWritten       int64
	Duration           time.Duration
}

// CompactionPlan lists the groups of adjacent fragments one compaction rewrites; each group
// becomes as few fragments as TargetRowsPerFragment allows.
type CompactionPlan struct {
	ReadVersion uint64
	Groups      [][]Fragment
}

// Report returns what the plan's compaction will do, as far as the plan tells: its groups, the
// fragments it removes, the live rows it rewrites, the deleted rows it drops and the bytes it
// reads. A dry run reports this; PrepareCompaction starts from it.
func (p CompactionPlan) Report() CompactReport {
	rep := CompactReport{ReadVersion: p.ReadVersion, Groups: len(p.Groups)}
	for _, g := range p.Groups {
		rep.FragmentsRemoved += len(g)
		for _, f := range g {
			rep.RowsRewritten += f.LiveRows()
			rep.DeletedRowsDropped += f.DeletedRows
			rep.BytesRead += f.DataBytes()
		}
	}
	return rep
}

func (t *Table) compactDefaults(o CompactOptions) CompactOptions {
	if o.TargetRowsPerFragment <= 0 {
		o.TargetRowsPerFragment = t.opts.TargetRowsPerFragment
	}
	if o.MaxDeletedShare <= 0 {
		o.MaxDeletedShare = 0.1
	}
	if o.Concurrency <= 0 {
		o.Concurrency = min(4, runtime.GOMAXPROCS(0))
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 64 * 1024
	}
	return o
}

// PlanCompaction decides what compacting version m would rewrite, without reading any data.
//
// A fragment is a candidate when it has fewer live rows than the target, or when more than
// MaxDeletedShare of its rows are deleted. Runs of adjacent candidates are cut into groups of at
// most the target's worth of live rows. A group is rewritten when it merges two or more
// fragments, or when its one fragment has too many deleted rows; a lone small fragment is left
// alone (rewriting it would gain nothing).
//
// In a partitioned table a group holds fragments of one partition only: each partition's
// fragments, in table order, are planned as the fragments of an unpartitioned table are.
func (t *Table) PlanCompaction(m *Manifest, o CompactOptions) CompactionPlan {
	o = t.compactDefaults(o)
	plan := CompactionPlan{ReadVersion: m.Version}
	tooDeleted := func(f Fragment) bool {
		return f.PhysicalRows > 0 && f.DeletedRows > 0 && float64(f.DeletedRows)/float64(f.PhysicalRows) > o.MaxDeletedShare
	}
	for _, frags := range partitionFragments(m) {
		if o.MergeRatio > 0 {
			plan.Groups = append(plan.Groups, planIncremental(frags, o, tooDeleted)...)
		} else {
			plan.Groups = append(plan.Groups, planBins(frags, o, tooDeleted)...)
		}
	}
	return plan
}

// partitionFragments returns m's fragments split by partition, each list in table order, the
// partitions in the order of their first fragment; all of them as one list in an unpartitioned
// table.
func partitionFragments(m *Manifest) [][]Fragment {
	if len(m.PartitionSpec) == 0 {
		return [][]Fragment{m.Fragments}
	}
	index := make(map[string]int)
	var out [][]Fragment
	for _, f := range m.Fragments {
		k := f.Partition.Key()
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], f)
	}
	return out
}

// planBins cuts the runs of adjacent candidates of frags into groups of at most the target's
// live rows (PlanCompaction without a MergeRatio).
func planBins(frags []Fragment, o CompactOptions, tooDeleted func(Fragment) bool) [][]Fragment {
	var groups [][]Fragment
	var bin []Fragment
	var binLive int64
	flush := func() {
		if len(bin) >= 2 || (len(bin) == 1 && tooDeleted(bin[0])) {
			groups = append(groups, bin)
		}
		bin, binLive = nil, 0
	}
	for _, f := range frags {
		live := f.LiveRows()
		if live >= o.TargetRowsPerFragment && !tooDeleted(f) {
			flush()
			continue
		}
		if len(bin) > 0 && binLive+live > o.TargetRowsPerFragment {
			flush()
		}
		bin = append(bin, f)
		binLive += live
	}
	flush()
	return groups
}

// planIncremental is PlanCompaction of frags with a MergeRatio: within each run of adjacent
// candidates, groups are formed from the newest fragment backwards (see CompactOptions.MergeRatio).
func planIncremental(frags []Fragment, o CompactOptions, tooDeleted func(Fragment) bool) [][]Fragment {
	var out [][]Fragment
	live := Fragment.LiveRows
	planRun := func(run []Fragment) {
		var groups [][]Fragment // newest first
		for i := len(run) - 1; i >= 0; {
			j, total := i, live(run[i])
			for j > 0 {
				prev := run[j-1]
				if total+live(prev) > o.TargetRowsPerFragment {
					break
				}
				if float64(live(prev)) > o.MergeRatio*float64(total) && !tooDeleted(prev) {
					break
				}
				total += live(prev)
				j--
			}
			if g := run[j : i+1]; len(g) >= 2 || tooDeleted(g[0]) {
				groups = append(groups, g)
			}
			i = j - 1
		}
		for k := len(groups) - 1; k >= 0; k-- {
			out = append(out, groups[k])
		}
	}
	var run []Fragment
	for _, f := range frags {
		if live(f) >= o.TargetRowsPerFragment && !tooDeleted(f) {
			planRun(run)
			run = nil
			continue
		}
		run = append(run, f)
	}
	planRun(run)
	return out
}

// PrepareCompaction plans a compaction of version base (nil: the latest), rewrites the groups'
// live rows into new data files and returns the uncommitted Rewrite transaction, or nil when
// there is nothing to compact. Commit it with Table.Commit, or Discard it.
//
// REQUIRES: the transaction is committed (or discarded) well within cleanup's grace period:
// until it commits, nothing references its new data files.
func (t *Table) PrepareCompaction(ctx context.Context, base *Manifest, o CompactOptions) (*Transaction, CompactReport, error) {
	start := time.Now()
	o = t.compactDefaults(o)
	m, err := t.resolveBase(ctx, base)
	if err != nil {
		return nil, CompactReport{}, err
	}
	plan := t.PlanCompaction(m, o)
	rep := plan.Report()
	if len(plan.Groups) == 0 {
		rep.Duration = time.Since(start)
		return nil, rep, nil
	}
	prog := &compactProgress{fn: o.Progress}
	prog.p.FragmentsTotal, prog.p.RowsTotal = rep.FragmentsRemoved, rep.RowsRewritten
	rep.RowsRewritten = 0 // counted below as written

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]rewrittenGroup, len(plan.Groups))
	errs := make([]error, len(plan.Groups))
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	for i, g := range plan.Groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = panics.Recover(t.opts.Logger, "compaction rewrite", func() (err error) {
				results[i], err = t.rewriteGroup(ctx, m, g, o, prog)
				return err
			})
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	discard := func() {
		for _, r := range results {
			if r.w != nil {
				r.w.Abort(context.WithoutCancel(ctx))
			}
		}
	}
	// Report the error that stopped the work, not the cancellations it caused.
	var firstErr error
	for _, err := range errs {
		if err != nil && (firstErr == nil || errors.Is(firstErr, context.Canceled)) {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		discard()
		return nil, rep, firstErr
	}
	txn := &Transaction{Operation: OpRewrite, ReadVersion: m.Version, Properties: o.Properties,
		Rewrite: &ChangeOfAddress{}, base: m}
	for _, r := range results {
		txn.Rewrite.Groups = append(txn.Rewrite.Groups, r.group)
		txn.Fragments = append(txn.Fragments, r.frags...)
		rep.RowsRewritten += r.rows
		rep.BytesWritten += r.w.BytesWritten()
	}
	rep.FragmentsAdded = len(txn.Fragments)
	rep.Duration = time.Since(start)
	return txn, rep, nil
}

// compactReplans bounds how often Compact plans again after another compaction rewrote one of
// the fragments it had rewritten.
const compactReplans = 3

// Compact compacts the latest version (PrepareCompaction, then Commit) and reports what it did.
// With nothing to compact it commits nothing and returns a report with Version 0. When another
// compaction (the background maintainer, another server) committed a rewrite of the same
// fragments first, the work is discarded and planned again from the new version, up to
// compactReplans times; the caller asked for a compacted table, not for this particular plan.
func (t *Table) Compact(ctx context.Context, o CompactOptions) (CompactReport, error) {
	start := time.Now()
	ctx, span := tracer.Start(ctx, "engine.Compact")
	defer span.End()
	for attempt := 0; ; attempt++ {
		txn, rep, err := t.PrepareCompaction(ctx, nil, o)
		if err != nil || txn == nil {
			return rep, err
		}
		m, err := t.Commit(ctx, txn)
		if err != nil {
			if CommitDefinitelyFailed(err) {
				t.Discard(ctx, txn)
			}
			var ce *ConflictError
			if errors.As(err, &ce) && ce.TheirOp == OpRewrite && attempt < compactReplans {
				continue
			}
			return rep, err
		}
		rep.Version = m.Version
		rep.Duration = time.Since(start)
		return rep, nil
	}
}

type rewrittenGroup struct {
	group RewriteGroup
	frags []Fragment
	rows  int64
	w     *Writer
}

type compactProgress struct {
	mu sync.Mutex
	p  CompactProgress
	fn func(CompactProgress)
}

func (c *compactProgress) add(rows int64, frags int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.RowsDone += rows
	c.p.FragmentsDone += frags
	c.p.BytesWritten += bytes
	if c.fn != nil {
		c.fn(c.p)
	}
}

// prefetchMaxRows bounds the fragments a compaction reads ahead: a fragment with more live rows
// streams through the writer when its turn comes instead of being held in memory.
const prefetchMaxRows = 256 * 1024

// fragmentRead is one small fragment's live rows, read ahead of the writer.
type fragmentRead struct {
	done chan struct{} // closed when recs/err are set
	recs []arrow.RecordBatch
	err  error
}

func (r *fragmentRead) release() {
	for _, rec := range r.recs {
		rec.Release()
	}
	r.recs = nil
}

// rewriteGroup writes the live rows of the fragments g of m, in order, into new fragments and
// records which offsets it kept. Opening a small fragment (its footer, its deletion file) costs
// more than its rows, so up to o.Concurrency small fragments are read ahead in parallel while
// the writer encodes them in order.
func (t *Table) rewriteGroup(ctx context.Context, m *Manifest, g []Fragment, o CompactOptions, prog *compactProgress) (rewrittenGroup, error) {
	var out rewrittenGroup
	sc := m.ArrowSchema()
	w, err := t.NewWriterFor(sc, sc, InBackground(), WithoutPartitionLimit())
	if err != nil {
		return out, err
	}
	w.target = o.TargetRowsPerFragment
	out.w = w

	ctx, cancel := context.WithCancel(ctx)
	reads := make([]*fragmentRead, len(g))
	for i, f := range g {
		if f.LiveRows() <= prefetchMaxRows {
			reads[i] = &fragmentRead{done: make(chan struct{})}
		}
	}
	slots := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		for _, r := range reads {
			if r != nil {
				r.release()
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, f := range g {
			r := reads[i]
			if r == nil {
				continue
			}
			select {
			case slots <- struct{}{}: // freed when the writer has consumed a read-ahead fragment
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(r.done)
				r.err = panics.Recover(t.opts.Logger, "compaction read-ahead", func() (err error) {
					r.recs, err = t.readFragment(ctx, m, f, o.BatchSize)
					return err
				})
			}()
		}
	}()

	var kept int64
	for i, f := range g {
		dels, err := t.readDeletions(ctx, f)
		if err != nil {
			return out, err
		}
		keep := bitmapOfRange(f.PhysicalRows)
		keep.AndNot(dels)
		b, err := rowset.EncodeBitmap(keep)
		if err != nil {
			return out, fmt.Errorf("table %s: encode kept rows of fragment %d: %w", t.name, f.ID, err)
		}
		out.group.Old = append(out.group.Old, RewrittenFragment{ID: f.ID, PhysicalRows: f.PhysicalRows, Kept: b})
		kept += int64(keep.GetCardinality())
		var n int64
		if r := reads[i]; r != nil {
			select {
			case <-r.done:
			case <-ctx.Done():
				return out, ctx.Err()
			}
			if r.err != nil {
				return out, r.err
			}
			for _, rec := range r.recs {
				before := w.BytesWritten()
				if err := w.Write(ctx, rec); err != nil {
					return out, err
				}
				n += rec.NumRows()
				prog.add(rec.NumRows(), 0, w.BytesWritten()-before)
			}
			r.release()
			<-slots
		} else if n, err = t.copyFragment(ctx, m, f, w, o.BatchSize, prog); err != nil {
			return out, err
		}
		if n != int64(keep.GetCardinality()) {
			return out, fmt.Errorf("table %s: fragment %d: read %d live rows, its deletion file leaves %d", t.name, f.ID, n, keep.GetCardinality())
		}
		prog.add(0, 1, 0)
	}
	before := w.BytesWritten()
	frags, err := w.Finish(ctx)
	if err != nil {
		return out, err
	}
	prog.add(0, 0, w.BytesWritten()-before)
	var rows int64
	for _, f := range frags {
		rows += f.PhysicalRows
	}
	if rows != kept {
		return out, fmt.Errorf("table %s: compaction wrote %d rows for %d kept", t.name, rows, kept)
	}
	out.frags, out.rows = frags, rows
	out.group.NewFragments = len(frags)
	return out, nil
}

// readFragment reads the live rows of f (at version m) into memory.
func (t *Table) readFragment(ctx context.Context, m *Manifest, f Fragment, batch int64) ([]arrow.RecordBatch, error) {
	s, err := t.scanFragments(ctx, m, []Fragment{f}, ScanOptions{BatchSize: batch, Background: true})
	if err != nil {
		return nil, err
	}
	defer s.Release()
	var recs []arrow.RecordBatch
	for s.Next() {
		rec := s.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := s.Err(); err != nil {
		for _, r := range recs {
			r.Release()
		}
		return nil, err
	}
	return recs, nil
}

// copyFragment writes the live rows of f (at version m) to w and returns how many it wrote.
func (t *Table) copyFragment(ctx context.Context, m *Manifest, f Fragment, w *Writer, batch int64, prog *compactProgress) (int64, error) {
	s, err := t.scanFragments(ctx, m, []Fragment{f}, ScanOptions{BatchSize: batch, Background: true})
	if err != nil {
		return 0, err
	}
	defer s.Release()
	var n int64
	for s.Next() {
		rec := s.RecordBatch()
		before := w.BytesWritten()
		if err := w.Write(ctx, rec); err != nil {
			return n, err
		}
		n += rec.NumRows()
		prog.add(rec.NumRows(), 0, w.BytesWritten()-before)
	}
	return n, s.Err()
}

// applyRewrite replaces, in frags, the old fragments of every group of coa by the group's new
// fragments (newFrags, in transaction order, ids assigned), placed where the group's first old
// fragment was.
func applyRewrite(frags []Fragment, coa *ChangeOfAddress, newFrags []Fragment) ([]Fragment, error) {
	if coa == nil {
		return nil, fmt.Errorf("a Rewrite transaction without a change-of-address mapping")
	}
	groupOf := make(map[uint64]int)
	groupNew := make([][]Fragment, len(coa.Groups))
	next := 0
	for gi, g := range coa.Groups {
		for _, o := range g.Old {
			groupOf[o.ID] = gi
		}
		if g.NewFragments < 0 || next+g.NewFragments > len(newFrags) {
			return nil, fmt.Errorf("rewrite group %d names %d new fragments, only %d remain", gi, g.NewFragments, len(newFrags)-next)
		}
		groupNew[gi] = newFrags[next : next+g.NewFragments]
		next += g.NewFragments
	}
	out := make([]Fragment, 0, len(frags))
	emitted := make([]bool, len(coa.Groups))
	found := 0
	for _, f := range frags {
		gi, ok := groupOf[f.ID]
		if !ok {
			out = append(out, f)
			continue
		}
		found++
		if !emitted[gi] {
			out = append(out, groupNew[gi]...)
			emitted[gi] = true
		}
	}
	if found != len(groupOf) {
		return nil, fmt.Errorf("%d of the %d fragments the Rewrite replaces no longer exist: %w", len(groupOf)-found, len(groupOf), ErrCommitConflict)
	}
	return out, nil
}
