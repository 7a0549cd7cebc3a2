package streaming

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Config keys the sink stores in a table's config.
const (
	ConfigMemWALShards = memwal.ConfigShards
)

// Options configure a Sink.
type Options struct {
	// Engine options for every table the sink opens.
	Engine engine.Options
	// StageTTL is how long an uncommitted stage is kept before cleanup (the cleanup action and
	// the maintainer's cleanup step: engine.CleanupPolicy.StageTTL) expires it. Default 24h.
	StageTTL time.Duration
	// CleanupGrace is the least age of an unreferenced file cleanup removes (it may belong to a
	// commit in flight; the files of a stage that is kept are kept whatever their age). Default
	// 24h.
	CleanupGrace time.Duration
	// MemWAL options for the shard writers of MemWAL tables.
	MemWAL memwal.Options
	// MemWALFoldGenerations folds a MemWAL shard into the base table once this many flushed
	// generations wait in it, as a step of the table's maintenance (memwal.ShardSet.FoldStep: in
	// the background, or inline; never when the table's maintenance is off). Default 4
	// (memwal.DefaultFoldGenerations); negative: only the fold_memwal_shard action and the
	// fold ceiling fold.
	MemWALFoldGenerations int
	// MemWALFreshness is the freshness bound of MemWAL tables that configure none
	// (memwal.ConfigFreshness): the longest an acknowledged row waits before a fold makes it
	// visible to engines (memwal.ShardSetOptions.Freshness). Default DefaultMemWALFreshness;
	// negative: folds by generation count only.
	MemWALFreshness time.Duration
	// DefaultMaintenance is the maintenance of tables that configure none (nil: the engine's
	// default, background optimize-indices -> compaction -> cleanup after commits). A server
	// passes {"mode": "off"} to leave maintenance to operators.
	DefaultMaintenance *engine.MaintenanceConfig
	// MaxStoredBatchBytes bounds the new buffers of one batch converted to stored types
	// (dictionary, run-end-encoded and view columns expand); a larger batch fails with
	// arrowschema.ErrBatchTooLarge. 0 means arrowschema.DefaultMaxIPCMessageBytes.
	MaxStoredBatchBytes int64
	// DefaultLookback is the dedupe look-back used when a request sets none. Default 100.
	DefaultLookback int
	// ReadSnapshotTTL is how long a read plan's MemWAL capture is kept for its parts to be read
	// (reads.go); ReadSnapshotMaxBytes bounds the captures kept, the oldest evicted first.
	// Defaults DefaultReadSnapshotTTL and DefaultReadSnapshotMaxBytes.
	ReadSnapshotTTL      time.Duration
	ReadSnapshotMaxBytes int64
	// Logger for warnings. Default slog.Default().
	Logger *slog.Logger
	// DisableIceberg turns Iceberg publishing off for every table (the server's
	// --no-iceberg): no publish step, no publish_iceberg, and cleanup keeps no version for the
	// Iceberg snapshots (their metadata goes stale). A table turns it off with the
	// configuration "iceberg.publish": "false".
	DisableIceberg bool
	// IcebergPublishInterval is the least time between two publishes of a table after commits
	// (the server's --iceberg-publish-interval); a table overrides it with the configuration
	// "iceberg.publish_interval_ms". 0 means iceberg.DefaultPublishInterval, negative publishes
	// after every commit.
	IcebergPublishInterval time.Duration
	// IcebergScanInterval is how often WatchCommits looks for versions of the root's tables that
	// this sink did not schedule a publish for (commits of another process) and publishes them
	// (the server's --iceberg-scan-interval). 0 means DefaultIcebergScanInterval, negative: no
	// scan.
	IcebergScanInterval time.Duration
	// HealthLaggingAfter and HealthStalledAfter are how long a table streaming queries write may
	// go without a committed epoch before its health is lagging, then stalled (the status page,
	// and the alert rules through the per-table threshold metrics), for tables that set none
	// (the configuration keys health.lagging_after, health.stalled_after). Defaults
	// DefaultHealthLaggingAfter and DefaultHealthStalledAfter.
	HealthLaggingAfter, HealthStalledAfter time.Duration
}

