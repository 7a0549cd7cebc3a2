// Package engine is flight-sink's versioned table: every write is one transaction that becomes
// visible atomically as a new version, and every version stays readable until cleanup removes it.
//
// Lifecycle of a commit:
//
//  1. Data files are written under <table>/data/ (Parquet, zstd). Nothing references them yet.
//  2. The transaction file <table>/_transactions/<read_version>-<uuid>.txn records the operation.
//     (A data file from Writer.FinishLater may land during this step; the commit waits for it,
//     Transaction.FilesDurable, before step 3.)
//  3. The manifest <table>/_versions/<version>.manifest is created put-if-absent. That single
//     atomic create is the commit point; whoever creates version N first owns it.
//  4. On losing the race the committer reads the transactions committed since the version it read,
//     checks them against the conflict matrix (docs/conflicts.md), rebases and tries the next
//     version, a bounded number of times with jittered backoff (package backoff, shared with memwal).
//
// A crash anywhere before step 3 leaves only files no manifest references; cleanup reclaims them.
//
// Every version's changes (Table.Changes: inserts, deletes, update pre- and post-images) are
// derived from its manifest and the one before it (changes.go); nothing is written for them.
package engine
