package memwal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// helperProcessEnv marks a child process started by a test; it runs one helper test against the
// store its environment names and needs no S3 server of its own.
const helperProcessEnv = "FLIGHT_SINK_MEMWAL_HELPER_PROCESS"

func TestMain(m *testing.M) { storetest.MainUnlessHelper(m, helperProcessEnv) }

// forEachStore runs fn as parallel subtests on a local directory and on the real S3 server.
func forEachStore(t *testing.T, fn func(t *testing.T, store objstore.Store)) {
	t.Helper()
	storetest.ForEach(t, true, fn)
}

// rowsSchema and makeRows are typetest's rows: a key, the value a test checks (tag+"-"+id), and
// the epoch that wrote the row.
var rowsSchema = typetest.RowsSchema

func makeRows(from, n int64, tag string, epoch int64) arrow.RecordBatch {
	return typetest.Rows(from, n, tag, epoch)
}

// testShardID is the shard most tests use.
var testShardID = ShardIDs(1)[0]

func createTable(t testing.TB, store objstore.Store, pk []string) *engine.Table {
	t.Helper()
	tbl, err := engine.Create(context.Background(), store, "events", rowsSchema,
		engine.CreateOptions{PrimaryKey: pk, Config: map[string]string{ConfigShards: "1"}}, nil)
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return tbl
}

// testOptions keep thresholds out of the way unless a test sets them.
func testOptions() *Options {
	return &Options{MemtableMaxRows: 1 << 40, MemtableMaxAge: -1}
}

func openShard(t testing.TB, tbl *engine.Table, id string, o *Options) *Shard {
	t.Helper()
	if o == nil {
		o = testOptions()
	}
	s, err := OpenShard(context.Background(), tbl, id, o)
	if err != nil {
		t.Fatalf("open shard: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// put writes one epoch of q with ids from..from+n-1 and fails the test on error.
func put(t testing.TB, s *Shard, q string, epoch, from, n int64, tag string) PutResult {
	t.Helper()
	rec := makeRows(from, n, tag, epoch)
	defer rec.Release()
	res, err := s.Put(context.Background(), &epochid.ID{QueryID: q, EpochID: epoch}, rec)
	if err != nil {
		t.Fatalf("put epoch %d: %v", epoch, err)
	}
	return res
}

func flush(t testing.TB, s *Shard) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// row is one row of rowsSchema.
type row struct {
	ID  int64
	Val string
}

// readMerged returns every row of a merged read, sorted by id then value.
func readMerged(t testing.TB, tbl *engine.Table, shards ...ShardReader) []row {
	t.Helper()
	r, err := ScanMerged(context.Background(), tbl, shards, engine.ScanOptions{})
	if err != nil {
		t.Fatalf("scan merged: %v", err)
	}
	defer r.Release()
	var out []row
	for r.Next() {
		out = appendRows(out, r.RecordBatch())
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan merged: %v", err)
	}
	sortRows(out)
	return out
}

func appendRows(out []row, b arrow.RecordBatch) []row {
	ids := b.Column(b.Schema().FieldIndices("id")[0]).(*array.Int64)
	vals := b.Column(b.Schema().FieldIndices("val")[0]).(*array.String)
	for i := 0; i < int(b.NumRows()); i++ {
		out = append(out, row{ids.Value(i), vals.Value(i)})
	}
	return out
}

// baseRows returns the base table's rows, sorted.
func baseRows(t testing.TB, tbl *engine.Table) []row {
	t.Helper()
	recs, err := tbl.ReadAll(context.Background(), engine.ScanOptions{})
	if err != nil {
		t.Fatalf("read base: %v", err)
	}
	var out []row
	for _, r := range recs {
		out = appendRows(out, r)
		r.Release()
	}
	sortRows(out)
	return out
}

func sortRows(rs []row) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].ID != rs[j].ID {
			return rs[i].ID < rs[j].ID
		}
		return rs[i].Val < rs[j].Val
	})
}

