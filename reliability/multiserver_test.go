package reliability

// Several servers, one table: three `flight-sink serve` processes on one S3 prefix (a real S3
// server), producers spreading their attempts across them, and kill -9s of random servers.

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
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

const envMultiKills = "FLIGHT_SINK_MULTI_KILLS" // kills in TestThreeServersOneTable (default 6)

// serverPool is several servers on one root; a producer's attempt goes to a random live one.
type serverPool struct {
	mu    sync.Mutex
	slots []*server
}

func (p *serverPool) set(i int, s *server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slots[i] = s
}

func (p *serverPool) get(i int) *server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slots[i]
}

// client implements endpoint: a random live server, waiting while none is.
func (p *serverPool) client(ctx context.Context, r *rand.Rand) (flight.Client, error) {
	for {
		p.mu.Lock()
		var live []*server
		for _, s := range p.slots {
			if s != nil && s.Alive() {
				live = append(live, s)
			}
		}
		var pick *server
		if len(live) > 0 {
			if r == nil {
				pick = live[0]
			} else {
				pick = live[r.IntN(len(live))]
			}
		}
		p.mu.Unlock()
		if pick != nil {
			return pick.Client, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestThreeServersOneTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills server processes")
	}
	t.Parallel()
	uri, opts := storetest.S3(t)
	env := storetest.S3Env(opts)
	seed := testSeed(t, envTortureSeed)
	kills := envInt(t, envMultiKills, 6)
	rng := rand.New(rand.NewPCG(seed, 3))
	start := time.Now()

	const nservers = 3
	pool := &serverPool{slots: make([]*server, nservers)}
	for i := range nservers {
		pool.set(i, mustStartServer(t, fmt.Sprintf("s%d", i), uri, env...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// One table for everyone, made up front as a deployment would; a MemWAL table beside it,
	// whose shards the servers take from each other (fencing) as producers hop between them.
	if _, err := servertest.Action(ctx, pool.get(0).Client, "create_table", map[string]any{"table": "shared", "schema": []map[string]any{
		{"name": "id", "type": "int64", "nullable": false}, {"name": "q", "type": "utf8", "nullable": false},
		{"name": "epoch", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}); err != nil {
		t.Fatalf("create_table: %v", err)
	}

	ledger := newLedger()
	var producers []*producer
	add := func(table, q string, create any, staged bool) {
		producers = append(producers, &producer{index: len(producers), query: q, table: table, create: create,
			staged: staged, maxRows: 30, ledger: ledger, rng: rand.New(rand.NewPCG(seed, uint64(200+len(producers))))})
	}
	for i := range 4 {
		add("shared", fmt.Sprintf("shared-%d", i), nil, i == 3)
	}
	for _, q := range shardSpreadQueries("mw", 2) {
		add("shared_wal", q, map[string]any{"memwal": map[string]any{"shards": 2}}, false)
	}
	queriesOf := map[string]map[string]bool{"shared": {}, "shared_wal": {}}
	for _, p := range producers {
		queriesOf[p.table][p.query] = true
	}
	pctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(pctx, pool) }()
	}
	// Maintenance, on whichever server: folds and compactions race the producers' commits.
	wg.Add(1)
	go func() {
		defer wg.Done()
		mrng := rand.New(rand.NewPCG(seed, 4))
		for pctx.Err() == nil {
			sleepCtx(pctx, time.Duration(200+mrng.IntN(600))*time.Millisecond)
			c, err := pool.client(pctx, mrng)
			if err != nil {
				return
			}
			actx, acancel := context.WithTimeout(pctx, 30*time.Second)
			switch mrng.IntN(4) {
			case 0:
				_, _ = servertest.Action(actx, c, "flush_memwal", map[string]any{"table": "shared_wal"})
			case 1:
				_, _ = servertest.Action(actx, c, "fold_memwal_shard", map[string]any{"table": "shared_wal"})
			case 2:
				_, _ = servertest.Action(actx, c, "compact", map[string]any{"table": "shared"})
			case 3:
				_, _ = servertest.Action(actx, c, "compact", map[string]any{"table": "shared_wal"})
			}
			acancel()
		}
	}()

	for k := 1; k <= kills; k++ {
		sleepCtx(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
		i := rng.IntN(nservers)
		victim := pool.get(i)
		if p := victim.Panics(); len(p) > 0 {
			t.Fatalf("server %s panicked:\n%s", victim.Name, strings.Join(p, "\n"))
		}
		victim.Kill9()
		sleepCtx(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
		pool.set(i, mustStartServer(t, fmt.Sprintf("s%d-restart%d", i, k), uri, env...))
		if v := ledger.problems(); len(v) > 0 {
			t.Fatalf("after kill %d: exactly-once violated:\n%s", k, strings.Join(v, "\n"))
		}
	}
	for _, p := range producers {
		p.stop()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, p := range producers {
		for !p.finished.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("producer %s did not finish its last epoch within 5 minutes", p.query)
			}
			sleepCtx(ctx, 10*time.Millisecond)
		}
	}
	stopAll()
	wg.Wait()
	if v := ledger.problems(); len(v) > 0 {
		t.Fatalf("exactly-once violated:\n%s", strings.Join(v, "\n"))
	}

	// What is durable: a fresh server, which holds no MemWAL writer, reads every epoch exactly
	// once. Then every serving process must read the same.
	acked, sent := ledger.snapshot()
	fresh := mustStartServer(t, "fresh-reader", uri, env...)
	rowsChecked := 0
	readers := []*server{fresh}
	for i := range nservers {
		readers = append(readers, pool.get(i))
	}
	for _, s := range readers {
		for _, table := range []string{"shared", "shared_wal"} {
			rows, err := readTable(ctx, s.Client, table)
			if err != nil {
				t.Fatalf("read %s on %s: %v", table, s.Name, err)
			}
			_, n, problems := checkRows(table, rows, queriesOf[table], acked, sent, true)
			if len(problems) > 0 {
				msg := fmt.Sprintf("%s read on %s:\n%s", table, s.Name, strings.Join(problems, "\n"))
				t.Fatal(msg)
			}
			rowsChecked += n
		}
		if p := s.Panics(); len(p) > 0 {
			t.Fatalf("server %s panicked:\n%s", s.Name, strings.Join(p, "\n"))
		}
	}
	store, err := objstore.NewS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	c1, s1 := checkEveryVersion(t, ctx, store, "shared", 20)
	c2, s2 := checkEveryVersion(t, ctx, store, "shared_wal", 20)
	var sends, failures, firstDups int64
	for _, p := range producers {
		sends += p.sends.Load()
		failures += p.failures.Load()
		firstDups += p.firstSendDuplicates.Load()
	}
	t.Logf("FIGURES multi-server: seed %d, %d servers on %s, %d kills in %v; %d epochs sent, %d acknowledged, "+
		"each exactly once (%d rows read back across the servers); %d sends, %d failed (%s), %d first sends answered duplicate (MemWAL put landed as its writer was fenced); %d versions decoded, their files present, %d of them scanned",
		seed, nservers, uri, kills, time.Since(start).Round(time.Second), len(sent), len(acked), rowsChecked,
		sends, failures, fmtCounts(ledger.failureCounts()), firstDups, c1+c2, s1+s2)
}
