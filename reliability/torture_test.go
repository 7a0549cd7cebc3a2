package reliability

// The kill -9 torture test: Spark-like producers stream epochs into a direct table and a MemWAL
// table while the harness kills the server at random moments and restarts it on the same root.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// Environment knobs of the torture test (make torture sets the first).
const (
	envTortureCycles = "FLIGHT_SINK_TORTURE_CYCLES" // kill cycles (default 10)
	envTortureSeed   = "FLIGHT_SINK_TORTURE_SEED"   // seed of the schedule (default: the clock)
)

// testSeed returns the seed named by env, or a fresh one; the test logs it, and again on failure.
func testSeed(t *testing.T, env string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(env); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		seed = s
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, env, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: rerun with %s=%d (the seed fixes the schedule: data, kill moments and modes; not the OS's scheduling)", seed, env, seed)
		}
	})
	return seed
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// killMode is what a kill cycle aims at.
type killMode int

const (
	killAnytime    killMode = iota // a random moment
	killMidPut                     // while a DoPut is in flight (a commit or a WAL put)
	killMidFlush                   // during flush_memwal
	killMidFold                    // during fold_memwal_shard (the fold into the base table)
	killMidCompact                 // during compact (a Rewrite) of a table
	numKillModes
)

func (m killMode) String() string {
	return [...]string{"anytime", "mid-put", "mid-flush", "mid-memwal-fold", "mid-compaction"}[m]
}

// tortureCluster is the one server of the torture test, replaced at every kill cycle.
type tortureCluster struct {
	mu       sync.Mutex
	cur      *server
	changed  chan struct{} // closed when cur changes
	inflight atomic.Int64  // DoPuts and actions in flight
}

func newTortureCluster() *tortureCluster { return &tortureCluster{changed: make(chan struct{})} }

func (c *tortureCluster) set(s *server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = s
	close(c.changed)
	c.changed = make(chan struct{})
}

