package streaming

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

var kvSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "v", Type: arrow.BinaryTypes.String},
}, nil)

func kv(pairs ...any) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, kvSchema)
	defer b.Release()
	for i := 0; i < len(pairs); i += 2 {
		b.Field(0).(*array.Int64Builder).Append(int64(pairs[i].(int)))
		b.Field(1).(*array.StringBuilder).Append(pairs[i+1].(string))
	}
	return b.NewRecordBatch()
}

func kvSource(t testing.TB, recs ...arrow.RecordBatch) BatchSource {
	r, err := array.NewRecordReader(kvSchema, recs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readKV reads the table through Sink.Scan (base merged with MemWAL) as id -> values.
func readKV(t testing.TB, s *Sink, table string) map[int64][]string {
	t.Helper()
	r, err := s.Scan(context.Background(), table, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	out := map[int64][]string{}
	for r.Next() {
		rec := r.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		vs := rec.Column(1).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			out[ids.Value(i)] = append(out[ids.Value(i)], vs.Value(i))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func putKV(t testing.TB, s *Sink, table, q string, e int64, mode Mode, create *CreateSpec, pairs ...any) Ack {
	t.Helper()
	var recs []arrow.RecordBatch
	if len(pairs) > 0 {
		recs = append(recs, kv(pairs...))
	}
	ack, err := s.WriteEpoch(context.Background(), EpochRequest{Table: table, QueryID: q, EpochID: e, Mode: mode, Create: create}, kvSource(t, recs...))
	if err != nil {
		t.Fatalf("epoch %d: %v", e, err)
	}
	return ack
}

func memwalSpec(shards int, pk ...string) *CreateSpec {
	c := &CreateSpec{PrimaryKey: pk}
	c.MemWAL = &struct{ Shards int }{Shards: shards}
	return c
}

func TestUpdateModeUpsertsOnKeyedTable(t *testing.T) {
	s, _ := newSink(t, nil)
	spec := &CreateSpec{PrimaryKey: []string{"id"}}
	if a := putKV(t, s, "k", "q", 0, ModeUpdate, spec, 1, "a", 2, "a"); a.Status != StatusCommitted {
		t.Fatalf("%+v", a)
	}
	if a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, 2, "b", 3, "b"); a.Status != StatusCommitted {
		t.Fatalf("%+v", a)
	}
	if a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, 2, "b", 3, "b"); a.Status != StatusDuplicate {
		t.Fatalf("replay: %+v", a)
	}
	got := readKV(t, s, "k")
	want := map[int64][]string{1: {"a"}, 2: {"b"}, 3: {"b"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Epochs on a MemWAL table land in the shards (no base version per epoch), replays are caught
// from shard state before and after the fold and across a restart, and the fold merges the
// rows into the base table exactly once.
func TestMemWALRouteExactlyOnce(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(store, nil)
	spec := memwalSpec(2)
	for e := int64(0); e < 5; e++ {
		a := putKV(t, s, "m", "q", e, ModeAppend, spec, int(e*10), "x", int(e*10+1), "y")
		if a.Status != StatusCommitted || a.Route != RouteMemWAL || a.Version != 0 {
			t.Fatalf("epoch %d: %+v", e, a)
		}
	}
	tbl, _ := s.Table(ctx, "m")
	if m, _ := tbl.Latest(ctx); m.Version != 1 {
		t.Fatalf("MemWAL epochs created base versions: latest %d", m.Version)
	}
	if a := putKV(t, s, "m", "q", 4, ModeAppend, spec, 40, "x", 41, "y"); a.Status != StatusDuplicate {
		t.Fatalf("replay before flush: %+v", a)
	}
	if got := readKV(t, s, "m"); len(got) != 10 {
		t.Fatalf("rows before the fold: %v", got)
	}
	if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
		t.Fatal(err)
	}
	n, err := s.FoldMemWAL(ctx, MemWALRequest{Table: "m"})
	if err != nil || n == 0 {
		t.Fatalf("fold: %d %v", n, err)
	}
	if a := putKV(t, s, "m", "q", 4, ModeAppend, spec, 40, "x", 41, "y"); a.Status != StatusDuplicate {
		t.Fatalf("replay after the fold: %+v", a)
	}
	base, err := tbl.ReadAll(ctx, engine.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var baseRows int64
	for _, r := range base {
		baseRows += r.NumRows()
		r.Release()
	}
	if baseRows != 10 {
		t.Fatalf("base rows after the fold: %d", baseRows)
	}
	got := readKV(t, s, "m")
	for id, vs := range got {
		if len(vs) != 1 {
			t.Fatalf("id %d present %d times after the fold", id, len(vs))
		}
	}
	// A restart: a new sink on the same root still recognises the replay and keeps going.
	s.Close()
	s2 := NewSink(store, nil)
	defer s2.Close()
	if a := putKV(t, s2, "m", "q", 4, ModeAppend, spec, 40, "x", 41, "y"); a.Status != StatusDuplicate {
		t.Fatalf("replay after restart: %+v", a)
	}
	if a := putKV(t, s2, "m", "q", 5, ModeAppend, spec, 50, "z"); a.Status != StatusCommitted {
		t.Fatalf("epoch after restart: %+v", a)
	}
	if got := readKV(t, s2, "m"); len(got) != 11 {
		t.Fatalf("rows after restart: %d", len(got))
	}
}

func TestMemWALKeyedNewestWinsAndCompleteTruncates(t *testing.T) {
	ctx := context.Background()
	s, _ := newSink(t, nil)
	defer s.Close()
	spec := memwalSpec(3, "id")
	putKV(t, s, "mk", "q", 0, ModeUpdate, spec, 1, "a", 2, "a", 3, "a")
	putKV(t, s, "mk", "q", 1, ModeUpdate, spec, 2, "b")
	if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "mk"}); err != nil {
		t.Fatal(err)
	}
	putKV(t, s, "mk", "q", 2, ModeUpdate, spec, 3, "c", 4, "c")
	want := map[int64][]string{1: {"a"}, 2: {"b"}, 3: {"c"}, 4: {"c"}}
	if got := readKV(t, s, "mk"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged read: got %v, want %v", got, want)
	}
	if _, err := s.FoldMemWAL(ctx, MemWALRequest{Table: "mk"}); err != nil {
		t.Fatal(err)
	}
	if got := readKV(t, s, "mk"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the fold: got %v, want %v", got, want)
	}
	// A complete epoch replaces everything, MemWAL rows included.
	putKV(t, s, "mk", "q", 3, ModeUpdate, spec, 9, "m") // still in a memtable
	if a := putKV(t, s, "mk", "q2", 0, ModeComplete, spec, 7, "z"); a.Status != StatusCommitted || a.Route != RouteDirect {
		t.Fatalf("complete: %+v", a)
	}
	if got := readKV(t, s, "mk"); fmt.Sprint(got) != fmt.Sprint(map[int64][]string{7: {"z"}}) {
		t.Fatalf("after complete: %v", got)
	}
}

// With maintenance on, a MemWAL shard folds itself into the base table once enough flushed
// generations wait in it: a stream of epochs needs no fold_memwal_shard call, every row is
// there exactly once, replays stay duplicates after the fold, and with maintenance off nothing
// folds. The flusher runs behind the puts: in background mode the flushes after the stream stops
// still fold, and in inline mode the next put does.
func TestMemWALFoldsAutomatically(t *testing.T) {
	for _, mode := range []engine.MaintenanceMode{engine.MaintenanceInline, engine.MaintenanceBackground, engine.MaintenanceOff} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			const need = 3
			opts := &Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: mode}, MemWALFoldGenerations: need}
			opts.MemWAL.MemtableMaxRows = 4 // every second epoch seals the memtable: a generation
			// Above the 20 generations of the run: the fold ceiling (TestMemWALFoldCeiling) would
			// fold with maintenance off too.
			opts.MemWAL.MaxUnfoldedGenerations = 64
			s, _ := newSink(t, opts)
			t.Cleanup(s.Close) // before the temporary directory goes, even when the test fails
			spec := memwalSpec(1)
			const epochs = 41
			for e := 0; e < epochs; e++ {
				if e == epochs-1 && mode == engine.MaintenanceInline {
					waitFlushed(t, s, "f") // the last put sees all 20 generations flushed
				}
				if a := putKV(t, s, "f", "q", int64(e), ModeAppend, spec, e*2, "a", e*2+1, "b"); a.Status != StatusCommitted {
					t.Fatalf("epoch %d: %+v", e, a)
				}
			}
			tbl, _ := s.Table(ctx, "f")
			shard := memwal.ShardIDs(1)[0]
			// Every fold leaves fewer than need generations waiting: 20 flushed, at least 18 folded.
			const wantFolded = 20 - (need - 1)
			deadline := time.Now().Add(30 * time.Second)
			for {
				m, err := tbl.Latest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				folded := m.MemWALMerged[shard]
				if mode == engine.MaintenanceOff {
					if folded != 0 || len(m.Fragments) != 0 {
						t.Fatalf("maintenance off, yet the shard folded up to generation %d (%d base fragments)", folded, len(m.Fragments))
					}
					break
				}
				if folded >= wantFolded && m.Rows() >= 4*wantFolded {
					break
				}
				if mode == engine.MaintenanceInline || time.Now().After(deadline) {
					t.Fatalf("after %d epochs the shard folded only up to generation %d (want %d), base rows %d", epochs, folded, wantFolded, m.Rows())
				}
				time.Sleep(5 * time.Millisecond) // background folds are still running
			}
			got := readKV(t, s, "f")
			if len(got) != 2*epochs {
				t.Fatalf("%d distinct ids, want %d", len(got), 2*epochs)
			}
			for id, vs := range got {
				if len(vs) != 1 {
					t.Fatalf("id %d present %d times", id, len(vs))
				}
			}
			// Spark replays the last epoch after a restart.
			last := epochs - 1
			if a := putKV(t, s, "f", "q", int64(last), ModeAppend, spec, last*2, "a", last*2+1, "b"); a.Status != StatusDuplicate {
				t.Fatalf("replay of the last epoch: %+v", a)
			}
		})
	}
}

