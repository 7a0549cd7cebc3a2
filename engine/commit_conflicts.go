package engine

import "fmt"

// The conflict matrix: how a commit ("ours", which read an older version) treats each
// transaction that landed after the version it read ("theirs"), by the two operations alone.
// conflictMatrix is the one copy of it: checkConflict consults it, TestConflictMatrix runs one
// commit for each of its cells, and the table in docs/conflicts.md is rendered from it
// (renderConflictTable; TestConflictsDocMatchesMatrix fails when the doc is stale).

// resolution is the verdict of one cell of the conflict matrix.
type resolution int

const (
	// ruleRebase: ours lands on top of theirs unchanged.
	ruleRebase resolution = iota + 1
	// ruleConflict: ours is refused with a *ConflictError (the cell's reason), whatever rows either
	// side touches.
	ruleConflict

	// The remaining verdicts pass the operation check; the row-level rebase (rowRebase in
	// commit_rebase.go) then works on the rows themselves, as named.

	// ruleRowsIdempotent: both delete rows; rows theirs deleted first are deleted either way.
	ruleRowsIdempotent
	// ruleRowsOverlap: a conflict when theirs deleted or replaced a row ours deletes or replaces.
	ruleRowsOverlap
	// ruleKeys: ours (an Upsert) also replaces the rows theirs added with keys ours writes.
	ruleKeys
	// ruleRemap: ours runs the rows it deletes through theirs' change-of-address mapping (a Rewrite).
	ruleRemap
	// ruleRemapKeys: ruleRemap, then ruleKeys over the fragments theirs wrote.
	ruleRemapKeys
	// ruleCarry: ours (a Rewrite) carries the rows theirs deleted meanwhile over to its new fragments.
	ruleCarry
	// ruleDisjointRewrites: two Rewrites land when they replaced disjoint fragments, else conflict.
	ruleDisjointRewrites
	// rulePrune: ours (an index change) loses the coverage of fragments theirs rewrote.
	rulePrune
	// ruleSegments: two index changes, judged by index name and segment when the manifest is built
	// (applyIndexChange).
	ruleSegments
)

// String returns the verdict as docs/conflicts.md's table names it.
func (r resolution) String() string {
	switch r {
	case ruleRebase:
		return "rebase"
	case ruleConflict:
		return "**conflict**"
	case ruleRowsIdempotent:
		return "rows: ok"
	case ruleRowsOverlap:
		return "rows: conflict if overlap"
	case ruleKeys:
		return "keys"
	case ruleRemap:
		return "remap"
	case ruleRemapKeys:
		return "remap + keys"
	case ruleCarry:
		return "carry"
	case ruleDisjointRewrites:
		return "conflict if the same fragments"
	case rulePrune:
		return "prune"
	case ruleSegments:
		return "segments"
	}
	return fmt.Sprintf("resolution(%d)", int(r))
}

// conflictRule is one cell of the conflict matrix: the verdict and, for ruleConflict, the reason the
// *ConflictError gives.
type conflictRule struct {
	resolution resolution
	reason     string
}

// conflictOps lists the operations in the order of the matrix's rows and columns. A Create is
// never ours (it makes version 1, which nothing can have read before), only theirs.
var conflictOps = []Operation{OpCreate, OpAppend, OpOverwrite, OpDelete, OpUpdate, OpUpsert, OpRewrite,
	OpCreateIndex, OpOptimizeIndex, OpUpdateConfig}

// Why a transaction that read the table before an Overwrite cannot land on top of it.
const (
	overwrittenAppend = "the table was overwritten after this append read it; retry the append against the new version"
	overwrittenRows   = "the table was overwritten after this operation read it; the rows it changes are gone, retry against the new version"
	overwrittenIndex  = "the table was overwritten after this index change read it; the fragments it indexed are gone"
)