// EnsureDefaults fills unset options and returns o.
func (o *Options) EnsureDefaults() *Options {
	o.Engine.EnsureDefaults()
	if o.StageTTL <= 0 {
		o.StageTTL = 24 * time.Hour
	}
	if o.CleanupGrace <= 0 {
		o.CleanupGrace = 24 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = o.Engine.Logger
	}
	if o.MemWAL.Logger == nil {
		o.MemWAL.Logger = o.Logger
	}
	if o.DefaultLookback < 1 || o.DefaultLookback > MaxLookback {
		o.DefaultLookback = DefaultLookback
	}
	if o.MemWALFoldGenerations == 0 {
		o.MemWALFoldGenerations = memwal.DefaultFoldGenerations
	}
	if o.MemWALFreshness == 0 {
		o.MemWALFreshness = DefaultMemWALFreshness
	}
	if o.ReadSnapshotTTL <= 0 {
		o.ReadSnapshotTTL = DefaultReadSnapshotTTL
	}
	if o.IcebergPublishInterval == 0 {
		o.IcebergPublishInterval = iceberg.DefaultPublishInterval
	}
	if o.IcebergScanInterval == 0 {
		o.IcebergScanInterval = DefaultIcebergScanInterval
	}
	if o.HealthLaggingAfter <= 0 {
		o.HealthLaggingAfter = DefaultHealthLaggingAfter
	}
	if o.HealthStalledAfter <= 0 {
		o.HealthStalledAfter = DefaultHealthStalledAfter
	}
	if o.ReadSnapshotMaxBytes <= 0 {
		o.ReadSnapshotMaxBytes = DefaultReadSnapshotMaxBytes
	}
	return o
}

// TableOptions returns the engine options of every table opened under options o: o.Engine with
// the hooks publishing adds (cleanup keeps what the table's Iceberg snapshots read and expires
// them with its versions, unless o.DisableIceberg). Every opener of a table (a Sink, the
// command line's admin verbs) takes its options from here, so none can forget a hook.
func TableOptions(o *Options) engine.Options {
	eo := o.Engine
	if !o.DisableIceberg && eo.CleanupRetain == nil {
		eo.CleanupRetain = iceberg.Retain
	}
	return eo
}

// Sink lands epochs in the tables of one store root. It is safe for concurrent use; several
// Sinks (in several processes) may serve the same root at once.
type Sink struct {
	store objstore.Store
	opts  Options

	mu     sync.Mutex
	tables map[string]*engine.Table
	memwal map[string]*memwal.ShardSet // MemWAL shard sets by table, made on first use
	pins   pinnedReads                 // read snapshots of read plans (reads.go)
	// maintained is, by table, the newest version this sink scheduled maintenance (so a publish)
	// after, or found published by WatchCommits: a newer version is someone else's to notice.
	maintained map[string]uint64

	// bg is the context of background maintenance (folds included), cancelled by Close after a
	// grace period. Its state is opts.Engine.Maintenance, shared by every table of the sink.
	bg   context.Context
	stop context.CancelFunc
}

// NewSink returns a Sink on store.
func NewSink(store objstore.Store, opts *Options) *Sink {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	o.Engine = TableOptions(&o)
	s := &Sink{store: store, opts: o, tables: make(map[string]*engine.Table), memwal: make(map[string]*memwal.ShardSet),
		maintained: make(map[string]uint64)}
	s.bg, s.stop = context.WithCancel(context.Background())
	return s
}

// Store returns the sink's store.
func (s *Sink) Store() objstore.Store { return s.store }

// Table opens (and caches) an existing table.
func (s *Sink) Table(ctx context.Context, name string) (*engine.Table, error) {
	if err := engine.ValidateTableName(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return s.table(ctx, name)
}

// table is Table for a name already validated (a normalised request's): the cached table, or
// engine.Open's.
func (s *Sink) table(ctx context.Context, name string) (*engine.Table, error) {
	s.mu.Lock()
	t := s.tables[name]
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := engine.Open(ctx, s.store, name, &s.opts.Engine)
	if err != nil {
		return nil, err
	}
	return s.cache(t), nil
}

func (s *Sink) cache(t *engine.Table) *engine.Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.tables[t.Name()]; c != nil {
		return c
	}
	s.tables[t.Name()] = t
	return t
}

