package streaming

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
)

// Epochs on MemWAL tables.
//
// A table created with {"memwal": {"shards": N}} routes append and update epochs (route "auto" or
// "memwal") to its shards: one durable WAL put per shard instead of a base-table transaction per
// epoch. Without a primary key an epoch goes to one shard chosen by its query id; with one, its
// rows are split by key hash so a key always lands in the same shard, and every shard gets a put
// (identity only when it has no rows) so "every shard holds the epoch" means the epoch is whole.
// Replays are recognised from shard state: the WAL entries not yet flushed carry their epoch
// identity and each shard manifest keeps a per-query watermark of flushed epochs.
//
// Complete epochs and multi-writer (partition) epochs take the direct route. A complete epoch
// first flushes and folds every shard into the base table, so the Overwrite replaces their rows
// too.

// shardSet is one table's MemWAL shard writers in this process, opened on first use. A shard is
// claimed by the first put that needs it; a writer that failed or was fenced is reopened.
type shardSet struct {
	mu     sync.Mutex
	ids    []string
	shards []*memwal.Shard

	folding  []bool   // a fold of shard i is running
	foldedAt []uint64 // shard i's next generation number when its last fold started

	stallFolds []chan struct{} // the fold a stalled put of shard i runs; closed when it ends
}

func (s *Sink) shardSet(table string, ids []string) *shardSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.memwal[table]
	if ss == nil || len(ss.ids) != len(ids) {
		ss = &shardSet{ids: ids, shards: make([]*memwal.Shard, len(ids)), folding: make([]bool, len(ids)), foldedAt: make([]uint64, len(ids)),
			stallFolds: make([]chan struct{}, len(ids))}
		s.memwal[table] = ss
	}
	return ss
}

// writer returns an open writer of shard i, opening (claiming) it when needed.
func (s *Sink) writer(ctx context.Context, t *engine.Table, ss *shardSet, i int) (*memwal.Shard, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w := ss.shards[i]; w != nil && w.Err() == nil {
		return w, nil
	}
	if w := ss.shards[i]; w != nil {
		w.Close()
		ss.shards[i] = nil
	}
	o := s.opts.MemWAL
	o.AfterFlush = func(uint64) { s.foldAfterFlush(t, ss, i) }
	w, err := memwal.OpenShard(ctx, t, ss.ids[i], &o)
	if err != nil {
		return nil, err
	}
	ss.shards[i] = w
	return w, nil
}

// dropWriter forgets writer w of shard i (after it was fenced), so the next use reopens it.
func (ss *shardSet) dropWriter(i int, w *memwal.Shard) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.shards[i] == w {
		w.Close()
		ss.shards[i] = nil
	}
}

// readers returns a reader of every shard: this process's writer where it has one (it sees its
// own memtable), else the read-only view of the shard's stored manifest and WAL. It never opens
// (claims) a shard: reads, table_stats and epoch_status must not fence the server that writes it.
func (s *Sink) readers(t *engine.Table, ss *shardSet) []memwal.ShardReader {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]memwal.ShardReader, len(ss.ids))
	for i, id := range ss.ids {
		if w := ss.shards[i]; w != nil && w.Err() == nil {
			out[i] = w
		} else {
			o := s.opts.MemWAL
			out[i] = memwal.NewStoredShard(t, id, &o)
		}
	}
	return out
}

// tableShards returns the table's shard set, or nil when it has no MemWAL shards.
func (s *Sink) tableShards(m *engine.Manifest, table string) (*shardSet, error) {
	ids, err := memwal.TableShardIDs(m)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return s.shardSet(table, ids), nil
}

