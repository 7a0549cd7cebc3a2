package memwal

import (
	"context"
	"log/slog"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/memwal/wal"
)

// Options tune a shard writer. The zero value is usable; EnsureDefaults fills it in.
type Options struct {
	// WALFlushInterval is how long the first put of a group waits for more puts to join its WAL
	// entry. Zero (the default) writes a group as soon as the WAL is idle: puts that arrive while
	// an entry is being written form the next entry, so concurrency alone sets the group size and
	// a lone put pays one write. Set it (Lance uses 100ms) to trade latency for fewer entries.
	WALFlushInterval time.Duration
	// WALMaxEntryBytes closes a group early once it holds this many bytes. Default 10 MiB.
	WALMaxEntryBytes int64
	// WALSegmentBytes is the preallocated size of a WAL segment on a local disk (wal/segment.go);
	// an entry larger than a segment gets a segment of its own. Default 16 MiB.
	WALSegmentBytes int64
	// StreamPutBytes is the size from which an epoch's put is streamed into a local-disk WAL
	// as its batches arrive (stream.go) instead of being written once all of it is received.
	// 0 or negative: never stream, the default. Off by default: as measured (docs/storage.md
	// "Streamed puts") it runs as fast as a buffered put on two cores, and saves only the memory
	// of holding the epoch.
	StreamPutBytes int64

	// MemtableMaxRows, MemtableMaxBytes and MemtableMaxAge seal the memtable and flush it to a
	// generation once any is passed. Defaults 100,000 rows, 256 MiB, 5 minutes; a negative age
	// disables the age trigger.
	MemtableMaxRows  int64
	MemtableMaxBytes int64
	MemtableMaxAge   time.Duration

	// MaxUnflushedBytes bounds the memtable bytes not yet in a generation. A put that would pass
	// it waits up to BackpressureWait for flushes, then fails with ErrBackpressure.
	// Defaults 1 GiB and 30 seconds.
	MaxUnflushedBytes int64
	BackpressureWait  time.Duration

	// MaxUnfoldedGenerations is the ceiling of a shard's fold backlog: a put to a shard whose
	// flushed generations not yet folded into the base table, plus its sealed memtables waiting to
	// become generations, reach it stalls until a fold has made room (whatever the table's
	// maintenance mode). A ShardSet enforces it on its put path (ShardSet.Put), since folding is
	// the base table's business, not the writer's; 0 means the set's default, four times its fold
	// trigger (16 with the default trigger of 4, 16 when automatic folds are off).
	MaxUnfoldedGenerations int

	// ClaimRetries bounds the attempts to claim the shard (bump the epoch) and to place the fence
	// entry when other claimants race. Default 16.
	ClaimRetries int
	// CommitRetries bounds CommitUpdate's attempts when other commits race it. Default 64.
	CommitRetries int
	// ManifestRetention keeps shard manifest versions at least this long (and the newest
	// ManifestRetainVersions of them whatever their age) before a commit deletes them.
	// Defaults 1 hour and 10. A writer checks its ownership with a single probe only while its
	// last check is younger than half the retention; after that it lists the manifests.
	ManifestRetention      time.Duration
	ManifestRetainVersions int
	// QueryWatermarkRetention drops a query's epoch watermark from the shard manifest once the
	// query has not flushed an epoch for this long. Default 30 days.
	QueryWatermarkRetention time.Duration
	// QueryWatermarksInManifest bounds the query watermarks a shard manifest carries itself:
	// when a flush would leave more, the half that flushed longest ago move to the shard's
	// watermark archive (ShardManifest.QueriesArchive), as the base table's manifest does with
	// its streams (engine.Options.StreamWatermarksInManifest). Default 256.
	QueryWatermarksInManifest int

	// AfterFlush, when set, is called with a generation's number once the writer has committed it
	// to the shard manifest (and deleted the WAL entries it covers). It runs on the writer's
	// flusher goroutine: it must return quickly and must not wait for the writer, whose next
	// flush waits for it.
	AfterFlush func(generation uint64)

	// OwnerLeaseTTL is how long a shard set's claim of a shard lasts without a commit of its
	// owner: the owner renews it (a manifest commit) when it has committed nothing for a third of
	// it, and another server that observes no commit of the owner for the whole TTL, measured on
	// its own clock, takes the shard over (owner_lease.go). Default 15 seconds.
	OwnerLeaseTTL time.Duration

	// owner is the instance id a claim records as the shard's owner (ShardManifest.Owner);
	// claimIf, when set, must accept the manifest version a claim follows (ManifestStore.claimEpoch).
	// The shard set sets both on the writers it opens.
	owner   string
	claimIf func(cur *ShardManifest) error
	// dropFence, when set, fails with engine.ErrTableNotFound once the table incarnation the
	// writer opened the shard on is dropped (engine.CheckNotDropped); every manifest version the
	// writer creates (ManifestStore.put) and every WAL entry before its puts are acknowledged
	// (Shard.confirmOwner) is checked by it. OpenShard sets it.
	dropFence func(ctx context.Context) error

	// Allocator for Arrow memory. Default memory.DefaultAllocator.
	Allocator memory.Allocator
	// Logger for warnings. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills unset options with their defaults and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.WALFlushInterval < 0 {
		o.WALFlushInterval = 0
	}
	if o.WALMaxEntryBytes <= 0 {
		o.WALMaxEntryBytes = 10 << 20
	}
	if o.WALSegmentBytes <= 0 {
		o.WALSegmentBytes = wal.DefaultSegmentBytes
	}
	if o.StreamPutBytes == 0 {
		o.StreamPutBytes = -1
	}
	if o.MemtableMaxRows <= 0 {
		o.MemtableMaxRows = 100_000
	}
	if o.MemtableMaxBytes <= 0 {
		o.MemtableMaxBytes = 256 << 20
	}
	if o.MemtableMaxAge == 0 {
		o.MemtableMaxAge = 5 * time.Minute
	}
	if o.MaxUnflushedBytes <= 0 {
		o.MaxUnflushedBytes = 1 << 30
	}
	if o.BackpressureWait <= 0 {
		o.BackpressureWait = 30 * time.Second
	}
	if o.ClaimRetries <= 0 {
		o.ClaimRetries = 16
	}
	if o.CommitRetries <= 0 {
		o.CommitRetries = 64
	}
	if o.ManifestRetention <= 0 {
		o.ManifestRetention = time.Hour
	}
	if o.ManifestRetainVersions <= 0 {
		o.ManifestRetainVersions = 10
	}
	if o.QueryWatermarkRetention <= 0 {
		o.QueryWatermarkRetention = 30 * 24 * time.Hour
	}
	if o.QueryWatermarksInManifest <= 0 {
		o.QueryWatermarksInManifest = 256
	}
	if o.OwnerLeaseTTL <= 0 {
		o.OwnerLeaseTTL = DefaultOwnerLeaseTTL
	}
	if o.Allocator == nil {
		o.Allocator = memory.DefaultAllocator
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o *Options) memtableAgeLimit() time.Duration {
	if o.MemtableMaxAge < 0 {
		return 0
	}
	return o.MemtableMaxAge
}
