package streaming

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
)

// walPutStore is an object store (not *objstore.Local, so MemWAL writes each WAL entry as an
// object) that can hold back the WAL entry puts of a table's shards, to see which of them are in
// flight together, and fail one of them.
type walPutStore struct {
	objstore.Store

	mu       sync.Mutex
	gather   int                 // hold WAL puts until this many shards have one in flight (0: off)
	inFlight map[string]int      // shard -> WAL puts in flight
	most     int                 // the most shards seen with a WAL put in flight at once
	failNext bool                // fail the next WAL put (once)
	failed   map[string]struct{} // shards whose WAL put was failed
}

func newWALPutStore(t *testing.T) *walPutStore {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &walPutStore{Store: local, inFlight: map[string]int{}, failed: map[string]struct{}{}}
	return s
}

// walShard returns the shard of a WAL entry key (<table>/_mem_wal/<shard>/wal/<position>.arrow).
func walShard(key string) (string, bool) {
	_, rest, ok := strings.Cut(key, "/_mem_wal/")
	if !ok {
		return "", false
	}
	shard, rest, ok := strings.Cut(rest, "/")
	return shard, ok && strings.HasPrefix(rest, "wal/")
}

func (s *walPutStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	shard, ok := walShard(key)
	if !ok {
		return s.Store.PutIfAbsent(ctx, key, data)
	}
	s.mu.Lock()
	if s.failNext {
		s.failNext = false
		s.failed[shard] = struct{}{}
		s.mu.Unlock()
		return errors.New("injected: WAL entry put failed")
	}
	s.inFlight[shard]++
	s.most = max(s.most, len(s.inFlight))
	if s.most >= s.gather {
		s.gather = 0 // gathered: every put held back goes on
	}
	deadline := time.Now().Add(30 * time.Second) // a ceiling for the failing case, not a timing
	for s.gather > 0 && time.Now().Before(deadline) {
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
		s.mu.Lock()
	}
	s.gather = 0 // gathered, or given up on: hold nothing back any more
	s.mu.Unlock()
	err := s.Store.PutIfAbsent(ctx, key, data)
	s.mu.Lock()
	if s.inFlight[shard]--; s.inFlight[shard] == 0 {
		delete(s.inFlight, shard)
	}
	s.mu.Unlock()
	return err
}

// disarm stops holding puts back and returns the most shards seen with a WAL put in flight at
// once since arm.
func (s *walPutStore) disarm() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gather = 0
	return s.most
}

func (s *walPutStore) arm(gather int, failNext bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gather, s.failNext, s.most = gather, failNext, 0
}

// A keyed epoch puts every shard's part at once: the four shards' WAL entries are in flight
// together, so the epoch waits for the slowest shard's commit, not the sum of four. Sequential
// puts would never have more than one in flight (the store holds each back for 30 s waiting for
// the others, then the test fails on the count).
func TestMemWALKeyedEpochPutsShardsAtOnce(t *testing.T) {
	store := newWALPutStore(t)
	s := NewSink(store, nil)
	t.Cleanup(s.Close)
	const shards = 4
	spec := memwalSpec(shards, "id")
	pairs := func(e int) []any {
		var out []any
		for k := 0; k < 32; k++ { // 32 keys: every shard gets rows
			out = append(out, k, fmt.Sprintf("e%d", e))
		}
		return out
	}
	putKV(t, s, "k", "q", 0, ModeUpdate, spec, pairs(0)...) // opens (claims) the shards
	store.arm(shards, false)
	if a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, pairs(1)...); a.Status != StatusCommitted || a.Route != RouteMemWAL {
		t.Fatalf("epoch 1: %+v", a)
	}
	most := store.disarm()
	if most != shards {
		t.Fatalf("at most %d of %d shards had their WAL entry in flight at once", most, shards)
	}
	got := readKV(t, s, "k")
	for k := int64(0); k < 32; k++ {
		if vs := got[k]; len(vs) != 1 || vs[0] != "e1" {
			t.Fatalf("key %d: %v, want [e1]", k, vs)
		}
	}
}

// One shard's part of a keyed epoch fails while the others land: the epoch is not acknowledged,
// its retry puts the missing part (the shards that hold it are skipped), and every key is there
// once with the epoch's value.
func TestMemWALKeyedEpochRetryAfterOneShardFailed(t *testing.T) {
	store := newWALPutStore(t)
	s := NewSink(store, nil)
	t.Cleanup(s.Close)
	spec := memwalSpec(4, "id")
	var pairs []any
	for k := 0; k < 32; k++ {
		pairs = append(pairs, k, "v")
	}
	putKV(t, s, "k", "q", 0, ModeUpdate, spec, 100, "first")
	store.arm(0, true)
	_, err := s.WriteEpoch(context.Background(), EpochRequest{Table: "k", QueryID: "q", EpochID: 1, Mode: ModeUpdate, Create: spec}, kvSource(t, kv(pairs...)))
	if err == nil {
		t.Fatal("an epoch whose shard put failed was acknowledged")
	}
	if len(store.failed) != 1 {
		t.Fatalf("failed shards: %v", store.failed)
	}
	a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, pairs...)
	if a.Status != StatusCommitted {
		t.Fatalf("retry: %+v", a)
	}
	if a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, pairs...); a.Status != StatusDuplicate {
		t.Fatalf("second replay: %+v", a)
	}
	got := readKV(t, s, "k")
	if len(got) != 33 {
		t.Fatalf("%d keys, want 33: %v", len(got), got)
	}
	for k := int64(0); k < 32; k++ {
		if vs := got[k]; len(vs) != 1 || vs[0] != "v" {
			t.Fatalf("key %d: %v, want [v]", k, vs)
		}
	}
}

