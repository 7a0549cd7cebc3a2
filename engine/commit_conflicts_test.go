package engine

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the conflict table of docs/conflicts.md from conflictMatrix")

// TestConflictMatrixComplete: every operation but Create has a row with a cell for every
// operation, and only Conflict cells carry (and must carry) a reason.
func TestConflictMatrixComplete(t *testing.T) {
	if len(conflictMatrix) != len(conflictOps)-1 {
		t.Errorf("the matrix has %d rows, want %d (every operation but Create)", len(conflictMatrix), len(conflictOps)-1)
	}
	for _, ours := range conflictOps[1:] {
		for _, theirs := range conflictOps {
			rule, ok := conflictMatrix[ours][theirs]
			switch {
			case !ok:
				t.Errorf("%s after %s: no cell", ours, theirs)
			case (rule.resolution == ruleConflict) != (rule.reason != ""):
				t.Errorf("%s after %s: %s with reason %q", ours, theirs, rule.resolution, rule.reason)
			}
		}
	}
}

// conflictCell prepares the transactions of one cell of the matrix on a table with three
// fragments (ids 0-9 and 10-19 indexed by "pk", 20-29 not), a primary key "id" and two handles:
// ours is prepared first through a, then theirs commits through b. Ours touches ids 0-9, theirs
// ids 10-19, so row-level verdicts see no overlap; two Rewrites both compact every fragment.
type conflictCell struct {
	a, b *Table
	base *Manifest
}

