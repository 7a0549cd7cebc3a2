package wal

import (
	"fmt"
	"strconv"
	"strings"
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
	SegmentExt   = ".log"
	numberDigits = 20
)

// EntryKey returns the key of the WAL entry at position pos under the WAL directory prefix.
func EntryKey(prefix string, pos uint64) string {
	return fmt.Sprintf("%s%020d%s", prefix, pos, EntryExt)
}

// ParseEntryKey is the inverse of EntryKey: it returns the position a key names. ok is false for
// any other key.
func ParseEntryKey(key string) (pos uint64, ok bool) {
	return parseNumberedName(key, Dir, EntryExt)
}

// SegmentKey returns the key of the segment with log number n under the WAL directory prefix.
func SegmentKey(prefix string, n uint64) string {
	return fmt.Sprintf("%s%020d%s", prefix, n, SegmentExt)
}

// ParseSegmentKey is the inverse of SegmentKey: it returns the log number a key names. ok is
// false for any other key.
func ParseSegmentKey(key string) (n uint64, ok bool) {
	return parseNumberedName(key, Dir, SegmentExt)
}

// parseNumberedName parses ".../<dir><20 digits><ext>".
func parseNumberedName(key, dir, ext string) (uint64, bool) {
	i := strings.LastIndex(key, "/"+dir)
	if i < 0 {
		return 0, false
	}
	name := key[i+1+len(dir):]
	if len(name) != numberDigits+len(ext) || !strings.HasSuffix(name, ext) {
		return 0, false
	}
	n, err := strconv.ParseUint(name[:numberDigits], 10, 64)
	return n, err == nil
}
