package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

// genRows builds a batch of schema sc (rowsSchema or evolvedSchema) holding ids whose payload
// names generation gen, so an upsert of a key changes its row.
func genRows(sc *arrow.Schema, ids []int64, gen int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d-g%d", id, gen))
		if rowScoreNull(id) {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(rowScore(id) + float64(gen))
		}
		if sc.NumFields() > 3 {
			b.Field(3).(*array.Int32Builder).Append(extraValue(id) + int32(gen))
		}
	}
	return b.NewRecordBatch()
}

// changeRow is one row of a change feed: the table row in canonical text and its change columns.
type changeRow struct {
	row, kind string
	key       int64
	version   int64
	ts        time.Time
}

// rowText renders row i of rec over the columns of sc (a column rec lacks reads as null).
func rowText(sc *arrow.Schema, rec arrow.RecordBatch, i int) string {
	parts := make([]string, sc.NumFields())
	for j, f := range sc.Fields() {
		idx := rec.Schema().FieldIndices(f.Name)
		if len(idx) == 0 || rec.Column(idx[0]).IsNull(i) {
			parts[j] = f.Name + "=null"
			continue
		}
		parts[j] = f.Name + "=" + rec.Column(idx[0]).ValueStr(i)
	}
	return strings.Join(parts, ",")
}

// readChanges reads the whole change range o.
func readChanges(t *testing.T, tbl *Table, o ChangeOptions) ([]changeRow, *arrow.Schema) {
	t.Helper()
	cr, err := tbl.Changes(t.Context(), o)
	if err != nil {
		t.Fatalf("changes %d..%d: %v", o.From, o.To, err)
	}
	defer cr.Release()
	sc := cr.Schema()
	n := sc.NumFields()
	table := arrow.NewSchema(sc.Fields()[:n-3], nil)
	var out []changeRow
	for cr.Next() {
		rec := cr.RecordBatch()
		kinds := rec.Column(n - 3).(*array.String)
		versions := rec.Column(n - 2).(*array.Int64)
		tss := rec.Column(n - 1).(*array.Timestamp)
		ids := rec.Column(0).(*array.Int64)
		for i := range int(rec.NumRows()) {
			out = append(out, changeRow{row: rowText(table, rec, i), kind: kinds.Value(i), key: ids.Value(i),
				version: versions.Value(i), ts: tss.Value(i).ToTime(arrow.Microsecond)})
		}
	}
	if err := cr.Err(); err != nil {
		t.Fatalf("changes %d..%d: %v", o.From, o.To, err)
	}
	return out, sc
}

// tableRows reads version v of tbl as a multiset of canonical rows over the columns of sc.
func tableRows(t *testing.T, tbl *Table, v uint64, sc *arrow.Schema) map[string]int {
	t.Helper()
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Version: v})
	if err != nil {
		t.Fatalf("read version %d: %v", v, err)
	}
	out := map[string]int{}
	for _, r := range recs {
		for i := range int(r.NumRows()) {
			out[rowText(sc, r, i)]++
		}
		r.Release()
	}
	return out
}

// versionKinds counts the change types of each version.
type versionKinds map[int64]map[string]int

