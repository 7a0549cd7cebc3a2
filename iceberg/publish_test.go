package iceberg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/internal/pythontest"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

// rows builds a batch of testSchema with the given ids (name "r<id>", score id/2, or tag).
func rows(tag string, ids ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s%d", tag, id))
		b.Field(2).(*array.Float64Builder).Append(float64(id) / 2)
	}
	return b.NewRecordBatch()
}

// storeEnv is one store kind with what a Python reader needs to reach it.
type storeEnv struct {
	name  string
	store objstore.Store
	env   []string
	// second opens another client of the same store (another server's).
	second func(t *testing.T) objstore.Store
}

// python returns the interpreter with pyiceberg and polars, or skips (fails under CI).
func python(t *testing.T) string {
	t.Helper()
	return pythontest.Interpreter(t, "pyiceberg", "polars")
}

// expectedRows returns, for every version the table still has, the rows it reads.
func expectedRows(t *testing.T, ctx context.Context, tb *engine.Table) map[string]any {
	t.Helper()
	vs, err := tb.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]any{}
	for _, v := range vs {
		recs, err := tb.ReadAll(ctx, engine.ScanOptions{Version: v})
		if err != nil {
			t.Fatalf("read version %d: %v", v, err)
		}
		out := []map[string]any{}
		for _, r := range recs {
			var buf bytes.Buffer
			if err := array.RecordToJSON(r, &buf); err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if line == "" {
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatal(err)
				}
				out = append(out, m)
			}
			r.Release()
		}
		versions[fmt.Sprint(v)] = out
	}
	return map[string]any{"versions": versions, "latest": vs[len(vs)-1]}
}

