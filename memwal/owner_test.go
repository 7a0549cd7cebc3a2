package memwal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// ownerServer is one "server" of a table: its own engine.Table handle and its own shard set.
type ownerServer struct {
	t   testing.TB
	tbl *engine.Table
	ss  *ShardSet
}

// newOwnerServers creates an unkeyed table with the given shards and opens one server of it per
// lease TTL given (0: the default), each with its own table handle and shard set.
func newOwnerServers(t testing.TB, store objstore.Store, shards int, ttls ...time.Duration) []*ownerServer {
	t.Helper()
	ctx := context.Background()
	if _, err := engine.Create(ctx, store, "events", rowsSchema,
		engine.CreateOptions{Config: map[string]string{ConfigShards: fmt.Sprint(shards)}}, nil); err != nil {
		t.Fatalf("create table: %v", err)
	}
	var out []*ownerServer
	for _, ttl := range ttls {
		tbl, err := engine.Open(ctx, store, "events", nil)
		if err != nil {
			t.Fatal(err)
		}
		o := testOptions()
		o.OwnerLeaseTTL = ttl
		ss := NewShardSet(tbl, ShardIDs(shards), &ShardSetOptions{Shard: *o, FoldGenerations: -1})
		t.Cleanup(ss.Close)
		out = append(out, &ownerServer{t: t, tbl: tbl, ss: ss})
	}
	return out
}

// put puts epoch e of query q (rows from..from+n-1) through the server, with the streaming layer's
// dedupe rules, and reports whether it was a replay. An epoch that a shard has flushed past is
// errQueryReusedTest.
func (s *ownerServer) put(q string, e, from, n int64) (bool, error) {
	ctx := context.Background()
	rec := makeRows(from, n, q, e)
	defer rec.Release()
	m, err := s.tbl.Latest(ctx)
	if err != nil {
		return false, err
	}
	id := &epochid.ID{QueryID: q, EpochID: e}
	return s.ss.PutUnkeyed(ctx, time.Time{}, m, id, []arrow.RecordBatch{rec}, func(h EpochHolding) (bool, error) {
		if h.Held {
			return true, nil
		}
		if h.Above {
			return false, fmt.Errorf("%w: shard %s flushed epoch %d", errQueryReusedTest, h.AboveShard, h.AboveEpoch)
		}
		return false, nil
	}, func(w *Shard) (bool, error) {
		ok, _ := w.EpochCommitted(q, e)
		return ok, nil
	})
}

var errQueryReusedTest = errors.New("query reused")

// storedRows reads the table as a fresh server would: the base table merged with every shard's
// read-only view.
func storedRows(t testing.TB, tbl *engine.Table, shards int) []row {
	t.Helper()
	var rs []ShardReader
	for _, id := range ShardIDs(shards) {
		rs = append(rs, NewStoredShard(tbl, id, nil))
	}
	return readMerged(t, tbl, rs...)
}

// metricReader is the reader of the process's meter provider, set once: the instruments of the
// package delegate to the first provider set.
var metricReader = sync.OnceValue(func() *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return reader
})