// replayChanges reads the changes of versions from..latest and applies them, version by
// version, to the rows of version from-1 (empty for 1), checking after every version that the
// result is exactly that version read whole. It also checks the order rules (versions ascending;
// in a version, deletes and pre-images before inserts and post-images; a pre-image and a
// post-image per updated key) and every row's commit timestamp. It returns the change types per
// version.
func replayChanges(t *testing.T, tbl *Table, from uint64) versionKinds {
	t.Helper()
	rows, sc := readChanges(t, tbl, ChangeOptions{From: from})
	table := arrow.NewSchema(sc.Fields()[:sc.NumFields()-3], nil)
	latest := latestVersion(t, tbl)
	model := map[string]int{}
	if from > 1 {
		model = tableRows(t, tbl, from-1, table)
	}
	kinds := versionKinds{}
	next := 0
	for v := from; v <= latest; v++ {
		m, err := tbl.Manifest(t.Context(), v)
		if err != nil {
			t.Fatalf("manifest %d: %v", v, err)
		}
		kinds[int64(v)] = map[string]int{}
		adding := false
		pre, post := map[int64]int{}, map[int64]int{}
		for ; next < len(rows) && rows[next].version == int64(v); next++ {
			r := rows[next]
			kinds[int64(v)][r.kind]++
			if !r.ts.Equal(time.Unix(0, m.TimestampNanos).Truncate(time.Microsecond)) {
				t.Fatalf("version %d: commit timestamp %v, the version's is %v", v, r.ts, m.Timestamp())
			}
			switch r.kind {
			case ChangeDelete, ChangePreimage:
				if adding {
					t.Fatalf("version %d: a %s after an insert or post-image", v, r.kind)
				}
				if model[r.row] == 0 {
					t.Fatalf("version %d: %s of a row the table does not hold: %s", v, r.kind, r.row)
				}
				model[r.row]--
				if r.kind == ChangePreimage {
					pre[r.key]++
				}
			case ChangeInsert, ChangePostimage:
				adding = true
				model[r.row]++
				if r.kind == ChangePostimage {
					post[r.key]++
				}
			default:
				t.Fatalf("version %d: change type %q", v, r.kind)
			}
		}
		if fmt.Sprint(pre) != fmt.Sprint(post) {
			t.Fatalf("version %d: pre-images by key %v, post-images by key %v", v, pre, post)
		}
		want := tableRows(t, tbl, v, table)
		for k, n := range model {
			if n == 0 {
				delete(model, k)
			}
		}
		if !mapsEqual(model, want) {
			t.Fatalf("version %d (%s): the replayed feed holds %d distinct rows, the version %d:\nreplayed: %v\nversion:  %v",
				v, m.Transaction.Operation, len(model), len(want), shortRows(model), shortRows(want))
		}
	}
	if next != len(rows) {
		t.Fatalf("%d change rows of versions outside %d..%d (or out of order): %+v", len(rows)-next, from, latest, rows[next])
	}
	return kinds
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func shortRows(m map[string]int) string {
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(out)
	return shortList(out)
}

// changeHistory runs the operations every change feed test replays on tbl (keyed or not) and
// returns the version each named step committed.
func changeHistory(t *testing.T, tbl *Table, keyed bool) map[string]uint64 {
	ctx := t.Context()
	steps := map[string]uint64{}
	latest := func(name string) {
		steps[name] = latestVersion(t, tbl)
	}
	upsert := func(name string, sc *arrow.Schema, batches ...arrow.RecordBatch) {
		t.Helper()
		defer func() {
			for _, b := range batches {
				b.Release()
			}
		}()
		if !keyed {
			if _, err := tbl.Append(ctx, batches, nil); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		} else if _, err := tbl.Upsert(ctx, batches, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		latest(name)
	}
	appendRows := func(name string, rec arrow.RecordBatch) {
		t.Helper()
		defer rec.Release()
		if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		latest(name)
	}
	appendRows("append", genRows(rowsSchema, idRange(0, 100), 0))
	appendRows("append2", genRows(rowsSchema, idRange(100, 50), 0))
	upsert("upsert", rowsSchema, genRows(rowsSchema, idRange(130, 40), 1)) // 130..149 exist, 150..169 are new
	if _, err := tbl.Delete(ctx, expr.Lt("id", 10), nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	latest("delete")
	if _, err := tbl.Update(ctx, UpdateSpec{Where: expr.And(expr.Ge("id", 50), expr.Lt("id", 60)), Set: map[string]any{"name": "updated"}}, nil); err != nil {
		t.Fatalf("update: %v", err)
	}
	latest("update")
	if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
		t.Fatalf("compact: %v", err)
	}
	latest("compact")
	if _, err := tbl.UpdateConfig(ctx, map[string]string{"owner": "feed-test"}, nil, nil); err != nil {
		t.Fatalf("config: %v", err)
	}
	latest("config")
	// A schema change: a column added by an append in the merged schema.
	base, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := genRows(evolvedSchema, idRange(200, 10), 2)
	if _, err := appendMerged(ctx, tbl, base, ev); err != nil {
		t.Fatalf("schema change: %v", err)
	}
	ev.Release()
	latest("schema")
	// A fold's shape: one upsert whose batches repeat keys (oldest first; the last row of a key
	// wins), existing keys and new ones.
	upsert("repeated", evolvedSchema, genRows(evolvedSchema, []int64{20, 21, 300}, 3), genRows(evolvedSchema, []int64{20, 300, 301}, 4),
		genRows(evolvedSchema, []int64{20}, 5))
	if _, err := tbl.Delete(ctx, expr.Eq("id", 301), nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	latest("delete2")
	over := genRows(evolvedSchema, idRange(1000, 20), 6)
	if _, err := tbl.Overwrite(ctx, evolvedSchema, []arrow.RecordBatch{over}, nil); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	over.Release()
	latest("overwrite")
	upsert("after", evolvedSchema, genRows(evolvedSchema, idRange(1010, 20), 7))
	if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
		t.Fatalf("compact: %v", err)
	}
	latest("compact2")
	return steps
}

func createChangesTable(t *testing.T, store objstore.Store, keyed bool) *Table {
	co := CreateOptions{}
	if keyed {
		co.PrimaryKey = []string{"id"}
	}
	tbl, err := Create(t.Context(), store, "feed", rowsSchema, co, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestChangesReplayEveryVersion: replaying the change feed from version 1 onto an empty table
// gives exactly every version, for a keyed table and a keyless one, through appends, upserts of
// new and existing keys (one with keys repeated, as a MemWAL fold writes), deletes, an update, a
// schema change, an overwrite, compactions and a config change; and the change types of each
// step are the ones its operation means.
func TestChangesReplayEveryVersion(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			tbl := createChangesTable(t, localStore(t), keyed)
			steps := changeHistory(t, tbl, keyed)
			kinds := replayChanges(t, tbl, 1)
			for v := uint64(2); v <= latestVersion(t, tbl); v++ {
				replayChanges(t, tbl, v) // every start version, against the version before it
			}
			want := map[string]map[string]int{
				"append":    {ChangeInsert: 100},
				"delete":    {ChangeDelete: 10},
				"compact":   {},
				"config":    {},
				"schema":    {ChangeInsert: 10},
				"delete2":   {ChangeDelete: 1},
				"overwrite": {ChangeDelete: 171, ChangeInsert: 20},
				"compact2":  {},
			}
			if keyed {
				want["upsert"] = map[string]int{ChangePreimage: 20, ChangePostimage: 20, ChangeInsert: 20}
				want["update"] = map[string]int{ChangePreimage: 10, ChangePostimage: 10}
				// 20 and 21 exist: one pre-image and one post-image each, however often 20
				// was upserted; 300 and 301 are new: one insert each.
				want["repeated"] = map[string]int{ChangePreimage: 2, ChangePostimage: 2, ChangeInsert: 2}
				want["after"] = map[string]int{ChangePreimage: 10, ChangePostimage: 10, ChangeInsert: 10}
			} else {
				want["upsert"] = map[string]int{ChangeInsert: 40}
				want["update"] = map[string]int{ChangeDelete: 10, ChangeInsert: 10}
				want["repeated"] = map[string]int{ChangeInsert: 7}
				want["after"] = map[string]int{ChangeInsert: 20}
				want["overwrite"] = map[string]int{ChangeDelete: 196, ChangeInsert: 20}
			}
			for name, w := range want {
				got := kinds[int64(steps[name])]
				if fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("%s (version %d): changes %v, want %v", name, steps[name], got, w)
				}
			}
		})
	}
}

