package memwal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/backoff"
	"github.com/flight-sink/flight-sink/memwal/wal"
	"github.com/flight-sink/flight-sink/objstore"
)

// shardManifestFormat is the shard manifest format this build writes; a higher one is refused.
const shardManifestFormat = 1

// ShardManifest is one version of a shard's durable state. Versions are immutable and created
// put-if-absent, so whoever creates version N+1 first owns the transition from N.
type ShardManifest struct {
	FormatVersion  int    `json:"format_version"`
	Shard          string `json:"shard"`
	Version        uint64 `json:"version"`
	TimestampNanos int64  `json:"timestamp_nanos"`

	// WriterEpoch is the epoch of the writer that owns the shard. A writer whose epoch is not
	// the current one is fenced.
	WriterEpoch uint64 `json:"writer_epoch"`
	// ReplayAfterWALEntryPosition: every WAL entry at or below it is in a flushed generation.
	// Opening a shard replays only the entries after it. Only flushes advance it.
	ReplayAfterWALEntryPosition uint64 `json:"replay_after_wal_entry_position"`
	// NextGeneration is the number the next flush takes. Generations start at 1 and increase,
	// in flush order, which is also the order the fold merges them in.
	NextGeneration uint64 `json:"next_generation"`
	// FlushedGenerations lists the generations not yet drained by a fold, ascending.
	FlushedGenerations []FlushedGeneration `json:"flushed_generations"`
	// Quarantined lists the generations a fold refused for what their data holds, ascending.
	// They left FlushedGenerations, so no read and no fold sees them; their files stay under the
	// shard for inspection and are never deleted by a fold (fold_quarantine.go).
	Quarantined []QuarantinedGeneration `json:"quarantined_generations,omitempty"`
	// Queries holds, per streaming query, the highest epoch whose rows reached a flushed
	// generation, so a replay is recognised after its WAL entries are gone: at most
	// Options.QueryWatermarksInManifest of them, the queries that flushed most recently. The
	// others are in QueriesArchive, by the base table's rule (engine.SpillWatermarks).
	// queryWatermark reads both.
	Queries map[string]QueryWatermark `json:"queries,omitempty"`
	// QueriesArchive is the key, relative to the shard's root, of the immutable object holding
	// the watermarks of the queries that left Queries; empty when none did.
	QueriesArchive string `json:"queries_archive,omitempty"`
	// archived is QueriesArchive's watermarks, loaded with the manifest by its ManifestStore
	// (shared between clones, never modified).
	archived map[string]QueryWatermark

	// Owner is the instance id of the shard set (one per table per server process) whose writer
	// claimed the shard, empty when no set owns it (never claimed by one, or released). Heartbeat
	// counts the owner's commits since its claim; the owner keeps it moving (a lease renewal
	// commits when nothing else did for a while), so an observer that sees Owner, WriterEpoch and
	// Heartbeat unchanged for the lease TTL on its own clock may take the shard over (owner_lease.go).
	Owner     string `json:"owner,omitempty"`
	Heartbeat uint64 `json:"owner_heartbeat,omitempty"`
}

// FlushedGeneration is one memtable flushed to Parquet under the shard.
type FlushedGeneration struct {
	Generation uint64 `json:"generation"`
	// Dir is the generation's directory relative to the shard root ("gen/<generation>/").
	Dir   string           `json:"dir"`
	Files []GenerationFile `json:"files"`
	Rows  int64            `json:"rows"`
	// FirstWALPosition..LastWALPosition is the range of WAL entries the generation holds.
	FirstWALPosition uint64 `json:"first_wal_position"`
	LastWALPosition  uint64 `json:"last_wal_position"`
	FlushedAtNanos   int64  `json:"flushed_at_nanos"`
	// FirstRowAtNanos is when the generation's oldest row was acknowledged (its memtable's first
	// put); 0 in generations flushed before it was recorded (FlushedAtNanos stands in).
	FirstRowAtNanos int64 `json:"first_row_at_nanos,omitempty"`
	// Epochs are the streaming epochs whose rows the generation holds, one span per query;
	// absent in generations flushed before it was recorded.
	Epochs []EpochSpan `json:"epochs,omitempty"`
}