// verify runs the real readers (PyIceberg with time travel, Polars) against the table.
func verify(t *testing.T, ctx context.Context, py string, se storeEnv, tb *engine.Table) {
	t.Helper()
	exp, err := json.Marshal(expectedRows(t, ctx, tb))
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/expected.json"
	if err := os.WriteFile(path, exp, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, "testdata/read_iceberg.py", tb.URI(), path)
	cmd.Env = append(os.Environ(), se.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read_iceberg.py: %v\n%s", err, stderr.String())
	}
	var res struct {
		OK        bool     `json:"ok"`
		Errors    []string `json:"errors"`
		Snapshots int      `json:"snapshots"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("read_iceberg.py printed %q: %v", out, err)
	}
	if !res.OK {
		t.Fatalf("iceberg readers disagree with flight-sink:\n%s", strings.Join(res.Errors, "\n"))
	}
}

// deleteWhere deletes the rows of tb that the JSON predicate pred matches.
func deleteWhere(t *testing.T, ctx context.Context, tb *engine.Table, pred string) {
	t.Helper()
	p, err := expr.ParsePredicate([]byte(pred))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Delete(ctx, p, nil); err != nil {
		t.Fatal(err)
	}
}

func mustPublish(t *testing.T, ctx context.Context, tb *engine.Table) iceberg.Report {
	t.Helper()
	rep, err := iceberg.New(tb, nil).Publish(ctx)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return rep
}

// TestPublishOperations maps every operation to Iceberg snapshots and reads each one back with
// PyIceberg (time travel) and Polars: appends (coalesced), delete, keyed upsert, a compaction
// that a concurrent delete rebases through, overwrite, empty truncate, cleanup.
func TestPublishOperations(t *testing.T) {
	py := python(t)
	for _, se := range storeKinds(t) {
		t.Run(se.name, func(t *testing.T) {
			ctx := context.Background()
			opts := &engine.Options{CleanupRetain: iceberg.Retain}
			tb, err := engine.Create(ctx, se.store, "events", testSchema, engine.CreateOptions{PrimaryKey: []string{"id"}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			appendRows := func(tag string, ids ...int64) {
				t.Helper()
				if _, err := tb.Append(ctx, []arrow.RecordBatch{rows(tag, ids...)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			del := func(pred string) { t.Helper(); deleteWhere(t, ctx, tb, pred) }
			appendRows("a", 1, 2, 3)
			mustPublish(t, ctx, tb)
			appendRows("b", 4, 5)
			appendRows("c", 6, 7)
			if rep := mustPublish(t, ctx, tb); rep.Snapshots != 1 {
				t.Fatalf("two appends behind: %d snapshots, want 1 (coalesced)", rep.Snapshots)
			}
			del(`{"op": "=", "column": "id", "value": 2}`)
			mustPublish(t, ctx, tb)
			if _, err := tb.Upsert(ctx, []arrow.RecordBatch{rows("u", 3, 10)}, nil); err != nil {
				t.Fatal(err)
			}
			mustPublish(t, ctx, tb)

			// A compaction prepared before a delete commits after it: the delete's rows stay
			// deleted in the rewritten fragments.
			base, err := tb.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			txn, _, err := tb.PrepareCompaction(ctx, base, engine.CompactOptions{})
			if err != nil || txn == nil {
				t.Fatalf("prepare compaction: %v (nil: %v)", err, txn == nil)
			}
			del(`{"op": "=", "column": "id", "value": 5}`)
			if _, err := tb.Commit(ctx, txn); err != nil {
				t.Fatal(err)
			}
			del(`{"op": "=", "column": "id", "value": 6}`)
			mustPublish(t, ctx, tb)

			if _, err := tb.Overwrite(ctx, testSchema, []arrow.RecordBatch{rows("o", 20, 21)}, nil); err != nil {
				t.Fatal(err)
			}
			mustPublish(t, ctx, tb)
			if _, err := tb.Overwrite(ctx, testSchema, nil, nil); err != nil { // truncate
				t.Fatal(err)
			}
			mustPublish(t, ctx, tb)
			verify(t, ctx, py, se, tb)
			appendRows("z", 30)
			mustPublish(t, ctx, tb)

			// Cleanup: every version but the newest two goes, and the Iceberg snapshots
			// mirroring them with it; the ones retained still read.
			rep, err := tb.Cleanup(ctx, engine.CleanupPolicy{OlderThan: time.Second, KeepLast: 2, Grace: time.Second, Now: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.VersionsRemoved) == 0 {
				t.Fatal("cleanup removed no version")
			}
			verify(t, ctx, py, se, tb)
		})
	}
}

// storeKinds returns the local store and, when versitygw runs, an S3 store.
func storeKinds(t *testing.T) []storeEnv {
	dir := t.TempDir()
	openLocal := func(t *testing.T) objstore.Store {
		s, err := objstore.NewLocal(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	out := []storeEnv{{name: "local", store: openLocal(t), second: openLocal}}
	if s3, env, reopen, ok := s3Store(t); ok {
		out = append(out, storeEnv{name: "s3", store: s3, env: env, second: reopen})
	}
	return out
}

// TestTwoPublishersOneTable: two servers (two store clients, two table handles) commit to one
// table and publish it at once; metadata commits are put-if-absent, so every metadata file
// extends the one before it and every snapshot still reads as its version.
func TestTwoPublishersOneTable(t *testing.T) {
	py := python(t)
	for _, se := range storeKinds(t) {
		t.Run(se.name, func(t *testing.T) {
			ctx := context.Background()
			opts := &engine.Options{CleanupRetain: iceberg.Retain}
			tb, err := engine.Create(ctx, se.store, "shared", testSchema, engine.CreateOptions{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			other, err := engine.Open(ctx, se.second(t), "shared", opts)
			if err != nil {
				t.Fatal(err)
			}
			handles := []*engine.Table{tb, other}
			errs := make(chan error, 2)
			for i, h := range handles {
				go func() {
					for e := range 6 {
						if _, err := h.Append(ctx, []arrow.RecordBatch{rows("p", int64(100*i+e))}, nil); err != nil {
							errs <- err
							return
						}
						if _, err := iceberg.New(h, nil).Publish(ctx); err != nil {
							errs <- fmt.Errorf("publisher %d: %w", i, err)
							return
						}
					}
					errs <- nil
				}()
			}
			for range handles {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			mustPublish(t, ctx, other)
			verify(t, ctx, py, se, tb)
		})
	}
}

// TestPublishTurnedOff: the table configuration iceberg.publish=false stops publishing (the
// action gets ErrDisabled) and cleanup keeps nothing for the stale metadata.
func TestPublishTurnedOff(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "off", testSchema, engine.CreateOptions{}, &engine.Options{CleanupRetain: iceberg.Retain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("x", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, ctx, tb)
	for _, tc := range []struct {
		value string
		on    bool
	}{{"false", false}, {"0", false}, {"true", true}, {"nonsense", true}} {
		m, err := tb.UpdateConfig(ctx, map[string]string{iceberg.ConfigPublish: tc.value}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := iceberg.Enabled(m); got != tc.on {
			t.Errorf("%s=%q: Enabled = %v, want %v", iceberg.ConfigPublish, tc.value, got, tc.on)
		}
	}
	if _, err := tb.UpdateConfig(ctx, map[string]string{iceberg.ConfigPublish: "false"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := iceberg.New(tb, nil).Publish(ctx); !errors.Is(err, iceberg.ErrDisabled) {
		t.Fatalf("publish of a table turned off: %v, want ErrDisabled", err)
	}
	keep, err := iceberg.Retain(ctx, tb, 5, true)
	if err != nil || keep != 5 {
		t.Fatalf("Retain of a table turned off = %d, %v; want 5 (nothing kept)", keep, err)
	}
}

// TestSnapshotCap: iceberg.max_snapshots bounds the snapshots the metadata keeps, and the
// manifest lists of the expired ones are removed.
func TestSnapshotCap(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "capped", testSchema, engine.CreateOptions{Config: map[string]string{iceberg.ConfigMaxSnapshots: "3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := tb.Append(ctx, []arrow.RecordBatch{rows("c", int64(i))}, nil); err != nil {
			t.Fatal(err)
		}
		mustPublish(t, ctx, tb)
	}
	st, err := iceberg.New(tb, nil).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(ctx, "capped/metadata/snap-", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Snapshots > 4 || len(objs) != st.Snapshots {
		t.Fatalf("%d snapshots, %d manifest lists after 8 publishes with a cap of 3 (expired past 4)", st.Snapshots, len(objs))
	}
}