func localStore(t *testing.T) objstore.Store {
	st, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestChangesAfterCleanup: a range that reaches a version cleanup removed fails with
// ErrChangesUnavailable naming the oldest version changes can be read from, and the feed from
// that version still replays every version after it.
func TestChangesAfterCleanup(t *testing.T) {
	tbl := createChangesTable(t, localStore(t), true)
	changeHistory(t, tbl, true)
	rep, err := tbl.Cleanup(t.Context(), CleanupPolicy{OlderThan: time.Second, KeepLast: 4, Grace: time.Second, Now: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VersionsRemoved) == 0 {
		t.Fatal("cleanup removed no version")
	}
	vs, err := tbl.Versions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	oldest := vs[0] + 1
	for _, from := range []uint64{1, vs[0] - 1, vs[0]} {
		_, err := tbl.Changes(t.Context(), ChangeOptions{From: from})
		var ue *ChangesUnavailableError
		if !errors.As(err, &ue) || !errors.Is(err, ErrChangesUnavailable) {
			t.Fatalf("changes from %d after cleanup kept %v: %v, want ErrChangesUnavailable", from, vs, err)
		}
		if ue.Oldest != oldest || !strings.Contains(err.Error(), fmt.Sprintf("is %d", oldest)) {
			t.Fatalf("changes from %d: %v, want the oldest readable version %d named", from, err, oldest)
		}
	}
	replayChanges(t, tbl, oldest)
}

// TestChangesRange: the bounds of a change range.
func TestChangesRange(t *testing.T) {
	tbl := createChangesTable(t, localStore(t), true)
	rec := genRows(rowsSchema, idRange(0, 5), 0)
	defer rec.Release()
	if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    ChangeOptions
		want error
	}{
		{ChangeOptions{From: 0}, ErrInvalidChangeRange},
		{ChangeOptions{From: 2, To: 1}, ErrInvalidChangeRange},
		{ChangeOptions{From: 1, To: 3}, ErrVersionNotFound},
		{ChangeOptions{From: 1, SchemaVersion: 3}, ErrVersionNotFound},
	} {
		if _, err := tbl.Changes(t.Context(), c.o); !errors.Is(err, c.want) {
			t.Errorf("changes %+v: %v, want %v", c.o, err, c.want)
		}
	}
	// Past the latest version with no end: nothing yet, not an error (a follower's poll).
	if rows, _ := readChanges(t, tbl, ChangeOptions{From: 3}); len(rows) != 0 {
		t.Fatalf("changes from 3 of a 2-version table: %d rows", len(rows))
	}
	if rows, _ := readChanges(t, tbl, ChangeOptions{From: 2, To: 2, Columns: []string{"id"}}); len(rows) != 5 || rows[0].kind != ChangeInsert {
		t.Fatalf("changes of version 2: %+v", rows)
	}
	f := expr.Ge("id", 3)
	if rows, _ := readChanges(t, tbl, ChangeOptions{From: 1, Filter: f}); len(rows) != 2 {
		t.Fatalf("changes with filter id >= 3: %+v", rows)
	}
}

// TestChangesPairVariableKeys: an upsert of a table whose key does not encode in 8 bytes (a
// string, or an integer and a string) pairs its rows by the whole key.
func TestChangesPairVariableKeys(t *testing.T) {
	for _, key := range [][]string{{"name"}, {"id", "name"}} {
		t.Run(strings.Join(key, "+"), func(t *testing.T) {
			sc := arrow.NewSchema([]arrow.Field{
				{Name: "id", Type: arrow.PrimitiveTypes.Int64},
				{Name: "name", Type: arrow.BinaryTypes.String},
				{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			}, nil)
			tbl, err := Create(t.Context(), localStore(t), "feed", sc, CreateOptions{PrimaryKey: key}, nil)
			if err != nil {
				t.Fatal(err)
			}
			first := genRows(sc, idRange(0, 10), 0)
			defer first.Release()
			if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{first}, nil); err != nil {
				t.Fatal(err)
			}
			// genRows names row id "row-<id>-g<gen>": keep the names of 5..9 so that their keys
			// exist, and give 10..11 new ones.
			b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
			for _, id := range idRange(5, 7) {
				b.Field(0).(*array.Int64Builder).Append(id)
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d-g0", id))
				b.Field(2).(*array.Float64Builder).Append(float64(id) * 100)
			}
			up := b.NewRecordBatch()
			b.Release()
			defer up.Release()
			if _, err := tbl.Upsert(t.Context(), []arrow.RecordBatch{up}, nil); err != nil {
				t.Fatal(err)
			}
			kinds := replayChanges(t, tbl, 1)
			if got := fmt.Sprint(kinds[3]); got != fmt.Sprint(map[string]int{ChangeInsert: 2, ChangePostimage: 5, ChangePreimage: 5}) {
				t.Fatalf("the upsert's changes: %s", got)
			}
		})
	}
}

// TestChangesPairAcrossFragments: an upsert written as several fragments, one holding only new
// keys, and replacing rows of several fragments, one of which loses none: each row gets its own
// change type.
func TestChangesPairAcrossFragments(t *testing.T) {
	tbl, err := Create(t.Context(), localStore(t), "feed", rowsSchema, CreateOptions{PrimaryKey: []string{"id"}}, &Options{TargetRowsPerFragment: 4})
	if err != nil {
		t.Fatal(err)
	}
	first := genRows(rowsSchema, idRange(0, 12), 0) // fragments of ids 0..3, 4..7, 8..11
	defer first.Release()
	if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{first}, nil); err != nil {
		t.Fatal(err)
	}
	up := genRows(rowsSchema, []int64{1, 2, 9, 10, 20, 21, 22, 23}, 1) // 4..7 untouched; 20..23 new
	defer up.Release()
	if _, err := tbl.Upsert(t.Context(), []arrow.RecordBatch{up}, nil); err != nil {
		t.Fatal(err)
	}
	kinds := replayChanges(t, tbl, 1)
	if got := fmt.Sprint(kinds[3]); got != fmt.Sprint(map[string]int{ChangeInsert: 4, ChangePostimage: 4, ChangePreimage: 4}) {
		t.Fatalf("the upsert's changes: %s", got)
	}
}