// conflictMatrix[ours][theirs] is the rule for ours landing after theirs. Every operation but
// Create has a row, and every row a cell for every operation.
var conflictMatrix = map[Operation]map[Operation]conflictRule{
	OpAppend: conflictRow(ruleRebase, map[Operation]conflictRule{
		OpOverwrite: {ruleConflict, overwrittenAppend},
	}),
	// A blind replace of the whole table: it does not depend on what it read (last writer wins).
	OpOverwrite: conflictRow(ruleRebase, nil),
	OpDelete: conflictRow(ruleRebase, map[Operation]conflictRule{
		OpOverwrite: {ruleConflict, overwrittenRows},
		OpDelete:    {resolution: ruleRowsIdempotent},
		OpUpdate:    {resolution: ruleRowsOverlap},
		OpUpsert:    {resolution: ruleRowsOverlap},
		OpRewrite:   {resolution: ruleRemap},
	}),
	OpUpdate: conflictRow(ruleRebase, map[Operation]conflictRule{
		OpOverwrite: {ruleConflict, overwrittenRows},
		OpDelete:    {resolution: ruleRowsOverlap},
		OpUpdate:    {resolution: ruleRowsOverlap},
		OpUpsert:    {resolution: ruleRowsOverlap},
		OpRewrite:   {resolution: ruleRemap},
	}),
	OpUpsert: conflictRow(ruleRebase, map[Operation]conflictRule{
		OpOverwrite: {ruleConflict, overwrittenRows},
		OpAppend:    {resolution: ruleKeys},
		OpDelete:    {resolution: ruleKeys},
		OpUpdate:    {resolution: ruleKeys},
		OpUpsert:    {resolution: ruleKeys},
		OpRewrite:   {resolution: ruleRemapKeys},
	}),
	OpRewrite: conflictRow(ruleRebase, map[Operation]conflictRule{
		OpOverwrite: {ruleConflict, overwrittenRows},
		OpDelete:    {resolution: ruleCarry},
		OpUpdate:    {resolution: ruleCarry},
		OpUpsert:    {resolution: ruleCarry},
		OpRewrite:   {resolution: ruleDisjointRewrites},
	}),
	OpCreateIndex:   indexChangeRow,
	OpOptimizeIndex: indexChangeRow,
	// Config keys are set on top of whatever landed: last writer wins per key.
	OpUpdateConfig: conflictRow(ruleRebase, nil),
}

// indexChangeRow is the row of both index changes. They never move a row: fragments added since
// stay unindexed, fragments rewritten since drop out of the coverage when the manifest is built
// (pruneIndexCoverage).
var indexChangeRow = conflictRow(ruleRebase, map[Operation]conflictRule{
	OpOverwrite:     {ruleConflict, overwrittenIndex},
	OpRewrite:       {resolution: rulePrune},
	OpCreateIndex:   {resolution: ruleSegments},
	OpOptimizeIndex: {resolution: ruleSegments},
})

// conflictRow returns a row of the matrix: rule for every operation, except where except says.
func conflictRow(rule resolution, except map[Operation]conflictRule) map[Operation]conflictRule {
	row := make(map[Operation]conflictRule, len(conflictOps))
	for _, op := range conflictOps {
		row[op] = conflictRule{resolution: rule}
		if r, ok := except[op]; ok {
			row[op] = r
		}
	}
	return row
}

// A schema change rides on an Append, Upsert or Overwrite and is judged, besides its operation's
// cell, by mergeTxnSchema (commit_schema.go) when the manifest is built; docs/conflicts.md
// ("Schema changes") describes both.

// checkConflict decides, from conflictMatrix, whether ours (which read an older version) can land
// after theirs, which was committed at version theirVersion. It returns nil when ours may be
// rebased on top; for the row-level verdicts the rebase then looks at the rows themselves
// (rowRebase in commit_rebase.go) and may still refuse. A pair the matrix has no cell for (an operation
// of a newer build) is a conflict.
func checkConflict(table string, ours *Transaction, theirs TransactionSummary, theirVersion uint64) error {
	rule, ok := conflictMatrix[ours.Operation][theirs.Operation]
	if !ok {
		rule = conflictRule{ruleConflict, "no rule to reconcile these operations"}
	}
	if rule.resolution != ruleConflict {
		return nil
	}
	return &ConflictError{Table: table, Operation: ours.Operation, ReadVersion: ours.ReadVersion,
		TheirOp: theirs.Operation, TheirVersion: theirVersion, Reason: rule.reason}
}
