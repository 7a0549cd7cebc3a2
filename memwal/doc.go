// Package memwal stages high-frequency writes of a table in MemWAL shards and folds them into the
// base table later, so that a stream of small epochs does not become a stream of small fragments.
//
// A table has N shards, each identified by a UUID. Everything a shard owns lives under
// <table>/_mem_wal/<shard>/:
//
//	manifest/<version>.json       the shard manifest, one immutable file per version (put-if-absent)
//	wal/<position>.arrow          WAL entries (Arrow IPC), one per group commit (put-if-absent), on an object store
//	wal/<log number>.log          WAL segments on a local disk: the same entries as records (package wal, wal/segment.go)
//	gen/<generation>/<uuid>.parquet  flushed generations
//
// Lifecycle of a row:
//
//  1. Put hands a batch to the shard's writer. Concurrent puts are grouped into one WAL entry,
//     written put-if-absent at the next position (appended to the writer's segment, one
//     fdatasync, on a local disk); the put returns once that entry is durable and the writer has
//     confirmed it still owns the shard. A large put on a local disk can be streamed instead
//     (Options.StreamPutBytes, off by default; Shard.StreamPut, stream.go): its batches are appended as stream records as they arrive,
//     and one entry through the same group commit makes them count.
//  2. The rows go into the memtable, readable at once (Shard.Snapshot).
//  3. When the memtable passes a row, byte or age threshold it is sealed and flushed to the next
//     generation (an Arrow IPC file). The shard manifest records the generation, advances
//     replay_after_wal_entry_position past the entries it covers and raises each query's epoch
//     watermark; those WAL entries are then garbage and are deleted.
//  4. The fold (Folder.FoldShard) appends every flushed generation above the base
//     manifest's merged-generation watermark to the base table in one transaction (an upsert by
//     the primary key when the table has one) that also raises the watermark, drains exactly
//     those generations from the shard manifest and deletes their directories. A generation whose
//     data the fold cannot append is quarantined instead (fold_quarantine.go): set aside with
//     the error, its files kept, so the generations after it fold.
//
// Ownership. One writer owns a shard under a writer epoch. OpenShard claims the shard: it bumps
// the epoch in a new manifest version and leaves a data-less fence entry at the WAL tip, then
// replays the entries after replay_after into a fresh memtable. Every later manifest commit of
// an older epoch fails with ErrFenced, and so does its next WAL put, which collides with the
// fence (or a newer entry) on an object store, or whose ownership probe sees the newer epoch on a
// local disk, where the fence hides every entry of an older epoch at or above it (package wal, wal/segment.go). The fold needs no ownership: its drain removes only generations the
// base manifest proves merged, which is safe whoever writes the shard, so it never fences a
// resident writer and needs no claim/close ordering.
//
// Ownership across servers (owner_lease.go). On a table without a primary key a ShardSet, one per table
// per server process with an instance id of its own, claims a shard no live set owns (a
// conditional claim: of two racing sets exactly one wins), records itself as the manifest's
// Owner and keeps the shard: every put of that server goes there. Its commits advance the
// manifest's Heartbeat and it renews that lease when idle; a set that sees a shard's (Owner,
// WriterEpoch, Heartbeat) unchanged for Options.OwnerLeaseTTL on its own clock takes the shard
// over, replays, flushes and folds it, and releases it. When no shard is free a set falls back to
// ShardForPartition routing (and fences). A replay through another server is found in whichever
// shard holds it (ShardSet.EpochHeld). Keyed tables route rows by key hash over all shards, so
// every server writes every shard.
//
// Multi-writer epochs. The parts of a streaming epoch written by several tasks are not shard
// state: each waits, durable and invisible, as a stage of the base table (engine.Table.WriteStage)
// on whichever server it reached, and the epoch's commit reads them back and makes them one put
// (package streaming, stage.go). So every WAL entry is a visible put: a flush, a fold and a
// replay never meet a part that may still be dropped, and parts claim no shard.
//
// Reads. A consistent read of a table is the base table at version V, plus, for every shard, the
// flushed generations above V's merged watermark for that shard, plus the memtable. With a
// primary key the newest row of a key wins: MemWAL over base, a later generation over an
// earlier one, the memtable over generations, a later WAL position over an earlier one.
// ScanMerged does this for the Flight DoGet path. A ShardSet's reads (Scan, Pin, TableState)
// take one cut across the shards (visibility.go): an epoch whose parts are still being put into
// several shards is left out of every shard until its last part has landed, so an epoch is read
// whole or not at all; a delete or an overwrite holds the set (Quiesce) so that each epoch lands
// wholly before or after it.
package memwal