// client implements endpoint: the current server, waiting while there is none.
func (c *tortureCluster) client(ctx context.Context, _ *rand.Rand) (flight.Client, error) {
	for {
		c.mu.Lock()
		s, ch := c.cur, c.changed
		c.mu.Unlock()
		if s != nil && s.Alive() {
			return s.Client, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tortureStats are the figures of one run.
type tortureStats struct {
	cycles     int
	byMode     [numKillModes]int
	actionsCut int // actions a kill interrupted (no answer)
	checks     int // full read-back checks
}

func TestTorture(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills server processes")
	}
	t.Parallel()
	seed := testSeed(t, envTortureSeed)
	cycles := envInt(t, envTortureCycles, 10)
	rng := rand.New(rand.NewPCG(seed, 1))
	root := t.TempDir()
	ledger := newLedger()
	cluster := newTortureCluster()
	t.Cleanup(func() {
		// The server that was serving when the test failed: what it logged is the first clue.
		cluster.mu.Lock()
		cur := cluster.cur
		cluster.mu.Unlock()
		if t.Failed() && cur != nil {
			out := cur.Output()
			t.Logf("the log of the server serving at the failure (its last %d bytes):\n%s", min(len(out), 16<<10), out[max(0, len(out)-16<<10):])
		}
	})
	start := time.Now()

	// Two queries per table; the MemWAL table's two queries land in different shards (no primary
	// key: a query's epochs go to the shard its id hashes to).
	walQueries := shardSpreadQueries(fmt.Sprintf("wal-%d", seed%1000), 2)
	var producers []*producer
	add := func(table, q string, create any, staged bool) {
		producers = append(producers, &producer{index: len(producers), query: q, table: table, create: create,
			staged: staged, maxRows: 40, ledger: ledger, rng: rand.New(rand.NewPCG(seed, uint64(100+len(producers)))),
			inflight: &cluster.inflight})
	}
	add("direct", "direct-a", true, false)
	add("direct", "direct-staged", true, true)
	memwalCreate := map[string]any{"memwal": map[string]any{"shards": 2}}
	for _, q := range walQueries {
		add("wal", q, memwalCreate, false)
	}
	queriesOf := map[string]map[string]bool{"direct": {}, "wal": {}}
	for _, p := range producers {
		queriesOf[p.table][p.query] = true
	}

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	// On every way out, a failure included, the producers and the maintenance stop before the
	// test's cleanup closes the clients they use (a call on a closed client crashes).
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var st tortureStats

	// The maintenance a deployment runs: flushes, folds and compactions, now and then.
	maint := func(c flight.Client, typ string, body any) {
		cluster.inflight.Add(1)
		defer cluster.inflight.Add(-1)
		actx, acancel := context.WithTimeout(pctx, 30*time.Second)
		defer acancel()
		_, _ = servertest.Action(actx, c, typ, body)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		mrng := rand.New(rand.NewPCG(seed, 2))
		for pctx.Err() == nil {
			sleepCtx(pctx, time.Duration(50+mrng.IntN(250))*time.Millisecond)
			c, err := cluster.client(pctx, nil)
			if err != nil {
				return
			}
			switch mrng.IntN(5) {
			case 0, 1:
				maint(c, "flush_memwal", map[string]any{"table": "wal"})
			case 2:
				maint(c, "fold_memwal_shard", map[string]any{"table": "wal"})
			case 3:
				maint(c, "compact", map[string]any{"table": "direct"})
			case 4:
				maint(c, "compact", map[string]any{"table": "wal"})
			}
		}
	}()

	for cycle := 1; cycle <= cycles; cycle++ {
		srv, err := startServer(t, fmt.Sprintf("cycle-%d", cycle), root)
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		cluster.set(srv)
		if cycle == 1 {
			for _, p := range producers {
				wg.Add(1)
				go func() { defer wg.Done(); p.run(pctx, cluster) }()
			}
		} else if cycle%3 == 0 {
			// What every acknowledged epoch promised must be readable right after a restart.
			checkTables(t, ctx, srv.Client, ledger, queriesOf, false, &st)
		}
		mode := killMode(rng.IntN(int(numKillModes)))
		if cycle <= int(numKillModes) {
			mode = killMode(cycle - 1) // every mode at least once
		}
		st.byMode[mode]++
		cut := killDuring(ctx, t, rng, cluster, srv, mode)
		if cut {
			st.actionsCut++
		}
		if p := srv.Panics(); len(p) > 0 {
			t.Fatalf("cycle %d: server panicked:\n%s", cycle, strings.Join(p, "\n"))
		}
		srv.Kill9()
		cluster.set(nil)
		st.cycles++
		if cycle%10 == 0 {
			_, sent := ledger.snapshot()
			t.Logf("cycle %d: %d epochs sent, %v", cycle, len(sent), time.Since(start).Round(time.Second))
		}
		if v := ledger.problems(); len(v) > 0 {
			t.Fatalf("after kill cycle %d (%s): exactly-once violated:\n%s", cycle, mode, strings.Join(v, "\n"))
		}
		sleepCtx(ctx, time.Duration(rng.IntN(100))*time.Millisecond) // down for a moment
	}

	// Final server: let every producer finish the epoch it is on, fold everything, then check.
	final := mustStartServer(t, "final", root)
	cluster.set(final)
	for _, p := range producers {
		p.stop()
	}
	done := make(chan struct{})
	go func() {
		for _, p := range producers { // wait for the producers, then stop maintenance
			for !p.idle() {
				sleepCtx(ctx, 10*time.Millisecond)
			}
		}
		stopProducers()
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("producers did not finish their last epochs within 5 minutes")
	}
	if v := ledger.problems(); len(v) > 0 {
		t.Fatalf("exactly-once violated:\n%s", strings.Join(v, "\n"))
	}
	checkTables(t, ctx, final.Client, ledger, queriesOf, true, &st)
	for _, typ := range []string{"flush_memwal", "fold_memwal_shard"} {
		if _, err := servertest.Action(ctx, final.Client, typ, map[string]any{"table": "wal"}); err != nil {
			t.Fatalf("final %s: %v", typ, err)
		}
	}
	checkTables(t, ctx, final.Client, ledger, queriesOf, true, &st)
	// One more kill: what was read must still be there after a crash.
	final.Kill9()
	again := mustStartServer(t, "after-final-kill", root)
	checkTables(t, ctx, again.Client, ledger, queriesOf, true, &st)
	checkDirectWatermarks(t, ctx, again.Client, producers)
	again.Stop()
	if p := append(final.Panics(), again.Panics()...); len(p) > 0 {
		t.Fatalf("server panicked:\n%s", strings.Join(p, "\n"))
	}
	// Every version of both tables decodes and scans, read straight from the store.
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	versions, scanned := 0, 0
	for _, table := range []string{"direct", "wal"} {
		c, s := checkEveryVersion(t, ctx, store, table, 200)
		versions, scanned = versions+c, scanned+s
	}

	acked, sent := ledger.snapshot()
	var sends, failures, resends, dups, statusChecks int64
	for _, p := range producers {
		sends += p.sends.Load()
		failures += p.failures.Load()
		resends += p.resendsAcked.Load()
		dups += p.duplicates.Load()
		statusChecks += p.statusChecks.Load()
	}
	rows := 0
	for _, n := range sent {
		rows += n
	}
	modes := make([]string, 0, numKillModes)
	for m := killMode(0); m < numKillModes; m++ {
		modes = append(modes, fmt.Sprintf("%s %d", m, st.byMode[m]))
	}
	t.Logf("FIGURES torture: seed %d, %d kill cycles (%s; %d actions cut by the kill) in %v; "+
		"%d epochs (%d rows) sent, %d acknowledged, all present exactly once; %d sends, %d failed sends (%s), "+
		"%d re-sends of acknowledged epochs, %d duplicate answers, %d epoch_status checks; %d read-back checks; %d versions decoded, their files present, %d of them scanned",
		seed, st.cycles, strings.Join(modes, ", "), st.actionsCut, time.Since(start).Round(time.Second),
		len(sent), rows, len(acked), sends, failures, fmtCounts(ledger.failureCounts()), resends, dups, statusChecks, st.checks, versions, scanned)
}

// idle reports whether run has returned (the producer finished its last epoch).
func (p *producer) idle() bool { return p.finished.Load() }

// killDuring lets the server work for a while, aiming the kill at mode, and reports whether the
// kill cut an action short.
func killDuring(ctx context.Context, t *testing.T, rng *rand.Rand, c *tortureCluster, srv *server, mode killMode) bool {
	sleepCtx(ctx, time.Duration(150+rng.IntN(600))*time.Millisecond)
	var typ string
	var body any
	switch mode {
	case killAnytime:
		return false
	case killMidPut:
		deadline := time.Now().Add(2 * time.Second)
		for c.inflight.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		sleepCtx(ctx, time.Duration(rng.IntN(15))*time.Millisecond)
		return false
	case killMidFlush:
		typ, body = "flush_memwal", map[string]any{"table": "wal"}
	case killMidFold:
		// Flush first so the fold has generations to fold.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = servertest.Action(actx, srv.Client, "flush_memwal", map[string]any{"table": "wal"})
		cancel()
		typ, body = "fold_memwal_shard", map[string]any{"table": "wal"}
	case killMidCompact:
		typ, body = "compact", map[string]any{"table": []string{"direct", "wal"}[rng.IntN(2)]}
	}
	res := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := servertest.Action(actx, srv.Client, typ, body)
		res <- err
	}()
	// A few milliseconds in: the action is reading, writing or committing.
	sleepCtx(ctx, time.Duration(rng.IntN(25))*time.Millisecond)
	select {
	case <-res: //nolint:errcheck // the action ended before the kill: whatever it answered, nothing was cut
		return false
	default:
		return true
	}
}

// checkTables reads both tables back and checks them against the ledger.
func checkTables(t *testing.T, ctx context.Context, c flight.Client, l *ledger, queriesOf map[string]map[string]bool, final bool, st *tortureStats) {
	t.Helper()
	acked, _ := l.snapshot() // before the read: every epoch acknowledged by now must be in it
	for _, table := range []string{"direct", "wal"} {
		var rows []storedRow
		var err error
		for try := 0; try < 5; try++ {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			rows, err = readTable(rctx, c, table)
			cancel()
			if err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
		}
		if err != nil && !(strings.Contains(err.Error(), "not found") && !final) {
			t.Fatalf("read %s: %v", table, err)
		}
		_, sent := l.snapshot() // after the read: every epoch in it must have been sent
		_, _, problems := checkRows(table, rows, queriesOf[table], acked, sent, final)
		if len(problems) > 0 {
			present := make(map[epochKey]bool)
			for _, r := range rows {
				present[r.Key] = true
			}
			for k := range sent {
				if acked[k] && queriesOf[table][k.Q] && !present[k] {
					problems = append(problems, l.howAcked(k))
				}
			}
			t.Fatalf("read-back check of %s (final %v):\n%s", table, final, strings.Join(problems, "\n"))
		}
	}
	st.checks++
}

// checkDirectWatermarks checks that the direct table's per-query watermark is each query's last
// epoch.
func checkDirectWatermarks(t *testing.T, ctx context.Context, c flight.Client, producers []*producer) {
	t.Helper()
	b, err := servertest.Action(ctx, c, "table_stats", map[string]any{"table": "direct"})
	if err != nil {
		t.Fatalf("table_stats: %v", err)
	}
	var stats struct {
		Streams map[string]engine.StreamWatermark `json:"streams"`
	}
	if err := json.Unmarshal(b, &stats); err != nil {
		t.Fatal(err)
	}
	for _, p := range producers {
		if p.table != "direct" {
			continue
		}
		if wm := stats.Streams[p.query]; wm.Epoch != p.next-1 {
			t.Fatalf("watermark of %s is epoch %d, its last epoch is %d", p.query, wm.Epoch, p.next-1)
		}
	}
}

// checkEveryVersion opens table straight from the store and checks every version: its manifest
// decodes, the versions are dense, and every file it references exists. It scans up to maxScans
// versions (all when there are no more; else the newest ones and an even sample of the rest) and
// checks each reads exactly the rows its manifest counts. It returns the versions checked and
// scanned.
func checkEveryVersion(t *testing.T, ctx context.Context, store objstore.Store, table string, maxScans int) (checked, scanned int) {
	t.Helper()
	tbl, err := engine.Open(ctx, store, table, nil)
	if err != nil {
		t.Fatalf("open %s: %v", table, err)
	}
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatalf("%s: versions: %v", table, err)
	}
	files := map[string]uint64{} // table-relative file -> a version that references it
	for i, v := range vs {
		if i > 0 && v != vs[i-1]+1 {
			t.Fatalf("%s: versions jump from %d to %d", table, vs[i-1], v)
		}
		m, err := tbl.Manifest(ctx, v)
		if err != nil {
			t.Fatalf("%s version %d: %v", table, v, err)
		}
		files[m.Transaction.File] = v
		for _, f := range m.Fragments {
			for _, df := range f.Files {
				files[df.Path] = v
			}
			if f.DeletionFile != "" {
				files[f.DeletionFile] = v
			}
		}
	}
	for f, v := range files {
		if _, err := store.Stat(ctx, table+"/"+f); err != nil {
			t.Fatalf("%s version %d references %s: %v", table, v, f, err)
		}
	}
	scan := vs
	if len(vs) > maxScans {
		scan = nil
		newest := maxScans / 3
		step := float64(len(vs)-newest) / float64(maxScans-newest)
		for i := 0; i < maxScans-newest; i++ {
			scan = append(scan, vs[int(float64(i)*step)])
		}
		scan = append(scan, vs[len(vs)-newest:]...)
	}
	for _, v := range scan {
		m, err := tbl.Manifest(ctx, v)
		if err != nil {
			t.Fatalf("%s version %d: %v", table, v, err)
		}
		sc, err := tbl.Scan(ctx, engine.ScanOptions{Version: v, Columns: []string{"id"}})
		if err != nil {
			t.Fatalf("%s version %d: scan: %v", table, v, err)
		}
		var n int64
		for sc.Next() {
			n += sc.RecordBatch().NumRows()
		}
		err = sc.Err()
		sc.Release()
		if err != nil {
			t.Fatalf("%s version %d: scan: %v", table, v, err)
		}
		if n != m.Rows() {
			t.Fatalf("%s version %d: scan read %d rows, the manifest counts %d", table, v, n, m.Rows())
		}
	}
	return len(vs), len(scan)
}

// shardSpreadQueries returns n query ids whose epochs land in n different shards of an n-shard
// MemWAL table.
func shardSpreadQueries(prefix string, n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		q := fmt.Sprintf("%s-%d", prefix, i)
		if s := memwal.ShardForPartition(q, 0, n); out[s] == "" {
			out[s] = q
			found++
		}
	}
	return out
}

func fmtCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
