package engine

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/flight-sink/flight-sink/internal/numbered"
)

// Directory names inside a table: the on-disk layout of docs/storage.md. Readers of existing
// tables depend on them; they never change.
const (
	versionsDir     = "_versions/"
	transactionsDir = "_transactions/"
	dataDir         = "data/"
	deletionsDir    = "_deletions/"
	stagingDir      = "_staging/"
	streamsDir      = "_streams/"
	schemasDir      = "_schemas/"
	manifestSuffix  = ".manifest"
	stageSuffix     = ".stage"
	schemaSuffix    = ".arrows"
)

// droppedDir holds the drop markers, at the root beside the tables: outside every table's
// directory, so the drop's deletion of that directory leaves them (table_drop.go).
const droppedDir = "_dropped/"

// makeDropMarkerKey returns the store key, from the root, of the marker saying that incarnation
// tableID (Manifest.TableID) of table name is dropped. A table without an id has one marker of
// its own name, "legacy".
func makeDropMarkerKey(name, tableID string) string {
	if tableID == "" {
		tableID = "legacy"
	}
	return droppedDir + name + "/" + tableID
}

// tableNameRE is the grammar of table names: they become one path element under the root, so they
// may never contain a separator, start with a dot or underscore, or be empty.
var tableNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidateTableName reports whether name is a legal table name: 1 to 128 characters of
// [A-Za-z0-9_.-], starting with a letter or digit, and never "..". A legal name can never address
// anything outside the table root.
func ValidateTableName(name string) error {
	if !tableNameRE.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("%w: %q (use 1-128 characters of letters, digits, '_', '.', '-', starting with a letter or digit)", ErrInvalidTableName, name)
	}
	return nil
}

// makeManifestKey returns the key of version v's manifest relative to the table.
func makeManifestKey(v uint64) string { return numbered.Key(versionsDir, v, manifestSuffix) }

// parseManifestKey is the inverse of makeManifestKey; ok is false for any other key.
func parseManifestKey(key string) (v uint64, ok bool) {
	return numbered.Parse(key, versionsDir, manifestSuffix)
}

// makeTransactionKey returns the key of a transaction file relative to the table.
func makeTransactionKey(readVersion uint64, id string) string {
	return fmt.Sprintf("%s%d-%s.txn", transactionsDir, readVersion, id)
}

// makeStreamsKey returns the key, relative to the table, of a watermark archive
// (commit_streams.go). Archives are immutable; each rewrite takes a new random name.
func makeStreamsKey(id string) string { return streamsDir + id + ".json" }

// makeSchemaKey returns the key, relative to the table, of the schema file whose bytes have the
// SHA-256 sum (hex) sum: equal schemas share one file.
func makeSchemaKey(sum string) string { return schemasDir + sum + schemaSuffix }

// parseSchemaKey is the inverse of makeSchemaKey; ok is false for any other key.
func parseSchemaKey(key string) (sum string, ok bool) {
	rest, found := strings.CutPrefix(key, schemasDir)
	if !found {
		return "", false
	}
	sum, found = strings.CutSuffix(rest, schemaSuffix)
	if !found || sum == "" || strings.Contains(sum, "/") {
		return "", false
	}
	return sum, true
}

// makeDataKey returns the key of a data file relative to the table. Data file names are random:
// they never derive from a stream's (query_id, epoch_id), so a replay can never overwrite data.
func makeDataKey(id string) string { return dataDir + id + ".parquet" }

// makeDeletionKey returns the key, relative to the table, of a deletion file of fragment frag
// written for version v. A new file is written for every change (it holds the whole bitmap, old
// deletions merged), so a version's deletion files are never modified.
func makeDeletionKey(frag, v uint64, id string) string {
	return fmt.Sprintf("%s%d-%d-%s.bin", deletionsDir, frag, v, id)
}

// parseDeletionKey is the inverse of makeDeletionKey; ok is false for any other key.
func parseDeletionKey(key string) (frag, v uint64, ok bool) {
	i := strings.LastIndex(key, deletionsDir)
	if i < 0 {
		return 0, 0, false
	}
	name, found := strings.CutSuffix(key[i+len(deletionsDir):], ".bin")
	if !found {
		return 0, 0, false
	}
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 || parts[2] == "" {
		return 0, 0, false
	}
	frag, err1 := strconv.ParseUint(parts[0], 10, 64)
	v, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return frag, v, true
}

// makeStageKey returns the key, relative to the table, of the stage record that token names.
func makeStageKey(token string) string { return stagingDir + token + stageSuffix }

// parseStageKey is the inverse of makeStageKey; ok is false for any other key.
func parseStageKey(key string) (token string, ok bool) {
	i := strings.LastIndex(key, stagingDir)
	if i < 0 {
		return "", false
	}
	token, found := strings.CutSuffix(key[i+len(stagingDir):], stageSuffix)
	if !found || token == "" || strings.Contains(token, "/") {
		return "", false
	}
	return token, true
}