// useMemWAL decides the route of an epoch on table m.
func useMemWAL(r *EpochRequest, ss *shardSet) (bool, error) {
	switch {
	case r.Route == RouteDirect:
		return false, nil
	case ss == nil && r.Route == RouteMemWAL:
		return false, fmt.Errorf("%w: route \"memwal\" needs a table created with MemWAL shards (\"create\": {\"memwal\": {\"shards\": N}})", ErrUnsupported)
	case ss == nil:
		return false, nil
	case r.Mode == ModeComplete:
		if r.Route == RouteMemWAL {
			return false, fmt.Errorf("%w: complete-mode epochs overwrite the table in one base transaction and cannot take route \"memwal\"; send them with route \"auto\" or \"direct\"", ErrUnsupported)
		}
		return false, nil // an overwrite is one base transaction by nature
	case r.Partition != nil:
		if r.Route == RouteMemWAL {
			return false, fmt.Errorf("%w: multi-writer (partition) epochs take the direct route; send them with route \"auto\" or \"direct\"", ErrUnsupported)
		}
		return false, nil
	}
	return true, nil
}

// shardPuts splits an epoch's batches into the puts of each shard: shard index -> batches.
// Every returned batch is retained; release them with releasePuts.
func shardPuts(ctx context.Context, r *EpochRequest, m *engine.Manifest, n int, recs []arrow.RecordBatch) (map[int][]arrow.RecordBatch, error) {
	puts := make(map[int][]arrow.RecordBatch)
	if len(m.PrimaryKey) == 0 {
		i := memwal.ShardForPartition(r.QueryID, 0, n)
		for _, rec := range recs {
			rec.Retain()
			puts[i] = append(puts[i], rec)
		}
		if len(puts) == 0 {
			puts[i] = nil
		}
		return puts, nil
	}
	for i := 0; i < n; i++ {
		puts[i] = nil // every shard gets a put, identity only when it has no rows
	}
	for _, rec := range recs {
		idx, err := engine.CheckAppendSchema(m.ArrowSchema(), rec.Schema())
		if err != nil {
			releasePuts(puts)
			return nil, err
		}
		conf := conformTo(m.ArrowSchema(), idx, rec)
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

func conformTo(sc *arrow.Schema, idx []int, rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, len(idx))
	for i, j := range idx {
		cols[i] = rec.Column(j)
	}
	return array.NewRecordBatch(sc, cols, rec.NumRows())
}

func releasePuts(puts map[int][]arrow.RecordBatch) {
	for _, bs := range puts {
		for _, b := range bs {
			b.Release()
		}
	}
}

// writeMemWALEpoch lands an epoch in the table's MemWAL shards, exactly once.
func (s *Sink) writeMemWALEpoch(ctx context.Context, t *engine.Table, m *engine.Manifest, ss *shardSet, r *EpochRequest, src BatchSource) (Ack, error) {
	var recs []arrow.RecordBatch
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	var rows int64
	for src.Next() {
		rec := src.RecordBatch()
		if _, err := engine.CheckAppendSchema(m.ArrowSchema(), rec.Schema()); err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", t.Name(), err)
		}
		rec.Retain()
		recs = append(recs, rec)
		rows += rec.NumRows()
	}
	if err := src.Err(); err != nil {
		return Ack{}, fmt.Errorf("read stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Ack{}, err
	}
	if rows == 0 {
		ack := newAck(StatusEmpty, r) // an empty append/update epoch writes nothing, as on the direct route
		ack.Route = RouteMemWAL
		return ack, nil
	}
	puts, err := shardPuts(ctx, r, m, len(ss.ids), recs)
	if err != nil {
		return Ack{}, err
	}
	defer releasePuts(puts)
	id := engine.EpochIdentity{QueryID: r.QueryID, EpochID: r.EpochID}
	held := 0
	for i, batches := range puts {
		done, err := s.putShard(ctx, t, m, ss, i, &id, batches)
		if err != nil {
			return Ack{}, err
		}
		if done {
			held++
		}
	}
	if held == len(puts) {
		ack := newAck(StatusDuplicate, r)
		ack.Route = RouteMemWAL
		return ack, nil
	}
	for i := range puts {
		if err := s.maybeFold(ctx, t, m, ss, i); err != nil {
			return Ack{}, err // inline maintenance with a strict policy; the epoch itself is durable
		}
	}
	ack := newAck(StatusCommitted, r)
	ack.Rows, ack.Route = rows, RouteMemWAL
	return ack, nil
}

// maybeFold folds shard i into the base table when Options.MemWALFoldGenerations flushed
// generations wait in it (as this process's writer sees them) and the table's maintenance is
// on: in the background, or before returning in inline mode. One fold per shard runs at a time,
// and a shard is not tried again until it has flushed a generation since its last fold started
// (the writer's view of its generations is only refreshed by its own flushes). A background fold
// looks again when it finishes: generations flushed while it ran would otherwise wait for the
// shard's next flush, which a stream that has stopped never makes.
func (s *Sink) maybeFold(ctx context.Context, t *engine.Table, m *engine.Manifest, ss *shardSet, i int) error {
	need := s.opts.MemWALFoldGenerations
	if need < 0 {
		return nil
	}
	mode, err := s.maintenanceMode(m)
	if err != nil || mode == engine.MaintenanceOff {
		return nil // a bad maintenance config is reported by the maintainer itself
	}
	if !ss.startFold(i, need) {
		return nil
	}
	// A failed fold is best effort, like a maintenance step: it is logged and the shard's next
	// flush tries again. Only the maintenance after a fold can fail an inline put (a strict
	// policy), and the epoch is durable all the same: its replay is a duplicate.
	fold := func(ctx context.Context) error {
		var n int
		err := engine.RecoverError(s.opts.Logger, "memwal fold", func() (err error) {
			n, err = foldShard(ctx, t, ss.ids[i], need)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("memwal: fold failed; the shard's next flush tries again", "table", t.Name(), "shard", ss.ids[i], "err", err)
			}
			return nil
		}
		if n == 0 {
			return nil
		}
		return engine.RecoverError(s.opts.Logger, "maintenance after a memwal fold", func() error { return s.maintainAfterFold(ctx, t) })
	}
	if mode == engine.MaintenanceInline {
		defer ss.endFold(i)
		return fold(ctx)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.endFold(i)
		return nil
	}
	s.folds.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.folds.Done()
		for {
			if err := fold(s.foldCtx); err != nil && s.foldCtx.Err() == nil {
				s.opts.Logger.Warn("memwal: maintenance after a background fold failed", "table", t.Name(), "shard", ss.ids[i], "err", err)
			}
			if s.foldCtx.Err() != nil {
				ss.endFold(i) // the sink is closing
				return
			}
			if !ss.continueFold(i, need) {
				return
			}
		}
	}()
	return nil
}