// BenchmarkMemWALKeyedEpochs measures keyed MemWAL epochs (1,000 rows split over 4 shards) on a
// local store with 20 ms added to every store call, the round trip of a remote object store:
// the shards' parts put one after another (the baseline) against all at once. Run it with
//
//	go test ./streaming -run '^$' -bench BenchmarkMemWALKeyedEpochs -benchtime 40x
func BenchmarkMemWALKeyedEpochs(b *testing.B) {
	for _, queries := range []int{1, 4} {
		for _, atOnce := range []bool{false, true} {
			name := fmt.Sprintf("queries=%d/shards=one-after-another", queries)
			if atOnce {
				name = fmt.Sprintf("queries=%d/shards=at-once", queries)
			}
			b.Run(name, func(b *testing.B) {
				defer func(v bool) { shardPutsAtOnce = v }(shardPutsAtOnce)
				shardPutsAtOnce = atOnce
				local, err := objstore.NewLocal(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				s := NewSink(faultstore.New(local, faultstore.FixedLatency(20*time.Millisecond)), nil)
				defer s.Close()
				spec := memwalSpec(4, "id")
				var pairs []any
				for k := 0; k < 1000; k++ {
					pairs = append(pairs, k, "value")
				}
				putKV(b, s, "k", "q0", 0, ModeUpdate, spec, pairs...) // creates the table, claims the shards
				b.ResetTimer()
				start := time.Now()
				var g errgroup.Group
				for q := 0; q < queries; q++ {
					g.Go(func() error {
						for e := 1; e <= b.N; e++ {
							r := EpochRequest{Table: "k", QueryID: fmt.Sprintf("q%d", q), EpochID: int64(e), Mode: ModeUpdate, Create: spec}
							if _, err := s.WriteEpoch(context.Background(), r, kvSource(b, kv(pairs...))); err != nil {
								return err
							}
						}
						return nil
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N*queries)/time.Since(start).Seconds(), "epochs/s")
			})
		}
	}
}

// A keyed epoch that lands directly on a MemWAL table (route "direct", or a schema-changing
// epoch, which always does) wins over the older MemWAL rows of its keys, in reads and after the
// fold: the shards fold before its upsert commits.
func TestMemWALKeyedDirectUpsertWinsOverMemWALRows(t *testing.T) {
	extended := arrow.NewSchema(append(kvSchema.Fields(), arrow.Field{Name: "w", Type: arrow.PrimitiveTypes.Int64, Nullable: true}), nil)
	for _, tc := range []struct {
		name string
		req  func(r *EpochRequest) BatchSource
	}{
		{"route direct", func(r *EpochRequest) BatchSource {
			r.Route = RouteDirect
			return kvSource(t, kv(1, "new", 3, "new"))
		}},
		{"schema change", func(r *EpochRequest) BatchSource {
			r.MergeSchema = true
			b := array.NewRecordBuilder(memory.DefaultAllocator, extended)
			defer b.Release()
			b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 3}, nil)
			b.Field(1).(*array.StringBuilder).AppendValues([]string{"new", "new"}, nil)
			b.Field(2).(*array.Int64Builder).AppendValues([]int64{7, 7}, nil)
			r2, err := array.NewRecordReader(extended, []arrow.RecordBatch{b.NewRecordBatch()})
			if err != nil {
				t.Fatal(err)
			}
			return r2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := newSink(t, nil)
			spec := memwalSpec(2, "id")
			putKV(t, s, "k", "q", 0, ModeUpdate, spec, 1, "a", 2, "a")
			if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "k"}); err != nil {
				t.Fatal(err)
			}
			// id 1 in a flushed generation and in the memtable: both older than the direct epoch.
			if a := putKV(t, s, "k", "q", 1, ModeUpdate, spec, 1, "old"); a.Route != RouteMemWAL {
				t.Fatalf("epoch 1: %+v", a)
			}
			r := EpochRequest{Table: "k", QueryID: "q", EpochID: 2, Mode: ModeUpdate}
			src := tc.req(&r)
			a, err := s.WriteEpoch(ctx, r, src)
			if err != nil || a.Status != StatusCommitted || a.Route != RouteDirect {
				t.Fatalf("direct epoch: %+v, %v", a, err)
			}
			want := fmt.Sprint(map[int64][]string{1: {"new"}, 2: {"a"}, 3: {"new"}})
			if got := readKV(t, s, "k"); fmt.Sprint(got) != want {
				t.Fatalf("read after the direct epoch: got %v, want %s", got, want)
			}
			if _, err := s.FlushMemWAL(ctx, MemWALRequest{Table: "k"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FoldMemWAL(ctx, MemWALRequest{Table: "k"}); err != nil {
				t.Fatal(err)
			}
			if got := readKV(t, s, "k"); fmt.Sprint(got) != want {
				t.Fatalf("read after the fold: got %v, want %s", got, want)
			}
			// A replay of the direct epoch is a duplicate.
			if a, err := s.WriteEpoch(ctx, r, tc.req(&r)); err != nil || a.Status != StatusDuplicate {
				t.Fatalf("replay: %+v, %v", a, err)
			}
		})
	}
}