// EpochSpan is the lowest and highest epoch of one streaming query in a generation.
type EpochSpan struct {
	QueryID string `json:"query_id"`
	First   int64  `json:"first"`
	Last    int64  `json:"last"`
}

// epochSpans summarises the epochs of each query in flushed (query → epochs, any order), sorted
// by query id.
func epochSpans(flushed map[string][]int64) []EpochSpan {
	out := make([]EpochSpan, 0, len(flushed))
	for q, es := range flushed {
		if len(es) == 0 {
			continue
		}
		out = append(out, EpochSpan{QueryID: q, First: slices.Min(es), Last: slices.Max(es)})
	}
	slices.SortFunc(out, func(a, b EpochSpan) int { return strings.Compare(a.QueryID, b.QueryID) })
	return out
}

// QuarantinedGeneration is a flushed generation a fold could not append because of what its data
// holds (Error says why): its rows are acknowledged, kept in its files, and not in the table.
type QuarantinedGeneration struct {
	FlushedGeneration
	Error              string `json:"error"`
	QuarantinedAtNanos int64  `json:"quarantined_at_nanos"`
}

// firstRowAt is when the generation's oldest row was acknowledged, as well as it is known.
func (g FlushedGeneration) firstRowAt() time.Time {
	if g.FirstRowAtNanos > 0 {
		return time.Unix(0, g.FirstRowAtNanos)
	}
	return time.Unix(0, g.FlushedAtNanos)
}

// Bytes returns the size of the generation's files.
func (g FlushedGeneration) Bytes() int64 {
	var n int64
	for _, f := range g.Files {
		n += f.SizeBytes
	}
	return n
}

// GenerationFile is one Parquet file of a generation, named relative to the generation's Dir.
type GenerationFile struct {
	Name      string `json:"name"`
	Rows      int64  `json:"rows"`
	SizeBytes int64  `json:"size_bytes"`
}

// QueryWatermark is the highest epoch of a streaming query that reached a flushed generation,
// and the one before it.
//
// The one before matters because a query has at most one epoch in flight: when the epoch after
// its last acknowledged one became durable but its acknowledgement was lost (the server died),
// the query replays the acknowledged epoch, which is then the second highest. Both must be
// recognised exactly after a flush, as they are while their WAL entries are unflushed; any
// older epoch below the watermark can only be a reused query id.
type QueryWatermark struct {
	Epoch int64 `json:"epoch"`
	// PrevEpoch is the query's highest flushed epoch below Epoch; nil when none is known (the
	// query's first flushed epoch, or a manifest that does not carry the field).
	PrevEpoch    *int64 `json:"prev_epoch,omitempty"`
	Generation   uint64 `json:"generation"`
	UpdatedNanos int64  `json:"updated_nanos"`
}

// location answers whether the watermark covers epoch e of its query (EpochCommitted): false
// above it; at or below it an EpochLocation from the watermark, Exact when e is Epoch or
// PrevEpoch.
func (wm QueryWatermark) location(e int64) (EpochLocation, bool) {
	if e > wm.Epoch {
		return EpochLocation{}, false
	}
	exact := e == wm.Epoch || (wm.PrevEpoch != nil && e == *wm.PrevEpoch)
	return EpochLocation{Generation: wm.Generation, WatermarkEpoch: wm.Epoch, FromWatermark: true, Exact: exact}, true
}

// advance returns the watermark after a flush of generation g holding epochs of its query
// (any order, repeats allowed): the two highest distinct epochs of the old watermark's and the
// new ones. ok reports whether a watermark existed before.
func (wm QueryWatermark) advance(ok bool, epochs []int64, g uint64, now int64) QueryWatermark {
	var top, prev int64
	haveTop, havePrev := false, false
	add := func(e int64) {
		switch {
		case !haveTop || e > top:
			if haveTop {
				prev, havePrev = top, true
			}
			top, haveTop = e, true
		case e < top && (!havePrev || e > prev):
			prev, havePrev = e, true
		}
	}
	if ok {
		add(wm.Epoch)
		if wm.PrevEpoch != nil {
			add(*wm.PrevEpoch)
		}
	}
	for _, e := range epochs {
		add(e)
	}
	out := wm
	if !ok || slices.Contains(epochs, top) {
		out.Generation, out.UpdatedNanos = g, now // g holds the top epoch
	}
	out.Epoch = top
	out.PrevEpoch = nil
	if havePrev {
		p := prev
		out.PrevEpoch = &p
	}
	return out
}