// foldAfterFlush is the shard writers' AfterFlush hook. The flusher runs behind the puts, so the
// put that sealed a memtable has returned before its generation is flushed; with background
// maintenance, the flush itself starts the fold that put could not, and a stream that stops
// leaves no more than MemWALFoldGenerations-1 generations waiting. Inline maintenance folds only
// in puts, and off never (but for a put stalled at the fold ceiling, holdGenerationCeiling).
func (s *Sink) foldAfterFlush(t *engine.Table, ss *shardSet, i int) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.folds.Add(1)
	s.mu.Unlock()
	go func() { // the hook must not wait: the writer's next flush waits for it
		defer s.folds.Done()
		_ = engine.RecoverError(s.opts.Logger, "memwal fold after a flush", func() error {
			m, err := t.Latest(s.foldCtx)
			if err != nil {
				return nil // the next put or flush looks again
			}
			if mode, err := s.maintenanceMode(m); err != nil || mode != engine.MaintenanceBackground {
				return nil
			}
			return s.maybeFold(s.foldCtx, t, m, ss, i) // background: the fold reports its own errors
		})
	}()
}

// startFold marks a fold of shard i as running when none is and the writer has flushed at least
// need generations, one of them since the last fold started.
func (ss *shardSet) startFold(i, need int) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.folding[i] {
		return false
	}
	return ss.readyLocked(i, need)
}

// continueFold keeps shard i's running fold going when generations were flushed while it ran, and
// ends it otherwise.
func (ss *shardSet) continueFold(i, need int) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.readyLocked(i, need) {
		return true
	}
	ss.folding[i] = false
	return false
}