// CreateTable creates a table; a table created concurrently by someone else is ErrTableExists.
// The schema passes the type policy (arrowschema.StoredSchema): the table stores converted types as
// their plain equivalents, and a refused type fails before anything is written.
func (s *Sink) CreateTable(ctx context.Context, name string, schema *arrow.Schema, spec CreateSpec) (*engine.Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	t, err := engine.Create(ctx, s.store, name, schema, createOptions(spec), &s.opts.Engine)
	if err != nil {
		return nil, invalidName(err)
	}
	// A handle cached under the name (of a table since removed from the store) is kept: its Latest
	// finds this table's versions (engine.Table.Latest forgets a vanished one), and forgetting
	// it here could close the shards of a concurrent create-on-put that opened this very table.
	t = s.cache(t)
	// The creation is a commit like any other: its maintenance publishes the table's first
	// (empty) Iceberg snapshot, so readers find the table before its first rows. Best effort.
	if m, err := t.Latest(ctx); err == nil {
		_ = s.maintain(ctx, t, m)
	}
	return t, nil
}

func createOptions(spec CreateSpec) engine.CreateOptions {
	co := engine.CreateOptions{PrimaryKey: spec.PrimaryKey, Config: map[string]string{}}
	if spec.MemWAL != nil {
		co.Config[ConfigMemWALShards] = strconv.Itoa(spec.MemWAL.Shards)
	}
	if spec.DataCodec != "" {
		co.Config[engine.ConfigDataCodec] = spec.DataCodec
	}
	co.PartitionBy = spec.PartitionBy
	if spec.MaxPartitionsPerWrite > 0 {
		co.Config[engine.ConfigMaxPartitionsPerWrite] = strconv.Itoa(spec.MaxPartitionsPerWrite)
	}
	return co
}

