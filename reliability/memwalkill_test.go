package reliability

// Two servers on one MemWAL table, producers pinned to them, and kill -9 of one server: its
// producers fail over to the survivor, which must take over what the dead server held.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

const envMemWALKills = "FLIGHT_SINK_MEMWAL_KILLS" // kills in TestMemWALServerKilled (default 1)

// Generous bounds on what the design guarantees will happen: failed-over producers make progress
// on the survivor (at once when it claims the dead server's shard by fencing, after a lease TTL
// when it must wait for the lease), and the final flush and fold go through. They bound a
// failure, never pace the test.
const (
	progressTimeout = 3 * time.Minute
	foldTimeout     = 3 * time.Minute
	progressEpochs  = 3 // epochs every watched producer must acknowledge to count as progress
)

// pinnedEndpoint sends a producer's attempts to its home server while that one is alive, and to
// a live other server (the survivor) while it is not.
type pinnedEndpoint struct {
	pool *serverPool
	home int
}

func (e pinnedEndpoint) client(ctx context.Context, _ *rand.Rand) (flight.Client, error) {
	if s := e.pool.get(e.home); s != nil && s.Alive() {
		return s.Client, nil
	}
	return e.pool.client(ctx, nil)
}

// TestMemWALServerKilled: two `flight-sink serve` processes on one S3 prefix, one non-keyed
// MemWAL table with two shards, eight producers pinned four per server. One server is killed
// (kill -9) mid-run; its producers retry their unacknowledged epoch on the survivor and go on
// there. Then every producer stops, the survivor flushes and folds every shard, and the table,
// read through the survivor and through a fresh server, holds every acknowledged epoch exactly
// once and nothing twice. FLIGHT_SINK_MEMWAL_KILLS > 1 restarts the killed server (its producers
// return to it) and kills the servers in turn.
func TestMemWALServerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills server processes")
	}
	t.Parallel()
	uri, opts := storetest.S3(t)
	env := storetest.S3Env(opts)
	seed := testSeed(t, envTortureSeed)
	kills := envInt(t, envMemWALKills, 1)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	const nservers, nproducers, table = 2, 8, "killed_wal"
	pool := &serverPool{slots: make([]*server, nservers)}
	for i := range nservers {
		pool.set(i, mustStartServer(t, fmt.Sprintf("s%d", i), uri, env...))
	}
	create := map[string]any{"memwal": map[string]any{"shards": 2}}
	if _, err := servertest.Action(ctx, pool.get(0).Client, "create_table", map[string]any{"table": table, "memwal": map[string]any{"shards": 2}, "schema": []map[string]any{
		{"name": "id", "type": "int64", "nullable": false}, {"name": "q", "type": "utf8", "nullable": false},
		{"name": "epoch", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}); err != nil {
		t.Fatalf("create_table: %v", err)
	}

	ledger := newLedger()
	producers := make([]*producer, nproducers)
	queries := map[string]bool{}
	for i := range producers {
		producers[i] = &producer{index: i, query: fmt.Sprintf("killed-%d", i), table: table, create: create, maxRows: 20,
			ledger: ledger, rng: rand.New(rand.NewPCG(seed, uint64(300+i)))}
		queries[producers[i].query] = true
	}
	pctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(pctx, pinnedEndpoint{pool: pool, home: i % nservers}) }()
	}
	// waitProgress waits until every producer homed on one of homes has acknowledged
	// progressEpochs more epochs.
	waitProgress := func(what string, homes ...int) {
		t.Helper()
		watched := map[string]int{}
		acked, _ := ledger.snapshot()
		for i, p := range producers {
			for _, h := range homes {
				if i%nservers == h {
					watched[p.query] = ackedOf(acked, p.query) + progressEpochs
				}
			}
		}
		deadline := time.Now().Add(progressTimeout)
		for {
			if v := ledger.problems(); len(v) > 0 {
				t.Fatalf("%s: exactly-once violated:\n%s", what, strings.Join(v, "\n"))
			}
			acked, _ := ledger.snapshot()
			var behind []string
			for q, want := range watched {
				if n := ackedOf(acked, q); n < want {
					behind = append(behind, fmt.Sprintf("%s (%d of %d)", q, n, want))
				}
			}
			if len(behind) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: producers made no progress within %v: %s; failures so far: %s", what, progressTimeout,
					strings.Join(behind, ", "), fmtCounts(ledger.failureCounts()))
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}

	waitProgress("before the first kill", 0, 1)
	for k := 1; k <= kills; k++ {
		v := (k + 1) % nservers // server 0 first, then in turn
		victim := pool.get(v)
		if p := victim.Panics(); len(p) > 0 {
			t.Fatalf("server %s panicked:\n%s", victim.Name, strings.Join(p, "\n"))
		}
		victim.Kill9()
		// Its producers' attempts now go to the survivor: each must get its unacknowledged epoch
		// acknowledged there, and more after it.
		waitProgress(fmt.Sprintf("after kill %d (of %s), its producers on the survivor", k, victim.Name), v)
		if k < kills {
			pool.set(v, mustStartServer(t, fmt.Sprintf("s%d-restart%d", v, k), uri, env...))
			waitProgress(fmt.Sprintf("after the restart of %s", victim.Name), 0, 1)
		}
	}
	for _, p := range producers {
		p.stop()
	}
	deadline := time.Now().Add(progressTimeout)
	for _, p := range producers {
		for !p.finished.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("producer %s did not finish its last epoch within %v", p.query, progressTimeout)
			}
			sleepCtx(ctx, 10*time.Millisecond)
		}
	}
	stopAll()
	wg.Wait()
	if v := ledger.problems(); len(v) > 0 {
		t.Fatalf("exactly-once violated:\n%s", strings.Join(v, "\n"))
	}

	// The survivor flushes and folds every shard, the dead server's too (it takes it over: by
	// fencing, or once its lease has run out). Failures are retried until foldTimeout.
	var survivor *server
	for i := range nservers {
		if s := pool.get(i); s.Alive() {
			survivor = s
		}
	}
	for _, a := range []string{"flush_memwal", "fold_memwal_shard"} {
		fdeadline := time.Now().Add(foldTimeout)
		for {
			actx, acancel := context.WithTimeout(ctx, time.Minute)
			_, err := servertest.Action(actx, survivor.Client, a, map[string]any{"table": table})
			acancel()
			if err == nil {
				break
			}
			if time.Now().After(fdeadline) {
				t.Fatalf("%s through the survivor %s still fails after %v: %v", a, survivor.Name, foldTimeout, err)
			}
			t.Logf("%s through %s: %v (retrying)", a, survivor.Name, err)
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}

	acked, sent := ledger.snapshot()
	fresh := mustStartServer(t, "fresh-reader", uri, env...)
	rowsChecked := 0
	for _, s := range []*server{survivor, fresh} {
		rows, err := readTable(ctx, s.Client, table)
		if err != nil {
			t.Fatalf("read %s on %s: %v", table, s.Name, err)
		}
		_, n, problems := checkRows(table, rows, queries, acked, sent, true)
		if len(problems) > 0 {
			t.Fatalf("%s read on %s:\n%s", table, s.Name, strings.Join(problems, "\n"))
		}
		rowsChecked += n
		if p := s.Panics(); len(p) > 0 {
			t.Fatalf("server %s panicked:\n%s", s.Name, strings.Join(p, "\n"))
		}
	}
	var sends, failures int64
	for _, p := range producers {
		sends += p.sends.Load()
		failures += p.failures.Load()
	}
	t.Logf("FIGURES memwal-server-killed: seed %d, %d servers on %s, %d kills in %v; %d epochs sent, %d acknowledged, each exactly once after flush + fold through the survivor (%d rows read back on the survivor and a fresh server); %d sends, %d failed (%s)",
		seed, nservers, uri, kills, time.Since(start).Round(time.Second), len(sent), len(acked), rowsChecked, sends, failures, fmtCounts(ledger.failureCounts()))
}

// ackedOf counts the acknowledged epochs of query q.
func ackedOf(acked map[epochKey]bool, q string) int {
	n := 0
	for k := range acked {
		if k.Q == q {
			n++
		}
	}
	return n
}