func (ss *shardSet) endFold(i int) {
	ss.mu.Lock()
	ss.folding[i] = false
	ss.mu.Unlock()
}

func (ss *shardSet) readyLocked(i, need int) bool {
	w := ss.shards[i]
	if w == nil {
		return false
	}
	st := w.Stats()
	if st.Generations < need || st.NextGeneration <= ss.foldedAt[i] {
		return false
	}
	ss.folding[i], ss.foldedAt[i] = true, st.NextGeneration
	return true
}

// maintenanceMode is the maintenance mode of table m as the maintainer resolves it: the table's
// own configuration, else the sink's default, else the engine's.
func (s *Sink) maintenanceMode(m *engine.Manifest) (engine.MaintenanceMode, error) {
	if _, stored := m.Config[engine.ConfigMaintenance]; !stored && s.opts.DefaultMaintenance != nil {
		c := *s.opts.DefaultMaintenance
		return c.EnsureDefaults().Mode, nil
	}
	c, err := engine.MaintenanceConfigOf(m)
	return c.Mode, err
}

// foldShard folds one shard into the base table when it has at least minGenerations flushed
// generations and returns the generations reclaimed.
func foldShard(ctx context.Context, t *engine.Table, shard string, minGenerations int) (int, error) {
	return memwal.NewCompactor(t, &memwal.CompactOptions{}).CompactShardIfReady(ctx, shard, minGenerations)
}

// maintainAfterFold runs the table's maintenance after a fold's commit: the fold is a commit
// like any other, it adds fragments and lets index catch-up advance.
func (s *Sink) maintainAfterFold(ctx context.Context, t *engine.Table) error {
	m, err := t.Latest(ctx)
	if err != nil {
		return err
	}
	return s.maintain(ctx, t, m)
}

// putShard puts one shard's share of an epoch unless the shard already holds the epoch; it
// reports whether the shard already held it. m is the base version the epoch was checked
// against. A put to a shard at its fold ceiling stalls first (holdGenerationCeiling). A fenced
// writer is reopened once: a fenced put acknowledged nothing, and the reopened writer replays the
// WAL, so the retry cannot duplicate.
func (s *Sink) putShard(ctx context.Context, t *engine.Table, m *engine.Manifest, ss *shardSet, i int, id *engine.EpochIdentity, batches []arrow.RecordBatch) (bool, error) {
	for attempt := 0; ; attempt++ {
		w, err := s.writer(ctx, t, ss, i)
		if err != nil {
			return false, err
		}
		if ok, loc := w.EpochCommitted(id.QueryID, id.EpochID); ok {
			if loc.FromWatermark && loc.WatermarkEpoch > id.EpochID {
				return false, fmt.Errorf("%w: query %q has flushed epochs up to %d to MemWAL shard %s but epoch %d is not there; use a new query_id for a new checkpoint",
					ErrQueryReused, id.QueryID, loc.WatermarkEpoch, w.ShardID(), id.EpochID)
			}
			return true, nil
		}
		// The ceiling is judged before the put: a put that gives up there wrote nothing.
		if err = s.holdGenerationCeiling(ctx, t, m, ss, i, w); err == nil {
			_, err = w.Put(ctx, id, batches...)
		}
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, memwal.ErrEpochCommitted):
			return true, nil // a concurrent put of the same epoch won
		case (errors.Is(err, memwal.ErrFenced) || errors.Is(err, memwal.ErrClosed)) && attempt == 0:
			s.opts.Logger.Warn("memwal writer fenced or closed; reopening the shard", "table", t.Name(), "shard", w.ShardID(), "err", err)
			ss.dropWriter(i, w)
			continue
		default:
			return false, err
		}
	}
}