// expectRows builds the sorted rows of ids from..from+n-1 tagged tag.
func expectRows(parts ...any) []row {
	var out []row
	for i := 0; i+2 < len(parts); i += 3 {
		from, n, tag := parts[i].(int), parts[i+1].(int), parts[i+2].(string)
		for id := from; id < from+n; id++ {
			out = append(out, row{int64(id), fmt.Sprintf("%s-%d", tag, id)})
		}
	}
	sortRows(out)
	return out
}

func checkRows(t testing.TB, what string, got, want []row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d\n got: %v\nwant: %v", what, len(got), len(want), clip(got), clip(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

func clip(rs []row) []row {
	if len(rs) > 20 {
		return rs[:20]
	}
	return rs
}

func latestShardManifest(t testing.TB, tbl *engine.Table, id string) *ShardManifest {
	t.Helper()
	m, err := NewManifestStore(tbl.Store(), tbl.Name(), id, nil).ReadLatest(context.Background())
	if err != nil {
		t.Fatalf("read shard manifest: %v", err)
	}
	return m
}

func generationNumbers(m *ShardManifest) []uint64 {
	var out []uint64
	for _, g := range m.FlushedGenerations {
		out = append(out, g.Generation)
	}
	return out
}

// countKeys counts the objects under prefix.
func countKeys(t testing.TB, store objstore.Store, prefix string) int {
	t.Helper()
	objs, err := store.List(context.Background(), prefix, "")
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	return len(objs)
}

// faultStore wraps a real store and fails chosen operations, to inject faults the way a real
// store would produce them.
type faultStore struct {
	objstore.Store
	mu          sync.Mutex
	failDelete  func(key string) bool                // Delete and DeletePrefix
	failCreate  func(key string) bool                // PutIfAbsent
	failGet     func(key string) bool                // Get
	rewritePut  func(key string, body []byte) []byte // Put: replaces the body
	blockPut    chan struct{}                        // when set, Put of a generation file waits for it to close
	blockPrefix string
}

var errInjected = errors.New("injected fault")

func (f *faultStore) hooks() (func(string) bool, func(string) bool, chan struct{}, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failDelete, f.failCreate, f.blockPut, f.blockPrefix
}

func (f *faultStore) set(fn func(*faultStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultStore) Delete(ctx context.Context, key string) error {
	if fail, _, _, _ := f.hooks(); fail != nil && fail(key) {
		return fmt.Errorf("delete %s: %w", key, errInjected)
	}
	return f.Store.Delete(ctx, key)
}

func (f *faultStore) DeletePrefix(ctx context.Context, prefix string) error {
	if fail, _, _, _ := f.hooks(); fail != nil && fail(prefix) {
		return fmt.Errorf("delete prefix %s: %w", prefix, errInjected)
	}
	return f.Store.DeletePrefix(ctx, prefix)
}

func (f *faultStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if _, fail, _, _ := f.hooks(); fail != nil && fail(key) {
		return fmt.Errorf("create %s: %w", key, errInjected)
	}
	return f.Store.PutIfAbsent(ctx, key, data)
}

func (f *faultStore) Get(ctx context.Context, key string) ([]byte, error) {
	f.mu.Lock()
	fail := f.failGet
	f.mu.Unlock()
	if fail != nil && fail(key) {
		return nil, fmt.Errorf("get %s: %w", key, errInjected)
	}
	return f.Store.Get(ctx, key)
}

func (f *faultStore) Put(ctx context.Context, key string, body io.Reader) error {
	f.mu.Lock()
	rewrite := f.rewritePut
	f.mu.Unlock()
	if rewrite != nil {
		b, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		body = bytes.NewReader(rewrite(key, b))
	}
	if _, _, block, prefix := f.hooks(); block != nil && strings.HasPrefix(key, prefix) {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("put %s: %w (blocked too long)", key, errInjected)
		}
	}
	return f.Store.Put(ctx, key, body)
}
