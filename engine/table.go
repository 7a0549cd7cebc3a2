package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/internal/panics"
	"github.com/flight-sink/flight-sink/objstore"
)

// Options tune a table handle. The zero value is usable; EnsureDefaults fills it in.
type Options struct {
	// TargetRowsPerFragment splits appended data into fragments (one Parquet file each) of at most
	// this many rows. Default 1,048,576.
	TargetRowsPerFragment int64
	// MaxRowGroupRows bounds a Parquet row group. Default 131,072.
	MaxRowGroupRows int64
	// MaxPartitionsPerWrite bounds the partitions one write into a partitioned table (an epoch,
	// an append, an upsert) may hold rows of, for tables whose config does not set
	// ConfigMaxPartitionsPerWrite; a write past it fails with ErrTooManyPartitions. Default
	// DefaultMaxPartitionsPerWrite.
	MaxPartitionsPerWrite int
	// PartitionBufferBytes bounds the rows a writer of a partitioned table buffers before it writes
	// out its largest partition (write_partition.go). Default DefaultPartitionBufferBytes.
	PartitionBufferBytes int64
	// CommitRetries bounds how often a commit retries after losing the race for a version.
	// Default 64.
	CommitRetries int
	// StreamWatermarkRetention drops a streaming query's watermark from new manifests once the
	// query has not committed for this long. Default 30 days.
	StreamWatermarkRetention time.Duration
	// StreamWatermarksInManifest bounds the watermarks a manifest carries itself: when a commit
	// would carry more, the half that committed longest ago move to the table's watermark archive
	// (commit_streams.go). Default 256.
	StreamWatermarksInManifest int
	// Allocator for Arrow memory. Default memory.DefaultAllocator.
	Allocator memory.Allocator
	// Logger for warnings. Default slog.Default().
	Logger *slog.Logger
	// Maintenance is the maintenance state the tables opened with these options share (run
	// locks, background runs, compaction turns: see Maintenance). Whoever owns the tables creates
	// it with NewMaintenance and waits for its background runs at shutdown. Default: a new one
	// per EnsureDefaults, so that a Table opened with options nobody prepared has its own.
	Maintenance *Maintenance
	// IndexCache holds the decoded index segments and deletion bitmaps that primary-key lookups
	// read. Tables share it when they are given the same cache, or the same Options after
	// EnsureDefaults (a streaming Sink's tables do). Default: a new cache of
	// DefaultIndexCacheBytes.
	IndexCache *IndexCache
	// BeforeManifestWrite, when set, is called after a commit's data and transaction files are
	// written and before its manifest is created; an error aborts the commit there. It exists for
	// fault-injection tests of crash safety.
	BeforeManifestWrite func(version uint64) error
	// CleanupRetain, when set, is consulted by every Cleanup of a table opened with these
	// options once it has chosen the versions to remove and before it removes anything: given
	// the oldest version the policy keeps, it returns the oldest version that must be kept
	// instead (at most that one). It is the Iceberg publisher's snapshot expiry
	// (iceberg.Retain), which expires the Iceberg snapshots of the versions cleanup
	// removes and keeps the versions its retained snapshots read. With dryRun it decides
	// without changing anything.
	CleanupRetain func(ctx context.Context, t *Table, oldestKept uint64, dryRun bool) (uint64, error)
	// Now is the clock that stamps each version's commit time (Manifest.TimestampNanos, and the
	// streaming watermarks of the queries it commits). Default time.Now. Commit times stay
	// strictly increasing whatever it returns.
	Now func() time.Time
}

