package wal

import (
	"github.com/flight-sink/flight-sink/internal/numbered"
)

// Names of a shard's WAL objects. Every key is <prefix><20-digit number><ext>, where prefix is
// the shard's WAL directory (<table>/_mem_wal/<shard>/wal/), so no key is ever also the prefix of
// another key.
const (
	// Dir is the name of a shard's WAL directory under the shard's root.
	Dir = "wal/"
	// EntryExt ends the key of a WAL entry stored as its own object (Arrow IPC).
	EntryExt = ".arrow"
	// SegmentExt ends the key of a WAL segment on a local disk (segment.go).
	SegmentExt = ".log"
)

// EntryKey returns the key of the WAL entry at position pos under the WAL directory prefix.
func EntryKey(prefix string, pos uint64) string {
	return numbered.Key(prefix, pos, EntryExt)
}

// ParseEntryKey is the inverse of EntryKey: it returns the position a key names. ok is false for
// any other key.
func ParseEntryKey(key string) (pos uint64, ok bool) {
	return numbered.Parse(key, Dir, EntryExt)
}

// SegmentKey returns the key of the segment with log number n under the WAL directory prefix.
func SegmentKey(prefix string, n uint64) string {
	return numbered.Key(prefix, n, SegmentExt)
}

// ParseSegmentKey is the inverse of SegmentKey: it returns the log number a key names. ok is
// false for any other key.
func ParseSegmentKey(key string) (n uint64, ok bool) {
	return numbered.Parse(key, Dir, SegmentExt)
}
