package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/objstore"
)

// Helpers of the table-health tests (delete, update, upsert, compaction, cleanup). They are
// prefixed with h so they never collide with the helpers of the other engine tests.

// hSchema: a key, a value tag that updates and upserts change, and a nullable score.
var hSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "val", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

// hScoreNull says which ids have a null score (a fifth of them).
func hScoreNull(id int64) bool { return id%5 == 0 }

// hBatch builds rows of hSchema with the given ids, all tagged val. The caller releases it.
func hBatch(ids []int64, val string) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, hSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(val)
		if hScoreNull(id) {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(float64(id))
		}
	}
	return b.NewRecordBatch()
}

func hRange(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// hCreate creates a table of hSchema, with primary key id when pk is set.
func hCreate(t testing.TB, store objstore.Store, name string, pk bool, opts *Options) *Table {
	t.Helper()
	co := CreateOptions{}
	if pk {
		co.PrimaryKey = []string{"id"}
	}
	tbl, err := Create(t.Context(), store, name, hSchema, co, opts)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return tbl
}

func hOpen(t testing.TB, store objstore.Store, name string, opts *Options) *Table {
	t.Helper()
	tbl, err := Open(t.Context(), store, name, opts)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return tbl
}

// hAppend appends ids tagged val as one transaction.
func hAppend(t testing.TB, tbl *Table, ids []int64, val string) *Manifest {
	t.Helper()
	rec := hBatch(ids, val)
	defer rec.Release()
	m, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil)
	if err != nil {
		t.Fatalf("append %d rows: %v", len(ids), err)
	}
	return m
}

// hRead reads a version (0: latest) into id -> val, failing on a duplicate id or a score that
// does not belong to its id.
func hRead(t testing.TB, tbl *Table, version uint64) map[int64]string {
	t.Helper()
	got, err := hReadErr(t, tbl, version)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func hReadErr(t testing.TB, tbl *Table, version uint64) (map[int64]string, error) {
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Version: version})
	if err != nil {
		return nil, fmt.Errorf("scan version %d: %w", version, err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	out := make(map[int64]string)
	for _, r := range recs {
		ids := r.Column(0).(*array.Int64)
		vals := r.Column(1).(*array.String)
		scores := r.Column(2).(*array.Float64)
		for i := 0; i < int(r.NumRows()); i++ {
			id := ids.Value(i)
			if _, dup := out[id]; dup {
				return nil, fmt.Errorf("scan version %d: id %d appears twice", version, id)
			}
			out[id] = vals.Value(i)
			if scores.IsNull(i) != hScoreNull(id) || (!scores.IsNull(i) && scores.Value(i) != float64(id)) {
				return nil, fmt.Errorf("scan version %d: id %d has a wrong score", version, id)
			}
		}
	}
	return out, nil
}

// hWant builds an expected id -> val map.
func hWant(ids []int64, val string) map[int64]string {
	out := make(map[int64]string, len(ids))
	for _, id := range ids {
		out[id] = val
	}
	return out
}

// hRequireRows fails unless got equals want, naming the first differences.
func hRequireRows(t testing.TB, what string, got, want map[int64]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	var diffs []string
	keys := slices.Sorted(maps.Keys(want))
	for _, id := range keys {
		if g, ok := got[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %d", id))
		} else if g != want[id] {
			diffs = append(diffs, fmt.Sprintf("id %d val %q want %q", id, g, want[id]))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %d", id))
		}
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], "...")
	}
	t.Fatalf("%s: got %d rows, want %d: %s", what, len(got), len(want), strings.Join(diffs, ", "))
}

// hLatest returns the latest manifest.
func hLatest(t testing.TB, tbl *Table) *Manifest {
	t.Helper()
	m, err := tbl.Latest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hKeys lists the table-relative keys under dir.
func hKeys(t testing.TB, tbl *Table, dir string) []string {
	t.Helper()
	objs, err := tbl.Store().List(t.Context(), tbl.key(dir), "")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = strings.TrimPrefix(o.Key, tbl.prefix)
	}
	return out
}