// EnsureDefaults fills unset options with their defaults and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.TargetRowsPerFragment <= 0 {
		o.TargetRowsPerFragment = 1 << 20
	}
	if o.MaxPartitionsPerWrite <= 0 {
		o.MaxPartitionsPerWrite = DefaultMaxPartitionsPerWrite
	}
	if o.PartitionBufferBytes <= 0 {
		o.PartitionBufferBytes = DefaultPartitionBufferBytes
	}
	if o.MaxRowGroupRows <= 0 {
		o.MaxRowGroupRows = 128 * 1024
	}
	if o.CommitRetries <= 0 {
		o.CommitRetries = 64
	}
	if o.StreamWatermarkRetention <= 0 {
		o.StreamWatermarkRetention = 30 * 24 * time.Hour
	}
	if o.StreamWatermarksInManifest <= 0 {
		o.StreamWatermarksInManifest = 256
	}
	if o.Allocator == nil {
		o.Allocator = memory.DefaultAllocator
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Maintenance == nil {
		o.Maintenance = NewMaintenance()
	}
	if o.IndexCache == nil {
		o.IndexCache = NewIndexCache(DefaultIndexCacheBytes)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// CreateOptions describe a new table.
type CreateOptions struct {
	PrimaryKey []string
	// Config is the table config of version 1. Its ConfigDataCodec, when set, must name a
	// DataCodec; without one the table gets DefaultDataCodec.
	Config map[string]string
	// PartitionBy is the table's partition spec (none: unpartitioned). It must fit the schema
	// (partition.Spec.Bind); it is kept for the table's life.
	PartitionBy partition.Spec
	// Properties are stamped on the Create transaction.
	Properties map[string]string
}

// Table is a handle on one table in a store. It caches the newest manifest it has seen; every
// method that needs the latest state refreshes it. A Table is safe for concurrent use, and any
// number of Tables, in any number of processes, may commit to the same table at once.
type Table struct {
	store  objstore.Store
	name   string
	prefix string
	opts   Options

	mu     sync.Mutex
	latest *Manifest // newest manifest seen; nil before the first read

	archiveMu sync.Mutex
	archive   *streamsArchiveCache // the watermark archive read last (commit_streams.go)

	schemaMu sync.Mutex
	schemas  map[string]schemaFile // schema files read or written, by key (commit_schema_file.go)
}

func newTable(store objstore.Store, name string, opts *Options) *Table {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	return &Table{store: store, name: name, prefix: name + "/", opts: o}
}

// Name returns the table's name (its directory under the store root).
func (t *Table) Name() string { return t.name }

// Store returns the object store the table lives in.
func (t *Table) Store() objstore.Store { return t.store }

// URI returns a printable location of the table.
func (t *Table) URI() string { return t.store.String() + "/" + t.name }

func (t *Table) key(rel string) string { return t.prefix + rel }

// DataFileKey returns the store key of data file f of one of the table's fragments.
func (t *Table) DataFileKey(f DataFile) string { return t.key(f.Path) }

// Create creates a table with the given schema as version 1. The table stores the schema's types
// as the type policy says (StoredSchema): a converted type is stored as its plain equivalent, and a
// refused one fails here, before anything is written. It fails with ErrTableExists if any version
// of the table exists (including one created concurrently by another process).
func Create(ctx context.Context, store objstore.Store, name string, schema *arrow.Schema, co CreateOptions, opts *Options) (*Table, error) {
	schema, err := CheckCreate(name, schema, co)
	if err != nil {
		return nil, err
	}
	t := newTable(store, name, opts)
	existing, err := t.listVersions(ctx, 0)
	if err != nil {
		return nil, err
	}
	if len(existing) > 0 {
		if h, herr := t.manifestHeader(ctx, existing[len(existing)-1]); herr == nil {
			if dropped, _ := t.isDropped(ctx, h.TableID); dropped {
				return nil, fmt.Errorf("create table %s: %w: the files of its dropped table are not all removed yet (a drop cut short: drop it again)", name, ErrTableExists)
			}
		}
		return nil, fmt.Errorf("create table %s: %w", name, ErrTableExists)
	}
	sb, err := arrowschema.EncodeSchema(schema)
	if err != nil {
		return nil, err
	}
	config := cloneMap(co.Config)
	if config == nil {
		config = map[string]string{}
	}
	if config[ConfigDataCodec] == "" {
		config[ConfigDataCodec] = string(DefaultDataCodec)
	}
	txn := &Transaction{ID: uuid.NewString(), ReadVersion: 0, Operation: OpCreate, Properties: co.Properties, Schema: sb}
	m := &Manifest{
		FormatVersion: FormatVersion, Version: 1, TimestampNanos: t.opts.Now().UnixNano(), TableID: uuid.NewString(),
		Schema: sb, LastFieldID: arrowschema.MaxFieldID(schema), PrimaryKey: co.PrimaryKey, PartitionSpec: co.PartitionBy,
		Config: config, NextFragmentID: 1,
		Fragments: []Fragment{}, schema: schema,
	}
	if _, err := t.writeTransaction(ctx, txn, m); err != nil {
		return nil, err
	}
	if err := t.putManifest(ctx, m); err != nil {
		if errors.Is(err, objstore.ErrExists) {
			return nil, fmt.Errorf("create table %s: %w", name, ErrTableExists)
		}
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	t.setLatest(m)
	return t, nil
}

// CheckCreate validates what Create would check before it writes anything (the name, the schema
// under the type policy, the primary key) and returns the schema the table would store
// (StoredSchema), with fresh field ids 1..n (AssignFieldIDs). A create-on-put checks its stream's schema with it before reading any data.
func CheckCreate(name string, schema *arrow.Schema, co CreateOptions) (*arrow.Schema, error) {
	if err := ValidateTableName(name); err != nil {
		return nil, err
	}
	if err := validateNewSchema(schema); err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	stored, err := arrowschema.StoredSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	// The table numbers its own fields (arrowschema.FieldID): ids the client's schema carries are dropped.
	stored, _, _ = arrowschema.AssignFieldIDs(arrowschema.StripFieldIDs(stored), 0)
	if _, err := ParseDataCodec(co.Config[ConfigDataCodec]); err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	for _, k := range co.PrimaryKey {
		if len(stored.FieldIndices(k)) != 1 {
			return nil, fmt.Errorf("create table %s: %w: primary key column %q is not in the schema %s", name, arrowschema.ErrSchemaMismatch, k, arrowschema.FieldList(stored))
		}
	}
	if err := co.PartitionBy.Validate(stored); err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	if err := checkMaxPartitionsConfig(co.Config); err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	return stored, nil
}

// Handle returns a handle on table name whether or not the table exists yet, for writing the data
// files of its first commit before Create: files written with its NewWriterFor land under the
// table's data/ directory, unreferenced (and removed by Writer.Abort or cleanup) until a version
// names them. Its other methods need the table to exist.
func Handle(store objstore.Store, name string, opts *Options) (*Table, error) {
	if err := ValidateTableName(name); err != nil {
		return nil, err
	}
	return newTable(store, name, opts), nil
}

// Open opens an existing table. It fails with ErrTableNotFound if the table has no version.
func Open(ctx context.Context, store objstore.Store, name string, opts *Options) (*Table, error) {
	if err := ValidateTableName(name); err != nil {
		return nil, err
	}
	t := newTable(store, name, opts)
	if _, err := t.Latest(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// listVersions lists the committed versions greater than after, ascending.
func (t *Table) listVersions(ctx context.Context, after uint64) ([]uint64, error) {
	start := ""
	if after > 0 {
		start = t.key(makeManifestKey(after))
	}
	objs, err := t.store.List(ctx, t.key(versionsDir), start)
	if err != nil {
		return nil, fmt.Errorf("table %s: list versions: %w", t.name, err)
	}
	vs := make([]uint64, 0, len(objs))
	for _, o := range objs {
		if v, ok := parseManifestKey(o.Key); ok && v > after {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs, nil
}

// Versions lists every version that still has a manifest, ascending.
func (t *Table) Versions(ctx context.Context) ([]uint64, error) { return t.listVersions(ctx, 0) }

func (t *Table) cachedLatest() *Manifest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest
}

// forgetLatest drops the cached manifest: the next Latest lists the table anew.
func (t *Table) forgetLatest() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.latest = nil
}

func (t *Table) setLatest(m *Manifest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.latest == nil || m.Version > t.latest.Version {
		t.latest = m
	}
}

// Latest returns the newest committed manifest.
//
// Versions are dense: a commit only ever creates the version right after the newest one it saw,
// and cleanup removes only old versions. So once a version is known, the newest is found by
// probing the following versions one by one; the cost does not grow with the length of the
// history. After a few probes (someone else committed a lot) it lists from the known version.
func (t *Table) Latest(ctx context.Context) (*Manifest, error) {
	cached := t.cachedLatest()
	if cached == nil {
		return t.latestByList(ctx, 0)
	}
	v := cached.Version
	for probes := 0; ; probes++ {
		if probes == maxLatestProbes {
			return t.latestByList(ctx, v)
		}
		_, err := t.store.Stat(ctx, t.key(makeManifestKey(v+1)))
		if errors.Is(err, objstore.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("table %s: probe version %d: %w", t.name, v+1, err)
		}
		v++
	}
	if v == cached.Version {
		// Nothing after the cached version. Confirm it still exists: if cleanup removed it, newer
		// versions exist and were removed too, and only a listing finds the newest. (Cleanup
		// removes versions oldest first, so an existing cached version means none after it was
		// removed.) And confirm its incarnation was not dropped, beside that probe: a table
		// created again under the name has a version v of its own, which the cached manifest
		// must not stand for.
		var dropped bool
		var derr error
		checked := make(chan struct{})
		go func() {
			defer close(checked)
			dropped, derr = t.isDropped(ctx, cached.TableID)
		}()
		_, err := t.store.Stat(ctx, t.key(makeManifestKey(v)))
		<-checked
		if derr != nil {
			return nil, derr
		}
		if dropped {
			t.forgetLatest()
			return t.latestByList(ctx, 0)
		}
		if errors.Is(err, objstore.ErrNotFound) {
			return t.latestAfterGone(ctx, v)
		}
		if err != nil {
			return nil, fmt.Errorf("table %s: probe version %d: %w", t.name, v, err)
		}
		return cached, nil
	}
	m, err := t.Manifest(ctx, v)
	if errors.Is(err, ErrVersionNotFound) {
		// Removed since the probe found it: the table was dropped, or its directory removed.
		return t.latestAfterGone(ctx, v)
	}
	if err != nil {
		return nil, err
	}
	t.setLatest(m)
	return m, nil
}

// maxRelists bounds how often Latest lists the table again when the newest version it listed
// vanished before it was read.
const maxRelists = 3

// maxLatestProbes bounds the forward probes Latest makes before it lists instead.
const maxLatestProbes = 4

// latestAfterGone is Latest when the cached version gone is no longer in the store. Newer
// versions than gone exist when cleanup removed it; when none does, the table is gone: dropped,
// or its directory removed, and perhaps created anew from version 1. The cached manifest is then
// forgotten, never committed on: the table is read anew from its first version, or is
// ErrTableNotFound.
func (t *Table) latestAfterGone(ctx context.Context, gone uint64) (*Manifest, error) {
	vs, err := t.listVersions(ctx, gone)
	if err != nil {
		return nil, err
	}
	if len(vs) > 0 {
		return t.latestByList(ctx, gone)
	}
	t.mu.Lock()
	if t.latest != nil && t.latest.Version == gone {
		t.latest = nil
	}
	t.mu.Unlock()
	return t.latestByList(ctx, 0)
}

func (t *Table) latestByList(ctx context.Context, after uint64) (*Manifest, error) {
	var m *Manifest
	for attempt := 0; ; attempt++ {
		vs, err := t.listVersions(ctx, after)
		if err != nil {
			return nil, err
		}
		newest := after
		if len(vs) > 0 {
			newest = vs[len(vs)-1]
		}
		if newest == 0 {
			return nil, fmt.Errorf("table %s at %s: %w", t.name, t.store, ErrTableNotFound)
		}
		m, err = t.readManifest(ctx, newest)
		if errors.Is(err, ErrVersionNotFound) && attempt < maxRelists {
			// The newest version vanished since the listing (a drop under way, or a fenced
			// commit's version removed): list the whole table again.
			after = 0
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	// A table whose drop has begun (or was cut short) reads as gone, before anything its
	// manifest names (the schema file first) is read: the drop may have removed it.
	if dropped, err := t.isDropped(ctx, m.TableID); err != nil {
		return nil, err
	} else if dropped {
		return nil, fmt.Errorf("table %s at %s: %w (dropped; its files are still being removed)", t.name, t.store, ErrTableNotFound)
	}
	if m.schema == nil {
		if err := t.resolveSchemaFile(ctx, m); err != nil {
			return nil, err
		}
	}
	t.setLatest(m)
	return m, nil
}

// Manifest reads version v's manifest.
func (t *Table) Manifest(ctx context.Context, v uint64) (*Manifest, error) {
	if c := t.cachedLatest(); c != nil && c.Version == v {
		return c, nil
	}
	m, err := t.readManifest(ctx, v)
	if err != nil {
		return nil, err
	}
	if m.schema == nil {
		if err := t.resolveSchemaFile(ctx, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// readManifest reads and decodes version v's manifest without the schema file it names.
func (t *Table) readManifest(ctx context.Context, v uint64) (*Manifest, error) {
	key := t.key(makeManifestKey(v))
	b, err := t.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("table %s version %d: %w", t.name, v, ErrVersionNotFound)
		}
		return nil, fmt.Errorf("table %s: read manifest %s: %w", t.name, key, err)
	}
	return decodeManifest(key, b)
}

// ManifestAsOf returns the newest version committed at or before ts.
func (t *Table) ManifestAsOf(ctx context.Context, ts time.Time) (*Manifest, error) {
	vs, err := t.listVersions(ctx, 0)
	if err != nil {
		return nil, err
	}
	// Versions are committed in timestamp order (each commit reads its predecessor first), so a
	// binary search over the listed versions finds the boundary.
	var found *Manifest
	lo, hi := 0, len(vs)-1
	for lo <= hi {
		mid := (lo + hi) / 2
		m, err := t.Manifest(ctx, vs[mid])
		if err != nil {
			return nil, err
		}
		if !m.Timestamp().After(ts) {
			found = m
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	if found == nil {
		return nil, fmt.Errorf("table %s: no version at or before %s: %w", t.name, ts.Format(time.RFC3339Nano), ErrVersionNotFound)
	}
	return found, nil
}

func (t *Table) putManifest(ctx context.Context, m *Manifest) error {
	// The schema's file is durable before the manifest that names it can exist; a crash in
	// between leaves an unreferenced file, which cleanup removes.
	if err := t.writeSchemaFile(ctx, m); err != nil {
		return err
	}
	m.FormatVersion = FormatVersion
	onDisk := *m
	onDisk.Schema = nil // in SchemaFile
	b, err := encodeManifest(&onDisk)
	if err != nil {
		return err
	}
	return t.store.PutIfAbsent(ctx, t.key(makeManifestKey(m.Version)), b)
}

// writeTransaction writes txn's file and records its summary in m.
func (t *Table) writeTransaction(ctx context.Context, txn *Transaction, m *Manifest) (string, error) {
	b, err := encodeTransaction(txn)
	if err != nil {
		return "", err
	}
	rel := makeTransactionKey(txn.ReadVersion, txn.ID)
	if err := t.store.PutIfAbsent(ctx, t.key(rel), b); err != nil {
		return "", fmt.Errorf("table %s: write transaction %s: %w", t.name, rel, err)
	}
	m.Transaction = TransactionSummary{File: rel, ReadVersion: txn.ReadVersion, Operation: txn.Operation, Properties: txn.Properties}
	return rel, nil
}

// ReadTransaction reads the full transaction file a manifest points at.
func (t *Table) ReadTransaction(ctx context.Context, m *Manifest) (*Transaction, error) {
	key := t.key(m.Transaction.File)
	b, err := t.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("table %s: read transaction %s: %w", t.name, key, err)
	}
	return decodeTransaction(key, b)
}

// HistoryEntry is one version in History.
type HistoryEntry struct {
	Version         uint64
	Timestamp       time.Time
	Operation       Operation
	ReadVersion     uint64
	Properties      map[string]string
	TransactionFile string
	// Missing is set when the version's manifest no longer exists (removed by cleanup); the other
	// fields are then zero.
	Missing bool
}

// headerReadSize is how much of a manifest History reads first; the header almost always fits.
const headerReadSize = 8 << 10

// History returns up to lookback versions, newest first, ending at the latest version. A version
// inside that window whose manifest was removed appears with Missing set instead of failing the
// whole call, so a caller can degrade gracefully.
func (t *Table) History(ctx context.Context, lookback int) ([]HistoryEntry, error) {
	latest, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	return t.HistoryFrom(ctx, latest.Version, lookback)
}

// HistoryFrom is History ending at version newest instead of the latest version.
func (t *Table) HistoryFrom(ctx context.Context, newest uint64, lookback int) ([]HistoryEntry, error) {
	if lookback <= 0 {
		return nil, nil
	}
	n := lookback
	if uint64(n) > newest {
		n = int(newest)
	}
	out := make([]HistoryEntry, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16) // manifests are small reads; overlap their latency
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = panics.Recover(t.opts.Logger, "read history entry", func() (err error) {
				out[i], err = t.historyEntry(ctx, newest-uint64(i))
				return err
			})
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t *Table) historyEntry(ctx context.Context, v uint64) (HistoryEntry, error) {
	h, err := t.manifestHeader(ctx, v)
	if errors.Is(err, ErrVersionNotFound) {
		return HistoryEntry{Version: v, Missing: true}, nil
	}
	if err != nil {
		return HistoryEntry{}, err
	}
	return HistoryEntry{
		Version: h.Version, Timestamp: time.Unix(0, h.TimestampNanos), Operation: h.Transaction.Operation,
		ReadVersion: h.Transaction.ReadVersion, Properties: h.Transaction.Properties, TransactionFile: h.Transaction.File,
	}, nil
}

// manifestHeader reads the header of version v's manifest (decodeManifestHeader), with one short
// ranged read when the header fits in it. A missing manifest is ErrVersionNotFound.
func (t *Table) manifestHeader(ctx context.Context, v uint64) (manifestHeader, error) {
	key := t.key(makeManifestKey(v))
	b, err := t.store.GetRange(ctx, key, 0, headerReadSize)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return manifestHeader{}, fmt.Errorf("table %s version %d: %w", t.name, v, ErrVersionNotFound)
		}
		return manifestHeader{}, fmt.Errorf("table %s: read manifest %s: %w", t.name, key, err)
	}
	h, err := decodeManifestHeader(key, b)
	if errors.Is(err, io.ErrUnexpectedEOF) && len(b) == headerReadSize {
		if b, err = t.store.Get(ctx, key); err == nil {
			h, err = decodeManifestHeader(key, b)
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w %s: truncated", ErrCorruptManifest, key)
	}
	return h, err
}

// ListTables returns the names of the tables under the store's root: every valid table name
// directory that holds at least one manifest.
func ListTables(ctx context.Context, store objstore.Store) ([]string, error) {
	names, err := objstore.ListPrefixes(ctx, store, "")
	if err != nil {
		return nil, fmt.Errorf("list tables in %s: %w", store, err)
	}
	var out []string
	for _, n := range names {
		if ValidateTableName(n) != nil {
			continue
		}
		objs, err := store.List(ctx, n+"/"+versionsDir, "")
		if err != nil {
			return nil, err
		}
		if len(objs) > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// validateNewSchema rejects schemas no write could ever fit: no columns, an unnamed column, or a
// name used twice (CheckAppendSchema matches columns by name).
func validateNewSchema(sc *arrow.Schema) error {
	if sc.NumFields() == 0 {
		return fmt.Errorf("%w: a table needs at least one column", arrowschema.ErrSchemaMismatch)
	}
	seen := make(map[string]bool, sc.NumFields())
	for i, f := range sc.Fields() {
		if f.Name == "" {
			return fmt.Errorf("%w: column %d has no name", arrowschema.ErrSchemaMismatch, i)
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: column %q appears more than once", arrowschema.ErrSchemaMismatch, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}
