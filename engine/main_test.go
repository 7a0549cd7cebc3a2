package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// helperProcessEnv marks a child process started by a test (TestHelperProcess*). A child runs
// one helper test against a store named by its environment and needs no S3 server of its own.
const helperProcessEnv = "FLIGHT_SINK_ENGINE_HELPER_PROCESS"

func TestMain(m *testing.M) { storetest.MainUnlessHelper(m, helperProcessEnv) }

// forEachStore runs fn as a subtest on every kind of store the engine must work on.
func forEachStore(t *testing.T, fn func(t *testing.T, store objstore.Store)) {
	t.Helper()
	storetest.ForEach(t, false, fn)
}

// rowsSchema is the schema most tests use: a non-nullable id, which every test checks row by
// row, and two nullable payload columns derived from it.
var rowsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

func rowName(id int64) string    { return fmt.Sprintf("row-%d", id) }
func rowScore(id int64) float64  { return float64(id) / 2 }
func rowScoreNull(id int64) bool { return id%7 == 3 }
func idRange(from, n int64) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = from + int64(i)
	}
	return ids
}

// makeRows builds a batch of rowsSchema holding ids. The caller releases it.
func makeRows(ids []int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowsSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(rowName(id))
		if rowScoreNull(id) {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(rowScore(id))
		}
	}
	return b.NewRecordBatch()
}

// createRowsTable creates table name with rowsSchema.
func createRowsTable(t testing.TB, store objstore.Store, name string, opts *Options) *Table {
	t.Helper()
	tbl, err := Create(t.Context(), store, name, rowsSchema, CreateOptions{}, opts)
	if err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return tbl
}

// appendIDs appends one batch of ids and returns the new version's manifest.
func appendIDs(t testing.TB, tbl *Table, ids []int64, props map[string]string) *Manifest {
	t.Helper()
	rec := makeRows(ids)
	defer rec.Release()
	m, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec}, props)
	if err != nil {
		t.Fatalf("append %d rows: %v", len(ids), err)
	}
	return m
}

// scanRows reads a version fully and checks every row's payload against its id. It returns the
// ids in scan order.
func scanRows(t testing.TB, tbl *Table, version uint64) []int64 {
	t.Helper()
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Version: version})
	if err != nil {
		t.Fatalf("scan version %d: %v", version, err)
	}
	var ids []int64
	for _, r := range recs {
		if !arrowschema.EqualIgnoringFieldIDs(r.Schema(), rowsSchema) {
			t.Fatalf("scan version %d: schema %s, want %s", version, r.Schema(), rowsSchema)
		}
		idc := r.Column(0).(*array.Int64)
		names := r.Column(1).(*array.String)
		scores := r.Column(2).(*array.Float64)
		for i := 0; i < int(r.NumRows()); i++ {
			id := idc.Value(i)
			ids = append(ids, id)
			if names.Value(i) != rowName(id) {
				t.Fatalf("scan version %d: row %d has name %q", version, id, names.Value(i))
			}
			if scores.IsNull(i) != rowScoreNull(id) || (!scores.IsNull(i) && scores.Value(i) != rowScore(id)) {
				t.Fatalf("scan version %d: row %d has a wrong score", version, id)
			}
		}
		r.Release()
	}
	return ids
}

// requireSameIDs fails unless got holds exactly the ids of want, each once, in any order.
func requireSameIDs(t testing.TB, what string, got, want []int64) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	for i := 1; i < len(g); i++ {
		if g[i] == g[i-1] {
			t.Fatalf("%s: row %d appears more than once", what, g[i])
		}
	}
	if !slices.Equal(g, w) {
		t.Fatalf("%s: got %d rows, want %d; first difference: %s", what, len(g), len(w), firstDiff(g, w))
	}
}

func firstDiff(got, want []int64) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("index %d got %d want %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// requireDenseVersions fails unless the table's versions are exactly 1..n.
func requireDenseVersions(t testing.TB, tbl *Table, n uint64) {
	t.Helper()
	vs, err := tbl.Versions(t.Context())
	if err != nil {
		t.Fatalf("versions: %v", err)
	}
	if uint64(len(vs)) != n {
		t.Fatalf("table has %d versions (%v), want %d", len(vs), shortList(vs), n)
	}
	for i, v := range vs {
		if v != uint64(i+1) {
			t.Fatalf("versions are not dense: position %d holds version %d (%v)", i, v, shortList(vs))
		}
	}
}

func shortList[T any](xs []T) string {
	if len(xs) <= 20 {
		return fmt.Sprint(xs)
	}
	return fmt.Sprint(xs[:20]) + "..."
}

// listKeys lists the keys under a table-relative directory (e.g. "data/").
func listKeys(t testing.TB, tbl *Table, dir string) []string {
	t.Helper()
	objs, err := tbl.Store().List(t.Context(), tbl.key(dir), "")
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = strings.TrimPrefix(o.Key, tbl.prefix)
	}
	return keys
}

// referencedFiles returns every data file any retained version references, table-relative.
func referencedFiles(t testing.TB, tbl *Table) map[string]bool {
	t.Helper()
	vs, err := tbl.Versions(t.Context())
	if err != nil {
		t.Fatalf("versions: %v", err)
	}
	refs := map[string]bool{}
	for _, v := range vs {
		m, err := tbl.Manifest(t.Context(), v)
		if err != nil {
			t.Fatalf("manifest %d: %v", v, err)
		}
		for _, f := range m.Fragments {
			for _, df := range f.Files {
				refs[df.Path] = true
			}
		}
	}
	return refs
}

func latestVersion(t testing.TB, tbl *Table) uint64 {
	t.Helper()
	m, err := tbl.Latest(t.Context())
	if err != nil {
		t.Fatalf("latest: %v", err)
	}
	return m.Version
}
