// Package wal is the write-ahead log of a MemWAL shard: its byte format and the code that writes
// and reads it. Shard ownership, manifests, generations and the memtable are memwal's; this
// package knows only entries, positions and writer epochs.
//
// A shard's WAL lives under <table>/_mem_wal/<shard>/wal/ (the Prefix of a Config):
//
//	<position>.arrow     an entry stored as its own object (Arrow IPC), created put-if-absent, on
//	                     an object store (EntryKey)
//	<log number>.log     a segment on a local disk: the same entries as records (SegmentKey,
//	                     segment.go)
//
// An entry (Entry, EncodeEntry, DecodeEntry) is one Arrow IPC stream: the table schema with the
// entry's position, writer epoch, kind (data or fence) and put metadata (each put's epoch
// identity and how many of the entry's batches, in order, it owns) added to the schema metadata,
// then the batches. A streamed put's batches are stream records in the writer's segment instead,
// named by its commit entry (StreamRef, stream.go).
//
// The fence rule decides which entries count. On an object store the store arbitrates positions:
// a claim places a data-less fence entry of its new writer epoch at the WAL tip (PlaceFence), and
// an older writer's next create collides with it (or with a newer entry) and learns it is fenced
// (FencedError). On a local disk, where a writer appends to segments only it writes, an entry of
// writer epoch e at position p counts unless a fence entry of a later epoch sits at a position
// <= p; List applies the rule and returns only the positions that count. Whoever decides who owns
// the shard (memwal's manifest commit and ownership probe) is not in this package.
//
// Every decoder takes untrusted bytes: anything that does not decode is an error wrapping
// ErrCorrupt, never a panic, and Arrow IPC is checked before arrow-go sizes allocations by it
// (OpenIPC).
package wal