// claimsMetric sums flight_sink.memwal.shard.claims by reason.
func claimsMetric(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "flight_sink.memwal.shard.claims" {
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value(attribute.Key("reason"))
					out[v.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

// Two servers, two shards, eight queries each writing at once: each server claims one shard, at
// start, and keeps it (the claims counter shows the two start claims and nothing else, no put is
// fenced), the servers own different shards, and every row is there exactly once. A replay
// through the other server is a duplicate, in the WAL and, after each server flushed its own
// shard, from the watermark; an older epoch of a query that a shard flushed past is refused
// (reused query id), whichever server it goes to.
func TestShardSetsOwnShards(t *testing.T) {
	reader := metricReader()
	before := claimsMetric(t, reader)
	var starts atomic.Int64
	t.Run("stores", func(t *testing.T) {
		forEachStore(t, func(t *testing.T, store objstore.Store) {
			ctx := context.Background()
			srv := newOwnerServers(t, store, 2, 0, 0)
			const queries, epochs, rows = 8, 3, 4
			var wg sync.WaitGroup
			errs := make(chan error, 2*queries*epochs)
			for si, s := range srv {
				for q := range queries {
					wg.Add(1)
					go func() {
						defer wg.Done()
						name := fmt.Sprintf("s%d-q%d", si, q)
						for e := range int64(epochs) {
							from := int64(si*queries+q)*1000 + e*rows
							if dup, err := s.put(name, e, from, rows); err != nil || dup {
								errs <- fmt.Errorf("put %s epoch %d: dup %v, %w", name, e, dup, err)
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				return
			}
			for i, s := range srv {
				if got := s.ss.Claims(); !maps.Equal(got, map[string]int64{ClaimStart: 1}) {
					t.Errorf("server %d claims %v, want one start claim", i, got)
				}
			}
			a, _ := srv[0].ss.routedShard("x")
			b, _ := srv[1].ss.routedShard("x")
			if a == b {
				t.Fatalf("both servers route to shard %d", a)
			}
			want := 2 * queries * epochs * rows
			checkOnce := func(what string) {
				t.Helper()
				got := storedRows(t, srv[0].tbl, 2)
				seen := map[int64]int{}
				for _, r := range got {
					seen[r.ID]++
				}
				if len(got) != want || len(seen) != want {
					t.Fatalf("%s: %d rows, %d distinct, want %d once each", what, len(got), len(seen), want)
				}
			}
			checkOnce("after the writes")

			// s0-q0's epochs are in server 0's shard: replays through server 1 are duplicates.
			for e := range int64(epochs) {
				if dup, err := srv[1].put("s0-q0", e, 0, rows); err != nil || !dup {
					t.Fatalf("replay of s0-q0 epoch %d through the other server (wal): dup %v, %v", e, dup, err)
				}
			}
			for _, s := range srv {
				if err := s.ss.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if dup, err := srv[1].put("s0-q0", epochs-1, 0, rows); err != nil || !dup {
				t.Fatalf("replay of s0-q0's last epoch through the other server (watermark): dup %v, %v", dup, err)
			}
			for i, s := range srv {
				if _, err := s.put("s0-q0", 0, 0, rows); !errors.Is(err, errQueryReusedTest) {
					t.Fatalf("an epoch below the flushed watermark through server %d: %v, want a reused query", i, err)
				}
			}
			checkOnce("after the replays and flushes")
			for i, s := range srv {
				if got := s.ss.Claims(); !maps.Equal(got, map[string]int64{ClaimStart: 1}) {
					t.Errorf("server %d claims %v after replays and flushes, want one start claim", i, got)
				}
			}
			starts.Add(2)
		})
	})
	after := claimsMetric(t, reader)
	if got := after[ClaimStart] - before[ClaimStart]; got < starts.Load() {
		t.Errorf("flight_sink.memwal.shard.claims{reason=start} rose by %d, want at least %d", got, starts.Load())
	}
}

// A server dies without closing its shard set (its lease keeper stops; nothing is released): the
// other server sees the lease expire on its own clock, takes the shard over, replays, flushes and
// folds it, and releases it. Every row the dead server acknowledged is in the base table exactly
// once, and the dead server's writer is fenced.
func TestShardSetTakesOverDeadOwner(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		srv := newOwnerServers(t, store, 2, 300*time.Millisecond, 300*time.Millisecond)
		live, dead := srv[0], srv[1]
		for e := range int64(3) {
			if _, err := dead.put("dead", e, e*10, 5); err != nil {
				t.Fatal(err)
			}
		}
		deadShard, _ := dead.ss.routedShard("dead")
		deadWriter := dead.ss.healthyWriters()[deadShard]
		// The process is gone: no renewal, no release. (Before the live server writes: the dead
		// one's observer must not take the live one's shard over, however slow the machine.)
		dead.ss.stopOwnerLoop()
		for e := range int64(3) {
			if _, err := live.put("live", e, 10_000+e*10, 5); err != nil {
				t.Fatal(err)
			}
		}

		id := ShardIDs(2)[deadShard]
		deadline := time.Now().Add(time.Minute)
		for {
			m, err := live.tbl.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sm := latestShardManifest(t, live.tbl, id)
			if m.MemWALMerged[id] > 0 && sm.Owner == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no takeover within a minute: merged %v, shard owner %q, claims %v", m.MemWALMerged, sm.Owner, live.ss.Claims())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := live.ss.Claims(); got[ClaimTakeover] != 1 || got[ClaimStart] != 1 {
			t.Fatalf("the live server's claims %v, want one start and one takeover", got)
		}
		base := baseRows(t, live.tbl)
		seen := map[int64]int{}
		for _, r := range base {
			seen[r.ID]++
		}
		for e := range int64(3) {
			for id := e * 10; id < e*10+5; id++ {
				if seen[id] != 1 {
					t.Fatalf("row %d of the dead server is in the base table %d times", id, seen[id])
				}
			}
		}
		if got := storedRows(t, live.tbl, 2); len(got) != 30 {
			t.Fatalf("the table holds %d rows, want 30 once each", len(got))
		}
		if err := deadWriter.ms.confirmEpoch(ctx, deadWriter.epoch); !errors.Is(err, ErrFenced) {
			t.Fatalf("the dead server's writer is not fenced: %v", err)
		}
		// The released shard is free: a new server claims it at start.
		fresh, err := engine.Open(ctx, store, "events", nil)
		if err != nil {
			t.Fatal(err)
		}
		ss := NewShardSet(fresh, ShardIDs(2), &ShardSetOptions{Shard: *testOptions(), FoldGenerations: -1})
		defer ss.Close()
		if i, err := ss.Route(ctx, "new"); err != nil || i != deadShard {
			t.Fatalf("a new server routes to shard %d (%v), want the released shard %d", i, err, deadShard)
		}
	})
}

// A flush on a server whose writer of a shard another server fenced (took the shard over) drops
// that writer and skips the shard, which its live new owner flushes; nothing is lost.
func TestShardSetFlushSkipsShardTakenOver(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		srv := newOwnerServers(t, store, 1, 0, 0)
		old, taker := srv[0], srv[1]
		if _, err := old.put("a", 0, 0, 5); err != nil {
			t.Fatal(err)
		}
		// The only shard is old's: taker's put claims it as the fallback, fencing old, whose
		// writer does not know until it writes.
		if _, err := taker.put("b", 0, 100, 5); err != nil {
			t.Fatal(err)
		}
		if len(old.ss.healthyWriters()) != 1 {
			t.Fatal("the fenced writer is expected to look healthy until it writes")
		}
		if err := old.ss.Flush(ctx); err != nil {
			t.Fatalf("flush on the fenced server: %v", err)
		}
		if n := len(old.ss.healthyWriters()); n != 0 {
			t.Fatalf("the fenced server still holds %d writers", n)
		}
		id := ShardIDs(1)[0]
		if owner := latestShardManifest(t, old.tbl, id).Owner; owner != taker.ss.Instance() {
			t.Fatalf("shard owner %q after the fenced flush, want the taker %q", owner, taker.ss.Instance())
		}
		if err := taker.ss.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := len(storedRows(t, old.tbl, 1)); got != 10 {
			t.Fatalf("%d rows stored, want 10", got)
		}
	})
}

// TestShardSetFoldAllAfterShardTakenOver: FoldAll (what a delete, an overwrite and a direct
// upsert run first) on a server whose writer of a shard another server fenced claims the shard
// again and folds every acknowledged row, the taker's and its own, into the base table: whether
// the fenced writer still holds rows (its flush fails) or holds none (its rows were folded
// before, and a writer with an empty memtable is no proof that this server still owns the shard).
func TestShardSetFoldAllAfterShardTakenOver(t *testing.T) {
	for _, emptyWriter := range []bool{false, true} {
		t.Run(fmt.Sprintf("empty writer %v", emptyWriter), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) {
				ctx := context.Background()
				srv := newOwnerServers(t, store, 1, 0, 0)
				old, taker := srv[0], srv[1]
				if _, err := old.put("a", 0, 0, 5); err != nil {
					t.Fatal(err)
				}
				if emptyWriter {
					if err := old.ss.FoldAll(ctx); err != nil {
						t.Fatalf("first fold all: %v", err)
					}
				}
				if _, err := taker.put("b", 0, 100, 5); err != nil {
					t.Fatal(err)
				}
				if err := old.ss.FoldAll(ctx); err != nil {
					t.Fatalf("fold all on the fenced server: %v", err)
				}
				if got := len(baseRows(t, old.tbl)); got != 10 {
					t.Fatalf("%d rows in the base table after the fold, want 10 (the taker's acknowledged rows left out)", got)
				}
			})
		})
	}
}