func newConflictCell(t *testing.T) *conflictCell {
	ctx := t.Context()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, store, "cm", rowsSchema, CreateOptions{PrimaryKey: []string{"id"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	appendIDs(t, a, idRange(0, 10), nil)
	appendIDs(t, a, idRange(10, 10), nil)
	if _, err := a.CreateIndex(ctx, IndexSpec{}); err != nil {
		t.Fatal(err)
	}
	base := appendIDs(t, a, idRange(20, 10), nil)
	b, err := Open(ctx, store, "cm", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &conflictCell{a: a, b: b, base: base}
}

// prepare returns ours, an uncommitted op of c.base.
func (c *conflictCell) prepare(t *testing.T, op Operation) *Transaction {
	ctx, m := t.Context(), c.base
	var txn *Transaction
	var err error
	switch op {
	case OpAppend, OpOverwrite:
		txn = &Transaction{Operation: op, ReadVersion: m.Version, Fragments: writeFragments(t, c.a, idRange(100, 5))}
	case OpDelete:
		txn, err = c.a.PrepareDelete(ctx, m, expr.In("id", 0, 1))
	case OpUpdate:
		txn, err = c.a.PrepareUpdate(ctx, m, UpdateSpec{Where: expr.In("id", 2, 3), Set: map[string]any{"name": "ours"}})
	case OpUpsert:
		rec := makeRows([]int64{4, 5, 300})
		defer rec.Release()
		txn, err = c.a.PrepareUpsert(ctx, m, []arrow.RecordBatch{rec})
	case OpRewrite:
		txn, _, err = c.a.PrepareCompaction(ctx, m, CompactOptions{})
		if err == nil && txn == nil {
			t.Fatal("nothing to compact")
		}
	case OpCreateIndex:
		txn = &Transaction{Operation: op, ReadVersion: m.Version, base: m,
			Index: &IndexChange{Name: "pk_ours", ID: uuid.NewString(), Kind: IndexPrimaryKey, Columns: m.PrimaryKey}}
	case OpOptimizeIndex:
		ix := m.Index("pk")
		seg, serr := c.a.buildPKSegment(ctx, m, ix.Columns, ix.UnindexedFragments(m), nil)
		if serr != nil {
			t.Fatal(serr)
		}
		txn = &Transaction{Operation: op, ReadVersion: m.Version, base: m, Index: &IndexChange{Name: "pk", Added: []IndexSegment{seg}}}
	case OpUpdateConfig:
		txn = &Transaction{Operation: op, ReadVersion: m.Version, ConfigSet: map[string]string{"test.ours": "1"}}
	default:
		t.Fatalf("no way to prepare %s", op)
	}
	if err != nil {
		t.Fatalf("prepare %s: %v", op, err)
	}
	return txn
}

// commitTheirs commits op through c.b and returns the version it made.
func (c *conflictCell) commitTheirs(t *testing.T, op Operation) uint64 {
	ctx := t.Context()
	var err error
	switch op {
	case OpAppend:
		appendIDs(t, c.b, idRange(400, 5), nil)
	case OpOverwrite:
		rec := makeRows(idRange(500, 5))
		defer rec.Release()
		_, err = c.b.Overwrite(ctx, rowsSchema, []arrow.RecordBatch{rec}, nil)
	case OpDelete:
		_, err = c.b.Delete(ctx, expr.In("id", 10, 11), nil)
	case OpUpdate:
		_, err = c.b.Update(ctx, UpdateSpec{Where: expr.In("id", 12, 13), Set: map[string]any{"name": "theirs"}}, nil)
	case OpUpsert:
		rec := makeRows([]int64{14, 15, 600})
		defer rec.Release()
		_, err = c.b.Upsert(ctx, []arrow.RecordBatch{rec}, nil)
	case OpRewrite:
		_, err = c.b.Compact(ctx, CompactOptions{})
	case OpCreateIndex:
		_, err = c.b.CreateIndex(ctx, IndexSpec{Name: "pk_theirs"})
	case OpOptimizeIndex:
		_, err = c.b.OptimizeIndices(ctx, OptimizeIndexOptions{})
	case OpUpdateConfig:
		_, err = c.b.UpdateConfig(ctx, map[string]string{"test.theirs": "1"}, nil, nil)
	default:
		t.Fatalf("no way to commit %s", op)
	}
	if err != nil {
		t.Fatalf("theirs %s: %v", op, err)
	}
	m := mustLatest(t, c.b)
	if m.Transaction.Operation != op || m.Version != c.base.Version+1 {
		t.Fatalf("theirs %s made version %d (%s), want %d", op, m.Version, m.Transaction.Operation, c.base.Version+1)
	}
	return m.Version
}

// TestConflictMatrix runs one commit for every cell of conflictMatrix: ours prepared against a
// version, theirs landing after it, then ours committed. A Conflict cell must refuse ours with a
// *ConflictError naming both sides and the cell's reason and commit nothing; every other cell
// lets ours land (the scenario's rows do not overlap), except two Rewrites of the same fragments.
// A Create never lands after a version ours read, so that column is judged by checkConflict alone.
func TestConflictMatrix(t *testing.T) {
	for _, ours := range conflictOps[1:] {
		for _, theirs := range conflictOps {
			rule := conflictMatrix[ours][theirs]
			t.Run(fmt.Sprintf("%s_after_%s", ours, theirs), func(t *testing.T) {
				if theirs == OpCreate {
					err := checkConflict("cm", &Transaction{Operation: ours, ReadVersion: 1}, TransactionSummary{Operation: theirs}, 2)
					if (err != nil) != (rule.resolution == ruleConflict) {
						t.Fatalf("checkConflict = %v, want %s", err, rule.resolution)
					}
					return
				}
				c := newConflictCell(t)
				txn := c.prepare(t, ours)
				theirVersion := c.commitTheirs(t, theirs)
				m, err := c.a.Commit(t.Context(), txn)
				switch rule.resolution {
				case ruleConflict:
					var ce *ConflictError
					if !errors.As(err, &ce) || !errors.Is(err, ErrCommitConflict) || !CommitDefinitelyFailed(err) {
						t.Fatalf("commit: %v, want a *ConflictError (%s)", err, rule.reason)
					}
					if ce.Operation != ours || ce.ReadVersion != c.base.Version || ce.TheirOp != theirs ||
						ce.TheirVersion != theirVersion || ce.Reason != rule.reason {
						t.Fatalf("conflict error %+v, want %s@%d after %s@%d: %s", ce, ours, c.base.Version, theirs, theirVersion, rule.reason)
					}
					requireDenseVersions(t, c.a, theirVersion)
				case ruleDisjointRewrites:
					if !errors.Is(err, ErrCommitConflict) {
						t.Fatalf("a rewrite of the fragments another rewrite replaced: %v, want ErrCommitConflict", err)
					}
					requireDenseVersions(t, c.a, theirVersion)
				default:
					if err != nil || m.Version != theirVersion+1 {
						t.Fatalf("%s: version %v, err %v; want version %d", rule.resolution, versionOf(m), err, theirVersion+1)
					}
				}
			})
		}
	}
}

// renderConflictTable renders conflictMatrix as the markdown table of docs/conflicts.md.
func renderConflictTable() string {
	var b strings.Builder
	b.WriteString("| ours \\ theirs |")
	for _, op := range conflictOps {
		fmt.Fprintf(&b, " %s |", op)
	}
	b.WriteString("\n|" + strings.Repeat(" --- |", len(conflictOps)+1) + "\n")
	for _, ours := range conflictOps[1:] {
		fmt.Fprintf(&b, "| **%s** |", ours)
		for _, theirs := range conflictOps {
			fmt.Fprintf(&b, " %s |", conflictMatrix[ours][theirs].resolution)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestConflictsDocMatchesMatrix: the table in docs/conflicts.md is conflictMatrix as
// renderConflictTable renders it. The doc is generated from the code rather than parsed and
// compared, because the code is the authority and a rendering leaves no room for a doc table that
// reads the same but is spelled differently; run with -update-docs to regenerate it.
func TestConflictsDocMatchesMatrix(t *testing.T) {
	const path = "../docs/conflicts.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The table is the run of lines starting "| ours \ theirs |".
	lines := strings.SplitAfter(string(doc), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "| ours \\ theirs |") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s has no conflict table (a line starting %q)", path, "| ours \\ theirs |")
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "|") {
		end++
	}
	got, want := strings.Join(lines[start:end], ""), renderConflictTable()
	if got == want {
		return
	}
	if *updateDocs {
		out := strings.Join(lines[:start], "") + want + strings.Join(lines[end:], "")
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the conflict table of %s is stale (go test ./engine -run TestConflictsDocMatchesMatrix -update-docs rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
}