// The fold ceiling (shared/DESIGN.md §2: bounds hold under any load).
//
// Automatic folds run behind the puts (maybeFold, foldAfterFlush) and only when the table's
// maintenance is on; on a loaded machine, with maintenance off or with a fold that keeps failing
// slowly, generations would pile up without limit, and every read merges them all. So a put to a
// shard whose backlog is at memwal.Options.MaxUnfoldedGenerations stalls before it is written:
// it waits for the fold another stalled put of this process is running, or runs one itself, until
// the backlog is below the ceiling. The backlog counts the flushed generations above the base
// table's merged watermark and the sealed memtables still to be flushed (each becomes one), so a
// shard holds at most the ceiling plus the puts in flight, and an active memtable an age seal
// closes. The ceiling holds whatever the maintenance mode, "off" included, and with automatic
// folds disabled (MemWALFoldGenerations < 0): a bound that depends on maintenance is not a bound.
// A stall ends with the put's ctx; a fold that fails fails the put, with nothing written.

// maxUnfoldedGenerations is the fold ceiling of every shard.
func (s *Sink) maxUnfoldedGenerations() int {
	if n := s.opts.MemWAL.MaxUnfoldedGenerations; n > 0 {
		return n
	}
	if f := s.opts.MemWALFoldGenerations; f > 0 {
		return 4 * f
	}
	return 16
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

// holdGenerationCeiling returns at once when shard i's backlog, as writer w and base version m
// see it, is below the fold ceiling, and otherwise stalls until a fold has brought it below.
func (s *Sink) holdGenerationCeiling(ctx context.Context, t *engine.Table, m *engine.Manifest, ss *shardSet, i int, w *memwal.Shard) error {
	limit, shard := s.maxUnfoldedGenerations(), ss.ids[i]
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
		log := s.opts.Logger.Warn
		args := []any{"table", t.Name(), "shard", shard, "generations", before, "ceiling", limit,
			"waited", waited.Round(time.Millisecond), "outcome", outcome, "generations_after", after}
		if err != nil {
			log = s.opts.Logger.Error
			args = append(args, "err", err)
		}
		log("memwal put stalled at the fold ceiling (max unfolded generations) until a fold made room", args...)
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
		} else if ran, err := s.stallFold(ctx, t, ss, i); err != nil {
			return fail(err)
		} else if ran {
			outcome = putStallFolded
		}
		var err error
		if m, err = t.Latest(ctx); err != nil {
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
// process is running one, and otherwise waits for that one (or ctx). It reports whether it ran
// the fold. A background fold of the shard that is running is waited for inside the compactor,
// which folds one shard at a time per process.
func (s *Sink) stallFold(ctx context.Context, t *engine.Table, ss *shardSet, i int) (bool, error) {
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
	n, err := foldShard(ctx, t, ss.ids[i], 1)
	if err != nil {
		return true, fmt.Errorf("fold: %w", err)
	}
	if n > 0 {
		// The fold is a base commit like any other; its maintenance failing does not undo it.
		if err := s.maintainAfterFold(ctx, t); err != nil {
			s.opts.Logger.Warn("memwal: maintenance after a stalled put's fold failed", "table", t.Name(), "shard", ss.ids[i], "err", err)
		}
	}
	return true, nil
}

// foldMemWAL flushes every shard's memtable and folds all flushed generations into the base
// table: what a complete epoch must do before it overwrites the table.
func (s *Sink) foldMemWAL(ctx context.Context, t *engine.Table, ss *shardSet) error {
	for i := range ss.ids {
		w, err := s.writer(ctx, t, ss, i)
		if err != nil {
			return err
		}
		if err := w.Flush(ctx); err != nil {
			return fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
		}
	}
	c := memwal.NewCompactor(t, &memwal.CompactOptions{})
	for _, id := range ss.ids {
		if _, err := c.CompactShard(ctx, id); err != nil {
			return fmt.Errorf("fold memwal shard %s: %w", id, err)
		}
	}
	return nil
}

// MemWALRequest selects shards of a table for flush_memwal and compact_memwal_shard.
type MemWALRequest struct {
	Table          string
	Shard          string
	MinGenerations int
}

func (s *Sink) selectShards(ctx context.Context, req MemWALRequest) (*engine.Table, *shardSet, []int, error) {
	t, err := s.Table(ctx, req.Table)
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	ss, err := s.tableShards(m, t.Name())
	if err != nil {
		return nil, nil, nil, err
	}
	if ss == nil {
		return nil, nil, nil, fmt.Errorf("%w: table %s has no MemWAL shards", ErrUnsupported, t.Name())
	}
	var sel []int
	for i, id := range ss.ids {
		if req.Shard == "" || req.Shard == id {
			sel = append(sel, i)
		}
	}
	if len(sel) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: table %s has no MemWAL shard %q (shards: %v)", ErrInvalidRequest, t.Name(), req.Shard, ss.ids)
	}
	return t, ss, sel, nil
}

// FlushMemWAL seals and flushes the memtables of the selected shards to generations.
func (s *Sink) FlushMemWAL(ctx context.Context, req MemWALRequest) (int, error) {
	t, ss, sel, err := s.selectShards(ctx, req)
	if err != nil {
		return 0, err
	}
	for _, i := range sel {
		w, err := s.writer(ctx, t, ss, i)
		if err != nil {
			return 0, err
		}
		if err := w.Flush(ctx); err != nil {
			return 0, fmt.Errorf("flush memwal shard %s: %w", w.ShardID(), err)
		}
	}
	return len(sel), nil
}

// CompactMemWAL folds the flushed generations of the selected shards into the base table and
// returns how many generations it reclaimed. With MinGenerations, a shard is folded only when it
// has at least that many generations pending.
func (s *Sink) CompactMemWAL(ctx context.Context, req MemWALRequest) (int, error) {
	t, ss, sel, err := s.selectShards(ctx, req)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, i := range sel {
		n, err := foldShard(ctx, t, ss.ids[i], max(req.MinGenerations, 1))
		total += n
		if err != nil {
			return total, err
		}
	}
	if total > 0 {
		return total, s.maintainAfterFold(ctx, t)
	}
	return total, nil
}

// MemWALStats describes the table's shards (nil when it has none), without claiming any: a shard
// this process writes is described by its writer, any other by the read-only view of storage.
func (s *Sink) MemWALStats(ctx context.Context, t *engine.Table, m *engine.Manifest) ([]memwal.ShardStats, error) {
	ss, err := s.tableShards(m, t.Name())
	if err != nil || ss == nil {
		return nil, err
	}
	out := make([]memwal.ShardStats, len(ss.ids))
	for i, r := range s.readers(t, ss) {
		if out[i], err = memwal.ReadStats(ctx, r); err != nil {
			return nil, fmt.Errorf("memwal shard %s of table %s: %w", ss.ids[i], t.Name(), err)
		}
	}
	return out, nil
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
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := s.tableShards(m, t.Name())
	if err != nil {
		return nil, err
	}
	if ss == nil {
		return t.ScanManifest(ctx, m, o)
	}
	return memwal.ScanMerged(ctx, t, s.readers(t, ss), o)
}

// Close closes the MemWAL writers this sink opened. Acknowledged puts are durable in the WAL
// already; the next writer replays them.
func (s *Sink) Close() {
	// Background folds and maintenance of this process's tables end before the writers close.
	s.mu.Lock()
	s.closed = true // no new background fold starts
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	folded := make(chan struct{})
	go func() { s.folds.Wait(); close(folded) }()
	select {
	case <-folded:
	case <-ctx.Done():
		s.opts.Logger.Warn("background memwal fold still running at close; cancelling it")
		s.foldStop()
		<-folded
	}
	s.foldStop()
	if err := engine.WaitForMaintenance(ctx); err != nil {
		s.opts.Logger.Warn("background maintenance still running at close", "err", err)
	}
	if s.gauges != nil {
		s.gauges.Unregister()
	}
	s.mu.Lock()
	sets := make([]*shardSet, 0, len(s.memwal))
	for _, ss := range s.memwal {
		sets = append(sets, ss)
	}
	s.mu.Unlock()
	for _, ss := range sets {
		ss.mu.Lock()
		for i, w := range ss.shards {
			if w != nil {
				w.Close()
				ss.shards[i] = nil
			}
		}
		ss.mu.Unlock()
	}
}