// queryWatermark returns query q's watermark: Queries', else the archive's. An archived
// watermark idle past the retention stays until the next spill drops it, so it answers a replay
// (or a reused query id) a little longer than a manifest's own would.
func (m *ShardManifest) queryWatermark(q string) (QueryWatermark, bool) {
	if wm, ok := m.Queries[q]; ok {
		return wm, true
	}
	wm, ok := m.archived[q]
	return wm, ok
}

// eachQueryWatermark calls fn with every query's watermark, Queries' and the archive's.
func (m *ShardManifest) eachQueryWatermark(fn func(q string, wm QueryWatermark)) {
	for q, wm := range m.Queries {
		fn(q, wm)
	}
	for q, wm := range m.archived {
		if _, hot := m.Queries[q]; !hot {
			fn(q, wm)
		}
	}
}

// Timestamp returns when the version was committed.
func (m *ShardManifest) Timestamp() time.Time { return time.Unix(0, m.TimestampNanos) }

// Generation returns the listed generation g, if it is listed.
func (m *ShardManifest) Generation(g uint64) (FlushedGeneration, bool) {
	for _, fg := range m.FlushedGenerations {
		if fg.Generation == g {
			return fg, true
		}
	}
	return FlushedGeneration{}, false
}

// GenerationsAbove returns the listed generations above watermark, ascending.
func (m *ShardManifest) GenerationsAbove(watermark uint64) []FlushedGeneration {
	var out []FlushedGeneration
	for _, fg := range m.FlushedGenerations {
		if fg.Generation > watermark {
			out = append(out, fg)
		}
	}
	return out
}

// quarantinedAbove returns the highest quarantined generation above watermark, 0 when none is.
func (m *ShardManifest) quarantinedAbove(watermark uint64) uint64 {
	var top uint64
	for _, q := range m.Quarantined {
		if q.Generation > watermark {
			top = max(top, q.Generation)
		}
	}
	return top
}

// isQuarantined reports whether generation g is quarantined.
func (m *ShardManifest) isQuarantined(g uint64) bool {
	for _, q := range m.Quarantined {
		if q.Generation == g {
			return true
		}
	}
	return false
}

// drainedAbove reports whether a generation above watermark that the shard flushed is no longer
// listed. Generations are numbered 1..NextGeneration-1 in flush order and only a fold's
// drain unlists one, after the base table's merged watermark passed it: so a gap above watermark
// means a base version newer than the one watermark came from holds those rows. A quarantined
// generation counts as listed: its rows are in no base version.
func (m *ShardManifest) drainedAbove(watermark uint64) bool {
	if m.NextGeneration <= watermark+1 {
		return false
	}
	listed := uint64(len(m.GenerationsAbove(watermark)))
	for _, q := range m.Quarantined {
		if q.Generation > watermark {
			listed++
		}
	}
	return listed < m.NextGeneration-1-watermark
}

// Clone returns a deep copy of m that a CommitUpdate closure may change.
func (m *ShardManifest) Clone() *ShardManifest {
	c := *m
	c.FlushedGenerations = make([]FlushedGeneration, len(m.FlushedGenerations))
	for i, fg := range m.FlushedGenerations {
		fg.Files = append([]GenerationFile(nil), fg.Files...)
		fg.Epochs = append([]EpochSpan(nil), fg.Epochs...)
		c.FlushedGenerations[i] = fg
	}
	if m.Quarantined != nil {
		c.Quarantined = make([]QuarantinedGeneration, len(m.Quarantined))
		for i, q := range m.Quarantined {
			q.Files = append([]GenerationFile(nil), q.Files...)
			q.Epochs = append([]EpochSpan(nil), q.Epochs...)
			c.Quarantined[i] = q
		}
	}
	c.Queries = make(map[string]QueryWatermark, len(m.Queries))
	for k, v := range m.Queries {
		c.Queries[k] = v
	}
	return &c
}