// invalidName marks an invalid table name as a bad request.
func invalidName(err error) error {
	if errors.Is(err, engine.ErrInvalidTableName) {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return err
}

// createOrOpen creates the table from schema, or opens it when someone else created it first.
func (s *Sink) createOrOpen(ctx context.Context, name string, schema *arrow.Schema, spec CreateSpec) (*engine.Table, error) {
	t, err := s.CreateTable(ctx, name, schema, spec)
	if errors.Is(err, engine.ErrTableExists) { // lost a creation race: use the winner's table
		return s.Table(ctx, name)
	}
	return t, err
}

// notFoundHint adds how to create a table to a not-found error.
func notFoundHint(err error) error {
	if errors.Is(err, engine.ErrTableNotFound) {
		return fmt.Errorf("%w (send \"create\": true to create it from the stream's schema)", err)
	}
	return err
}

// BatchSource is a stream of record batches of one schema (a Flight DoPut reader fits).
type BatchSource interface {
	Schema() *arrow.Schema
	Next() bool
	RecordBatch() arrow.RecordBatch
	Err() error
}

// storedSource is a BatchSource whose batches are admitted as they enter (arrowschema.StoreBatch):
// their data checked against what their schema declares, and converted to the stored types of the
// type policy (arrowschema.StoredSchema). Every write path below it (data files, MemWAL WAL
// entries, upserts, stages, a create-on-put) and the schema checks against the table see checked
// batches of stored types only.
type storedSource struct {
	src    BatchSource
	ctx    context.Context
	mem    memory.Allocator
	schema *arrow.Schema
	limit  int64 // Options.MaxStoredBatchBytes
	cur    arrow.RecordBatch
	err    error
}

// storeTypes returns src with its batches admitted by arrowschema.StoreBatch as batches of schema
// stored (when it is given, else of arrowschema.StoredSchema's). A refused type is an error
// wrapping arrowschema.ErrUnsupportedType (InvalidArgument) naming the column, before anything of
// the stream is read; a batch whose data does not fit the schema fails the stream with an error
// wrapping arrowschema.ErrDataMismatch naming the column.
func (s *Sink) storeTypes(ctx context.Context, src BatchSource, stored *arrow.Schema) (BatchSource, error) {
	if src.Schema() == nil {
		return src, nil
	}
	if stored == nil {
		var err error
		if stored, err = arrowschema.StoredSchema(src.Schema()); err != nil {
			return nil, err
		}
	}
	return &storedSource{src: src, ctx: ctx, mem: s.opts.Engine.Allocator, schema: stored, limit: s.opts.MaxStoredBatchBytes}, nil
}

func (c *storedSource) Schema() *arrow.Schema { return c.schema }

func (c *storedSource) Next() bool {
	if c.cur != nil {
		c.cur.Release()
		c.cur = nil
	}
	if c.err != nil || !c.src.Next() {
		return false
	}
	c.cur, c.err = arrowschema.StoreBatch(c.ctx, c.mem, c.schema, c.src.RecordBatch(), c.limit)
	return c.err == nil
}

func (c *storedSource) RecordBatch() arrow.RecordBatch { return c.cur }

func (c *storedSource) Err() error {
	if c.err != nil {
		return c.err
	}
	return c.src.Err()
}

// batchesSource replays batches read earlier (retained by the caller) as a BatchSource.
type batchesSource struct {
	schema *arrow.Schema
	recs   []arrow.RecordBatch
	next   int
}

func (b *batchesSource) Schema() *arrow.Schema { return b.schema }
func (b *batchesSource) Next() bool {
	b.next++
	return b.next <= len(b.recs)
}
func (b *batchesSource) RecordBatch() arrow.RecordBatch { return b.recs[b.next-1] }
func (b *batchesSource) Err() error                     { return nil }

// readBatches reads src to its end and returns its batches, retained: the caller releases them.
// A stream that fails, or a ctx that ends, fails the whole read.
func readBatches(ctx context.Context, src BatchSource) ([]arrow.RecordBatch, error) {
	var recs []arrow.RecordBatch
	release := func() { arrowschema.ReleaseBatches(recs) }
	for src.Next() {
		rec := src.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := src.Err(); err != nil {
		release()
		return nil, fmt.Errorf("read stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		release()
		return nil, err
	}
	return recs, nil
}

// batchRows is the number of rows of recs.
func batchRows(recs []arrow.RecordBatch) int64 {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	return n
}

// drain consumes the rest of src without writing it and returns the rows it held.
func drain(src BatchSource) (int64, error) {
	var rows int64
	for src.Next() {
		rows += src.RecordBatch().NumRows()
	}
	return rows, src.Err()
}

// Append lands src as one plain Append with no epoch identity (Flight PATH descriptors).
// An empty stream commits nothing.
func (s *Sink) Append(ctx context.Context, table string, src BatchSource) (Ack, error) {
	if src.Schema() != nil {
		if _, err := arrowschema.StoredSchema(src.Schema()); err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", table, err) // a refused type is the first mistake
		}
	}
	t, err := s.Table(ctx, table)
	if err != nil {
		return Ack{}, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return Ack{}, err
	}
	var stored *arrow.Schema
	if src.Schema() != nil {
		if stored, err = arrowschema.StoredSchemaFor(m.ArrowSchema(), src.Schema()); err != nil {
			return Ack{}, fmt.Errorf("table %s: %w", table, err)
		}
	}
	if src, err = s.storeTypes(ctx, src, stored); err != nil {
		return Ack{}, fmt.Errorf("table %s: %w", table, err)
	}
	in := src.Schema()
	if in == nil {
		in = m.ArrowSchema() // no batches, so no schema of their own
	}
	nw, err := t.NewWriterFor(m.WriteSchema(), in)
	if err != nil {
		return Ack{}, err
	}
	frags, rows, w, err := s.writeInto(ctx, nw, src, true)
	if err != nil {
		return Ack{}, err
	}
	if rows == 0 {
		return Ack{Status: StatusEmpty, Table: table}, nil
	}
	m, err = t.Commit(ctx, &engine.Transaction{Operation: engine.OpAppend, Fragments: frags, FilesDurable: w.Durable})
	if err != nil {
		abortIfFailed(ctx, w, err)
		return Ack{}, err
	}
	recordCommit(ctx, table, rows)
	if err := s.maintain(ctx, t, m); err != nil {
		return Ack{}, err
	}
	return Ack{Status: StatusCommitted, Table: table, Version: m.Version, Rows: rows}, nil
}

// writeAll writes every batch of src into new data files of t. On error the files are removed.
// With later, the last file may still be landing when it returns (engine Writer.FinishLater): the
// caller's transaction must then wait for w.Durable (Transaction.FilesDurable).
func (s *Sink) writeAll(ctx context.Context, t *engine.Table, src BatchSource, later bool) ([]engine.Fragment, int64, *engine.Writer, error) {
	w, err := t.NewWriter(ctx, src.Schema())
	if err != nil {
		return nil, 0, nil, err
	}
	return s.writeInto(ctx, w, src, later)
}

// writeInto is writeAll into writer w.
func (s *Sink) writeInto(ctx context.Context, w *engine.Writer, src BatchSource, later bool) ([]engine.Fragment, int64, *engine.Writer, error) {
	var rows int64
	for src.Next() {
		rec := src.RecordBatch()
		if err := w.Write(ctx, rec); err != nil {
			w.Abort(context.WithoutCancel(ctx))
			return nil, 0, nil, err
		}
		rows += rec.NumRows()
	}
	// A reader that stops on an error must fail the whole write: committing what was read so far
	// would acknowledge a partial epoch.
	if err := src.Err(); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return nil, 0, nil, fmt.Errorf("read stream: %w", err)
	}
	if err := ctx.Err(); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return nil, 0, nil, err
	}
	finish := w.Finish
	if later {
		finish = w.FinishLater
	}
	frags, err := finish(ctx)
	if err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return nil, 0, nil, err
	}
	bytesIn.Add(ctx, w.BytesWritten())
	return frags, rows, w, nil
}