// waitFlushed waits until this process's writers of table's shards have flushed every sealed
// memtable.
func waitFlushed(t *testing.T, s *Sink, table string) {
	t.Helper()
	s.mu.Lock()
	ss := s.memwal[table]
	s.mu.Unlock()
	for _, r := range ss.Readers() {
		w, ok := r.(*memwal.Shard) // a shard this process writes
		deadline := time.Now().Add(30 * time.Second)
		for ok && w.Stats().SealedMemtables > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("shard %s: %d sealed memtables not flushed after 30 s", w.ShardID(), w.Stats().SealedMemtables)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestMemWALManyQueriesBoundedShardManifest: 3,000 streaming queries through a MemWAL table
// leave a shard manifest of bounded size (the watermarks of the queries that flushed longest ago
// are in the shard's archive, as the base manifest's are in its own), and the replay of an early
// query's epoch is still a duplicate, before and after a restart.
func TestMemWALManyQueriesBoundedShardManifest(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(store, &Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	spec := memwalSpec(1)
	const queries, perFold = 3000, 250
	query := func(i int) string { return fmt.Sprintf("query-%04d", i) }
	for i := range queries {
		if a := putKV(t, s, "m", query(i), 3, ModeAppend, spec, i, "x"); a.Status != StatusCommitted || a.Route != RouteMemWAL {
			t.Fatalf("%s: %+v", query(i), a)
		}
		if (i+1)%perFold == 0 {
			if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FoldMemWAL(ctx, MemWALRequest{Table: "m"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	shard := memwal.ShardIDs(1)[0]
	objs, err := store.List(ctx, "m/_mem_wal/"+shard+"/manifest/", "")
	if err != nil || len(objs) == 0 {
		t.Fatalf("shard manifests: %d, %v", len(objs), err)
	}
	// Unbounded, 3,000 watermarks take about 230 KB.
	if newest := objs[len(objs)-1]; newest.Size > 32<<10 {
		t.Errorf("shard manifest %s is %d bytes after %d queries, want at most 32 KiB", newest.Key, newest.Size, queries)
	}

	for _, early := range []string{query(0), query(1)} {
		if a := putKV(t, s, "m", early, 3, ModeAppend, spec, 0, "again"); a.Status != StatusDuplicate {
			t.Fatalf("replay of %s epoch 3: %+v, want a duplicate", early, a)
		}
	}
	s.Close()
	s2 := NewSink(store, &Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	defer s2.Close()
	if a := putKV(t, s2, "m", query(2), 3, ModeAppend, spec, 0, "again"); a.Status != StatusDuplicate {
		t.Fatalf("replay of %s epoch 3 after a restart: %+v, want a duplicate", query(2), a)
	}
	if got := readKV(t, s2, "m"); len(got) != queries {
		t.Fatalf("%d rows, want %d (one per query, none of the replays)", len(got), queries)
	}
}