func encodeShardManifest(m *ShardManifest) ([]byte, error) { return json.Marshal(m) }

func decodeShardManifest(key string, b []byte) (*ShardManifest, error) {
	var m ShardManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: shard manifest %s: %v", ErrCorrupt, key, err)
	}
	if m.FormatVersion > shardManifestFormat {
		return nil, fmt.Errorf("%w: shard manifest %s has format version %d, this build reads up to %d (upgrade flight-sink)",
			ErrCorrupt, key, m.FormatVersion, shardManifestFormat)
	}
	if v, ok := parseManifestKey(key); !ok || v != m.Version || m.FormatVersion < 1 {
		return nil, fmt.Errorf("%w: shard manifest %s holds version %d, format %d", ErrCorrupt, key, m.Version, m.FormatVersion)
	}
	if m.Queries == nil {
		m.Queries = map[string]QueryWatermark{}
	}
	return &m, nil
}

// errNoUpdate, returned by a CommitUpdate closure, ends the update without a new version.
var errNoUpdate = errors.New("no manifest update needed")

// ManifestStore reads and commits the versions of one shard's manifest. It caches the newest
// version it has seen. It is safe for concurrent use.
type ManifestStore struct {
	store objstore.Store
	shard string
	paths shardPaths
	opts  Options

	mu            sync.Mutex
	latest        *ShardManifest
	confirmedAt   time.Time // when latest was last known to be the newest version
	ownerCommitAt time.Time // when this store last committed for the owner (claim or CommitUpdate)
	// archiveKey and archive are the query watermark archive read or written last (archives
	// are immutable).
	archiveKey string
	archive    map[string]QueryWatermark
}

// NewManifestStore returns the manifest store of shard in table (the table's directory name).
func NewManifestStore(store objstore.Store, table, shard string, opts *Options) *ManifestStore {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	return &ManifestStore{store: store, shard: shard, paths: newShardPaths(table, shard), opts: o}
}

// Shard returns the shard id.
func (ms *ManifestStore) Shard() string { return ms.shard }

func (ms *ManifestStore) cached() (*ShardManifest, time.Time) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.latest, ms.confirmedAt
}

// remember records m as the newest version known at time at.
func (ms *ManifestStore) remember(m *ShardManifest, at time.Time) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.latest == nil || m.Version > ms.latest.Version {
		ms.latest = m
		ms.confirmedAt = at
	} else if m.Version == ms.latest.Version && at.After(ms.confirmedAt) {
		ms.confirmedAt = at
	}
}

// ReadLatest returns the newest manifest version, or an error wrapping ErrNoManifest when the
// shard has none.
//
// Versions are dense and only old ones are ever deleted, so from a known version the newest is
// found by reading the following versions one by one. A known version that is older than half of
// ManifestRetention may have successors that were deleted already; then it lists.
func (ms *ManifestStore) ReadLatest(ctx context.Context) (*ShardManifest, error) {
	for attempt := 0; ; attempt++ {
		m, err := ms.readLatest(ctx)
		if err != nil {
			return nil, err
		}
		if m.QueriesArchive == "" || m.archived != nil {
			return m, nil
		}
		// Attach to a copy: m may be the cached version other readers hold.
		c := *m
		err = ms.attachArchive(ctx, &c)
		// An archive is deleted only after a newer manifest stopped naming it (commit): m has a
		// successor, which the next read finds.
		if errors.Is(err, objstore.ErrNotFound) && attempt < 3 {
			ms.forget()
			continue
		}
		if err != nil {
			return nil, err
		}
		ms.mu.Lock()
		if ms.latest == m {
			ms.latest = &c
		}
		ms.mu.Unlock()
		return &c, nil
	}
}

