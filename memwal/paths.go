package memwal

import (
	"strconv"
	"strings"

	"github.com/flight-sink/flight-sink/internal/numbered"
	"github.com/flight-sink/flight-sink/memwal/wal"
)

// Layout of a shard under its table, relative to the store root. Every object key ends in a file
// name with a suffix, and every directory is a fixed name or a zero-padded number, so no key is
// ever also the prefix of another key (S3 servers such as versitygw cannot hold both x and x/y).
const (
	memWALDir     = "_mem_wal/"
	manifestDir   = "manifest/"
	walDir        = wal.Dir
	genDir        = "gen/"
	manifestExt   = ".json"
	walEntryExt   = wal.EntryExt
	genFileExt    = ".arrows"  // Arrow IPC stream (generation.go)
	genParquetExt = ".parquet" // generations flushed before the IPC format
	numberDigits  = 20
)

// shardPaths makes the keys of one shard's objects.
type shardPaths struct {
	root string // <table>/_mem_wal/<shard>/
}

func newShardPaths(table, shard string) shardPaths {
	return shardPaths{root: table + "/" + memWALDir + shard + "/"}
}

// GenerationDir returns the directory of a shard's generation relative to its table's directory,
// given the generation's Dir as its manifest records it.
func GenerationDir(shard, dir string) string { return memWALDir + shard + "/" + dir }

func (p shardPaths) manifestPrefix() string { return p.root + manifestDir }
func (p shardPaths) walPrefix() string      { return p.root + walDir }
func (p shardPaths) genPrefix() string      { return p.root + genDir }

// makeManifestKey returns the key of manifest version v.
func (p shardPaths) makeManifestKey(v uint64) string {
	return numbered.Key(p.manifestPrefix(), v, manifestExt)
}

// parseManifestKey is the inverse of makeManifestKey; ok is false for any other key.
func parseManifestKey(key string) (v uint64, ok bool) {
	return numbered.Parse(key, manifestDir, manifestExt)
}

// queriesArchiveDir holds a shard's query watermark archives (<uuid>.json), under its root.
const queriesArchiveDir = "queries/"

// makeQueriesArchiveKey returns the key, relative to the shard root, of the query watermark
// archive named id.
func makeQueriesArchiveKey(id string) string { return queriesArchiveDir + id + manifestExt }

// makeWALKey returns the key of the WAL entry at position pos.
func (p shardPaths) makeWALKey(pos uint64) string {
	return wal.EntryKey(p.walPrefix(), pos)
}

// makeGenDir returns the directory (a key prefix ending in "/") of generation g, relative to the
// shard root. Manifests record it relative so a shard can be read wherever its table lives.
func makeGenDir(g uint64) string { return numbered.Key(genDir, g, "/") }

// parseGenDir is the inverse of makeGenDir for a directory name under gen/ ("000…42").
func parseGenDir(name string) (g uint64, ok bool) {
	name = strings.TrimSuffix(name, "/")
	if len(name) != numberDigits {
		return 0, false
	}
	g, err := strconv.ParseUint(name, 10, 64)
	return g, err == nil
}