func abortIfFailed(ctx context.Context, w *engine.Writer, err error) {
	if w != nil && engine.CommitDefinitelyFailed(err) {
		w.Abort(context.WithoutCancel(ctx))
	}
}

// normalize validates r, applying the sink's default look-back when r sets none.
func (s *Sink) normalize(r *EpochRequest) error {
	if r.Lookback == 0 {
		r.Lookback = s.opts.DefaultLookback
	}
	return r.Normalize()
}

// countedSource fails a stream whose row count differs from the count its command announced:
// a client that half-closed part-way through must not have the part it sent committed as the
// whole epoch.
type countedSource struct {
	BatchSource
	want, got int64
	err       error
}

func (c *countedSource) Next() bool {
	if c.err != nil {
		return false
	}
	if c.BatchSource.Next() {
		c.got += c.BatchSource.RecordBatch().NumRows()
		if c.got > c.want {
			c.err = invalid("the stream carried more than the %d rows its command announced; nothing was committed", c.want)
			return false
		}
		return true
	}
	if c.BatchSource.Err() == nil && c.got != c.want {
		c.err = invalid("the stream ended after %d of the %d rows its command announced (did the client close part-way?); nothing was committed, replay the epoch", c.got, c.want)
	}
	return false
}

func (c *countedSource) Err() error {
	if c.err != nil {
		return c.err
	}
	return c.BatchSource.Err()
}

// maintain runs the table's configured maintenance after a user commit m (engine
// TableMaintainer). The commit is already visible; in the default background mode this
// returns at once. Only a strict failure in inline mode returns an error: the epoch is committed
// all the same, and its replay is acknowledged as a duplicate.
func (s *Sink) maintain(ctx context.Context, t *engine.Table, m *engine.Manifest) error {
	mt, err := s.maintainer(t, m)
	if err != nil {
		return err
	}
	s.noteMaintained(t.Name(), m.Version)
	s.recordHealthThresholds(ctx, t.Name(), m)
	return mt.MaintainAfterCommit(ctx, m)
}

// maintainer returns table t's maintainer: on a MemWAL table its shard set's, whose runs fold
// the shards first (every maintainer of a table must carry the same steps).
func (s *Sink) maintainer(t *engine.Table, m *engine.Manifest) (*engine.TableMaintainer, error) {
	ss, err := s.tableShards(t, m)
	if err != nil {
		return nil, err
	}
	if ss != nil {
		return ss.Maintainer(), nil
	}
	o := s.maintainerOptions(t)
	return engine.NewTableMaintainer(t, &o), nil
}

// maintainerOptions are the options of every maintainer of table t.
func (s *Sink) maintainerOptions(t *engine.Table) engine.MaintainerOptions {
	return engine.MaintainerOptions{
		DefaultConfig: s.opts.DefaultMaintenance, MinCleanupGrace: s.opts.CleanupGrace, StageTTL: s.opts.StageTTL,
		BackgroundContext: s.bg, Logger: s.opts.Logger, Steps: s.icebergSteps(t),
	}
}