// attachArchive loads the query watermark archive m names into m.
func (ms *ManifestStore) attachArchive(ctx context.Context, m *ShardManifest) error {
	ms.mu.Lock()
	key, cached := ms.archiveKey, ms.archive
	ms.mu.Unlock()
	if key == m.QueriesArchive {
		m.archived = cached
		return nil
	}
	b, err := ms.store.Get(ctx, ms.paths.root+m.QueriesArchive)
	if err != nil {
		return fmt.Errorf("memwal shard %s: read query watermark archive %s: %w", ms.shard, m.QueriesArchive, err)
	}
	archived, err := engine.DecodeWatermarkArchive[QueryWatermark](b)
	if err != nil {
		return fmt.Errorf("%w: memwal shard %s: query watermark archive %s: %v", ErrCorrupt, ms.shard, m.QueriesArchive, err)
	}
	if archived == nil {
		archived = map[string]QueryWatermark{}
	}
	m.archived = archived
	ms.mu.Lock()
	ms.archiveKey, ms.archive = m.QueriesArchive, archived
	ms.mu.Unlock()
	return nil
}

// forget drops the cached manifest, so the next read lists the versions.
func (ms *ManifestStore) forget() {
	ms.mu.Lock()
	ms.latest, ms.confirmedAt = nil, time.Time{}
	ms.mu.Unlock()
}

// spillQueries moves, when m carries more than QueryWatermarksInManifest watermarks, the ones of
// the queries that flushed longest ago into a new archive (m's archive plus them, less the
// watermarks idle past the retention at now), which it writes before returning, and names it
// in m. It runs inside a CommitUpdate closure: the archive is written for the version the
// closure makes, and a commit that loses its race leaves it for the next spill to delete.
func (ms *ManifestStore) spillQueries(ctx context.Context, m *ShardManifest, now int64) error {
	cutoff := now - int64(ms.opts.QueryWatermarkRetention)
	archived := engine.SpillWatermarks(m.Queries, m.archived, ms.opts.QueryWatermarksInManifest,
		func(wm QueryWatermark) uint64 { return wm.Generation },
		func(wm QueryWatermark) bool { return wm.UpdatedNanos >= cutoff })
	if archived == nil {
		return nil
	}
	b, err := engine.EncodeWatermarkArchive(archived)
	if err != nil {
		return fmt.Errorf("memwal shard %s: encode query watermark archive: %w", ms.shard, err)
	}
	key := makeQueriesArchiveKey(uuid.NewString())
	// The archive is durable before the manifest that names it can exist: a crash in between
	// leaves an unreferenced archive, which the next spill deletes.
	if err := ms.store.PutIfAbsent(ctx, ms.paths.root+key, b); err != nil {
		return fmt.Errorf("memwal shard %s: write query watermark archive: %w", ms.shard, err)
	}
	m.QueriesArchive, m.archived = key, archived
	ms.mu.Lock()
	ms.archiveKey, ms.archive = key, archived
	ms.mu.Unlock()
	return nil
}

// dropArchives deletes, best effort, the query watermark archives other than keep and prev:
// the manifest that names keep is committed, and the one before it named prev, so no newer
// version names any other (a reader that still holds an older version rereads: ReadLatest).
func (ms *ManifestStore) dropArchives(ctx context.Context, keep, prev string) {
	objs, err := ms.store.List(ctx, ms.paths.root+queriesArchiveDir, "")
	if err != nil {
		ms.opts.Logger.Warn("memwal: could not list query watermark archives", "shard", ms.shard, "err", err)
		return
	}
	for _, o := range objs {
		if rel := strings.TrimPrefix(o.Key, ms.paths.root); rel == keep || rel == prev {
			continue
		}
		if err := ms.store.Delete(ctx, o.Key); err != nil {
			ms.opts.Logger.Warn("memwal: could not delete a query watermark archive", "shard", ms.shard, "key", o.Key, "err", err)
		}
	}
}

func (ms *ManifestStore) readLatest(ctx context.Context) (*ShardManifest, error) {
	start := time.Now()
	cur, confirmed := ms.cached()
	if cur == nil || start.Sub(confirmed) >= ms.opts.ManifestRetention/2 {
		after := uint64(0)
		if cur != nil {
			after = cur.Version
		}
		m, err := ms.latestByList(ctx, after)
		if err != nil {
			return nil, err
		}
		if m == nil {
			if cur == nil {
				return nil, fmt.Errorf("memwal shard %s: %w", ms.shard, ErrNoManifest)
			}
			m = cur
		}
		ms.remember(m, start)
		return m, nil
	}
	for {
		next, err := ms.read(ctx, cur.Version+1)
		if errors.Is(err, objstore.ErrNotFound) {
			ms.remember(cur, start)
			return cur, nil
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
}

// latestByList lists the versions after after and reads the newest; nil when there is none.
func (ms *ManifestStore) latestByList(ctx context.Context, after uint64) (*ShardManifest, error) {
	startAfter := ""
	if after > 0 {
		startAfter = ms.paths.makeManifestKey(after)
	}
	objs, err := ms.store.List(ctx, ms.paths.manifestPrefix(), startAfter)
	if err != nil {
		return nil, fmt.Errorf("memwal shard %s: list manifests: %w", ms.shard, err)
	}
	for i := len(objs) - 1; i >= 0; i-- {
		v, ok := parseManifestKey(objs[i].Key)
		if !ok || v <= after {
			continue
		}
		m, err := ms.read(ctx, v)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// A version created after the listing is found by the forward reads of ReadLatest.
		for {
			next, err := ms.read(ctx, m.Version+1)
			if errors.Is(err, objstore.ErrNotFound) {
				return m, nil
			}
			if err != nil {
				return nil, err
			}
			m = next
		}
	}
	return nil, nil
}

func (ms *ManifestStore) read(ctx context.Context, v uint64) (*ShardManifest, error) {
	key := ms.paths.makeManifestKey(v)
	b, err := ms.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("memwal shard %s: read manifest %s: %w", ms.shard, key, err)
	}
	return decodeShardManifest(key, b)
}

// put creates m's version put-if-absent. An error wrapping objstore.ErrExists means another
// commit won that version. With a drop fence (Options.dropFence) a version of a dropped table is
// not created, or removed again: put fails with engine.ErrTableNotFound.
func (ms *ManifestStore) put(ctx context.Context, m *ShardManifest) error {
	b, err := encodeShardManifest(m)
	if err != nil {
		return err
	}
	key := ms.paths.makeManifestKey(m.Version)
	if err := ms.checkNotDropped(ctx); err != nil {
		return err // long dropped: write nothing into the directory a new table may hold
	}
	err = ms.store.PutIfAbsent(ctx, key, b)
	if err != nil && !errors.Is(err, objstore.ErrExists) {
		// The outcome is unknown (the create may have landed before the error): look.
		if got, rerr := ms.store.Get(ctx, key); rerr != nil || string(got) != string(b) {
			return fmt.Errorf("memwal shard %s: write manifest version %d: %w", ms.shard, m.Version, err)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	// Checked again after the version landed, as a table commit is (engine.Table.Commit): a drop
	// that began before it did may have listed the shard already, and would leave it behind for
	// a table created again under the name.
	if derr := ms.checkNotDropped(ctx); derr != nil {
		if errors.Is(derr, engine.ErrTableNotFound) {
			if rerr := ms.store.Delete(ctx, key); rerr != nil && !errors.Is(rerr, objstore.ErrNotFound) {
				ms.opts.Logger.Warn("memwal: manifest version of a dropped table not removed", "shard", ms.shard, "key", key, "err", rerr)
			}
			ms.forget()
		}
		return derr
	}
	return nil
}

// checkNotDropped applies the store's drop fence (Options.dropFence), when it has one.
func (ms *ManifestStore) checkNotDropped(ctx context.Context) error {
	if ms.opts.dropFence == nil {
		return nil
	}
	if err := ms.opts.dropFence(ctx); err != nil {
		return fmt.Errorf("memwal shard %s: %w", ms.shard, err)
	}
	return nil
}

// ClaimEpoch makes the caller the shard's writer: it commits a new manifest version with the
// writer epoch bumped (creating the shard's first manifest if it has none), which fences every
// older writer's manifest commits, then leaves a data-less fence entry at the WAL tip, which
// fences their WAL puts. It returns the claimed manifest and the fence entry's position; the new
// writer's first entry goes right after it. Racing claimants retry up to Options.ClaimRetries
// times; the last to claim wins and the others are fenced.
func (ms *ManifestStore) ClaimEpoch(ctx context.Context) (*ShardManifest, uint64, error) {
	w := wal.NewLog(wal.Config{Store: ms.store, Shard: ms.shard, Prefix: ms.paths.walPrefix()})
	defer w.Close()
	return ms.claimEpoch(ctx, w)
}

// claimEpoch is ClaimEpoch placing the fence through w, the claiming writer's WAL (on a local
// disk the fence starts the writer's first segment, which it then appends to).
func (ms *ManifestStore) claimEpoch(ctx context.Context, w *wal.Log) (*ShardManifest, uint64, error) {
	var claimed *ShardManifest
	for attempt := 0; claimed == nil; attempt++ {
		if attempt >= ms.opts.ClaimRetries {
			return nil, 0, fmt.Errorf("memwal shard %s: claim lost the race %d times", ms.shard, attempt)
		}
		cur, err := ms.ReadLatest(ctx)
		if errors.Is(err, ErrNoManifest) {
			cur = &ShardManifest{FormatVersion: shardManifestFormat, Shard: ms.shard, NextGeneration: 1,
				FlushedGenerations: []FlushedGeneration{}, Queries: map[string]QueryWatermark{}}
		} else if err != nil {
			return nil, 0, err
		}
		if ms.opts.claimIf != nil {
			// A conditional claim (a free shard, a takeover): the condition is checked against
			// every version the claim would follow, so of racing claimants exactly one wins.
			if err := ms.opts.claimIf(cur); err != nil {
				return nil, 0, err
			}
		}
		next := cur.Clone()
		next.Version = cur.Version + 1
		next.WriterEpoch = cur.WriterEpoch + 1
		next.TimestampNanos = nextTimestamp(cur)
		next.Owner, next.Heartbeat = ms.opts.owner, 0
		switch err := ms.put(ctx, next); {
		case err == nil:
			claimed = next
			ms.remember(next, time.Now())
			ms.markOwnerCommit()
		case errors.Is(err, objstore.ErrExists):
			if err := backoff.Race.Sleep(ctx, attempt); err != nil {
				return nil, 0, err
			}
		default:
			return nil, 0, err
		}
	}
	fence, err := w.PlaceFence(ctx, claimed.WriterEpoch, claimed.ReplayAfterWALEntryPosition, ms.opts.ClaimRetries)
	if err != nil {
		return nil, 0, err
	}
	return claimed, fence, nil
}

// CommitUpdate commits a new manifest version derived from the newest one by fn, on behalf of the
// writer of epoch. fn gets a private copy of the current manifest, never a stale snapshot, and
// changes it in place; it may run more than once when other commits race. CommitUpdate fails with
// ErrFenced (before calling fn) when epoch is not the current writer epoch.
//
// Every commit of the owner advances the manifest's Heartbeat: it is what keeps the owner's
// lease alive for the observers (owner_lease.go).
func (ms *ManifestStore) CommitUpdate(ctx context.Context, epoch uint64, fn func(m *ShardManifest) error) (*ShardManifest, error) {
	m, err := ms.commit(ctx, "commit manifest update", func(cur *ShardManifest) error {
		if cur.WriterEpoch != epoch {
			return &FencedError{Shard: ms.shard, WriterEpoch: epoch, CurrentEpoch: cur.WriterEpoch, Op: "commit manifest update"}
		}
		return nil
	}, func(m *ShardManifest) error {
		if err := fn(m); err != nil {
			return err
		}
		m.Heartbeat++
		return nil
	})
	if err == nil {
		ms.markOwnerCommit()
	}
	return m, err
}

// markOwnerCommit records that the owner committed now (the lease renewal's clock).
func (ms *ManifestStore) markOwnerCommit() {
	ms.mu.Lock()
	ms.ownerCommitAt = time.Now()
	ms.mu.Unlock()
}

// sinceOwnerCommit returns how long ago this store last committed for the owner.
func (ms *ManifestStore) sinceOwnerCommit() time.Duration {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return time.Since(ms.ownerCommitAt)
}

// commitUnowned is CommitUpdate for changes that are safe whoever owns the shard (the fold
// drain); it checks no epoch.
func (ms *ManifestStore) commitUnowned(ctx context.Context, op string, fn func(m *ShardManifest) error) (*ShardManifest, error) {
	return ms.commit(ctx, op, nil, fn)
}

func (ms *ManifestStore) commit(ctx context.Context, op string, check, fn func(m *ShardManifest) error) (*ShardManifest, error) {
	for attempt := 0; ; attempt++ {
		cur, err := ms.ReadLatest(ctx)
		if err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(cur); err != nil {
				return nil, err
			}
		}
		next := cur.Clone()
		if err := fn(next); err != nil {
			if errors.Is(err, errNoUpdate) {
				return cur, nil
			}
			return nil, err
		}
		next.FormatVersion = shardManifestFormat
		next.Shard = ms.shard
		next.Version = cur.Version + 1
		next.TimestampNanos = nextTimestamp(cur)
		sort.Slice(next.FlushedGenerations, func(i, j int) bool {
			return next.FlushedGenerations[i].Generation < next.FlushedGenerations[j].Generation
		})
		err = ms.put(ctx, next)
		if err == nil {
			ms.remember(next, time.Now())
			ms.trimOldVersions(ctx, next.Version)
			if next.QueriesArchive != cur.QueriesArchive {
				// After the manifest that names the new archive: until it exists, cur's is the
				// one readers need.
				ms.dropArchives(ctx, next.QueriesArchive, cur.QueriesArchive)
			}
			return next, nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			return nil, err
		}
		if attempt+1 >= ms.opts.CommitRetries {
			return nil, fmt.Errorf("memwal shard %s: %s lost the race for a new manifest version %d times", ms.shard, op, attempt+1)
		}
		if err := backoff.Race.Sleep(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// trimOldVersions deletes, best effort and every 16th version, manifest versions that are both
// older than ManifestRetention and more than ManifestRetainVersions behind v.
func (ms *ManifestStore) trimOldVersions(ctx context.Context, v uint64) {
	if v%16 != 0 || v <= uint64(ms.opts.ManifestRetainVersions) {
		return
	}
	objs, err := ms.store.List(ctx, ms.paths.manifestPrefix(), "")
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-ms.opts.ManifestRetention)
	keepFrom := v - uint64(ms.opts.ManifestRetainVersions)
	for _, o := range objs {
		if n, ok := parseManifestKey(o.Key); ok && n < keepFrom && o.ModTime.Before(cutoff) {
			if err := ms.store.Delete(ctx, o.Key); err != nil {
				ms.opts.Logger.Warn("memwal: could not delete old shard manifest", "shard", ms.shard, "key", o.Key, "err", err)
			}
		}
	}
}

// confirmEpoch returns nil when epoch is still the shard's writer epoch, ErrFenced when a newer
// writer claimed it. It costs one probe for the next version while the cached manifest is fresh.
func (ms *ManifestStore) confirmEpoch(ctx context.Context, epoch uint64) error {
	m, err := ms.ReadLatest(ctx)
	if err != nil {
		return err
	}
	if m.WriterEpoch != epoch {
		return &FencedError{Shard: ms.shard, WriterEpoch: epoch, CurrentEpoch: m.WriterEpoch, Op: "confirm ownership"}
	}
	return nil
}

// nextTimestamp keeps manifest timestamps strictly increasing.
func nextTimestamp(prev *ShardManifest) int64 {
	now := time.Now().UnixNano()
	if now <= prev.TimestampNanos {
		now = prev.TimestampNanos + 1
	}
	return now
}
