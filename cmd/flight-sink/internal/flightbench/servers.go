package flightbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/sync/errgroup"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/bench/benchdata"
	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
)

// Defaults of the memwal-servers workload (Config.Servers...).
const (
	defaultStoreLatency  = 20 * time.Millisecond
	defaultServers       = 2
	defaultServerQueries = 16
	defaultRouteDuration = 30 * time.Second
)

// claimsMetric is the MemWAL counter of shard claims the workload reports.
const claimsMetric = "flight_sink.memwal.shard.claims"

// Row ids of the memwal-servers workload encode the query and the epoch, so a read-back counts
// the rows of every (query, epoch): id = query<<idQueryShift | epoch<<idEpochShift | row.
const (
	idEpochShift = 20 // rows per epoch < 2^20
	idQueryShift = 44 // epochs per query < 2^24
)

// serverEpoch names one epoch of one query of the memwal-servers workload.
type serverEpoch struct {
	query int
	epoch int64
}

// runServers is the many-writers-on-object-store-latency workload (`bench --only
// memwal-servers`): Servers in-process Flight servers, each with its own store handle on one
// store (every call delayed by StoreLatency, faultstore.FixedLatency) and its own engine, and
// ServerQueries streaming queries writing EpochRows-row epochs as fast as they can, each pinned
// to one server (queries split evenly), for RouteDuration per route: first the direct route on a
// plain table, then the MemWAL route on a table with Shards shards. After each route the table is
// flushed and folded (MemWAL) and read back: every acknowledged (query, epoch) must be there
// exactly once.
func runServers(ctx context.Context, cfg Config, out io.Writer) error {
	if cfg.EpochRows >= 1<<idEpochShift {
		return fmt.Errorf("memwal-servers: %d rows per epoch, at most %d", cfg.EpochRows, 1<<idEpochShift-1)
	}
	uri := cfg.Store
	if uri == "" {
		uri = cfg.Root
	}
	reader := claimsReader()
	srvs, stop, err := startServers(ctx, cfg, uri)
	if err != nil {
		return err
	}
	defer stop()
	ceiling := (&engine.MaintenanceConfig{}).EnsureDefaults().Compaction.MaxFragments
	if m := srvs[0].maintenance; m != nil {
		ceiling = m.EnsureDefaults().Compaction.MaxFragments
	}
	fmt.Fprintf(out, "Many writers on object-store latency: %s, every store call delayed %v, %d servers (in-process, one store handle and engine each), %d queries pinned evenly, %d-row epochs as fast as each query can, %v per route\n",
		uri, cfg.StoreLatency, cfg.Servers, cfg.ServerQueries, cfg.EpochRows, cfg.RouteDuration)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36) // a store may hold earlier runs' tables
	routes := []serverRoute{
		{route: "direct", table: "servers_direct_" + suffix, create: true},
		{route: "memwal", table: "servers_memwal_" + suffix, create: map[string]any{"memwal": map[string]any{"shards": cfg.Shards}}},
	}
	fmt.Fprintf(out, "%-7s %9s %9s %8s %8s %8s %11s %7s %11s %8s  %s\n",
		"route", "epochs", "epochs/s", "p50 ms", "p99 ms", "retries", "calls/epoch", "frags", "frags fold", "ceiling", "exact")
	var rates []float64
	var callLines []string
	type claimReading struct {
		total int64
		by    map[string]int64
	}
	readings := []claimReading{}
	var found bool
	for _, r := range routes {
		if len(readings) == 0 {
			total, by, _ := readClaims(ctx, reader)
			readings = append(readings, claimReading{total, by})
		}
		res, err := runServerRoute(ctx, cfg, srvs, r)
		if err != nil {
			return fmt.Errorf("%s route: %w", r.route, err)
		}
		total, by, ok := readClaims(ctx, reader)
		readings = append(readings, claimReading{total, by})
		found = found || ok
		rates = append(rates, res.rate())
		perEpoch, byOp := res.callsPerEpoch()
		fmt.Fprintf(out, "%-7s %9d %9.1f %8.1f %8.1f %8d %11.1f %7d %11s %8d  %s\n", r.route, res.acked, res.rate(),
			ms(percentile(res.lat, 0.5)), ms(percentile(res.lat, 0.99)), res.retries, perEpoch, res.frags, res.foldedFrags, ceiling, res.exact)
		callLines = append(callLines, fmt.Sprintf("%s store calls per epoch: %s", r.route, byOp))
		if res.problems != nil {
			return fmt.Errorf("%s route: exactly-once violated: %s", r.route, strings.Join(res.problems, "; "))
		}
	}
	fmt.Fprintf(out, "MemWAL / direct epochs/s: %.2fx (target >= 10x); frags = base fragments at the end of the run, frags fold = after flush + fold (MemWAL); calls/epoch = store calls of the servers per acknowledged epoch while the queries wrote\n",
		rates[1]/rates[0])
	for _, l := range callLines {
		fmt.Fprintln(out, l)
	}
	if !found {
		fmt.Fprintf(out, "%s: n/a (this build records none)\n", claimsMetric)
		return nil
	}
	claims := make([]string, len(routes))
	for i, r := range routes {
		claims[i] = r.route + " " + claimsDelta(readings[i].by, readings[i+1].by, readings[i+1].total-readings[i].total, found)
	}
	fmt.Fprintf(out, "%s during each route (its final flush + fold included): %s\n", claimsMetric, strings.Join(claims, ", "))
	return nil
}

// serverRoute is one route of the memwal-servers workload and the table it writes.
type serverRoute struct {
	route  string // "direct" or "memwal", the ack's route
	table  string
	create any
}

// benchServer is one in-process server of the memwal-servers workload.
type benchServer struct {
	addr        string
	client      flight.Client // for the actions and the read-back
	store       *faultstore.Store
	maintenance *engine.MaintenanceConfig
}

// storeCalls is the number of calls of each operation the servers made to the store so far.
func storeCalls(srvs []*benchServer) map[faultstore.Op]int64 {
	n := map[faultstore.Op]int64{}
	for _, s := range srvs {
		for op, c := range s.store.Stats().Calls {
			n[op] += c
		}
	}
	return n
}

// startServers starts cfg.Servers Flight servers on uri, each on its own store handle wrapped in
// a fixed latency.
func startServers(ctx context.Context, cfg Config, uri string) ([]*benchServer, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clients []flight.Client
	stop := func() {
		for _, c := range clients {
			c.Close()
		}
		cancel()
		wg.Wait()
	}
	var srvs []*benchServer
	for i := 0; i < cfg.Servers; i++ {
		inner, err := objstore.Open(ctx, uri, cfg.S3)
		if err != nil {
			stop()
			return nil, nil, err
		}
		fs := faultstore.New(inner, faultstore.FixedLatency(cfg.StoreLatency))
		sc := flightsvc.Config{Listen: "127.0.0.1:0", Root: uri, Store: fs, Logger: quietLogger()}
		if cfg.Maintenance != "" {
			sc.Sink.DefaultMaintenance = &engine.MaintenanceConfig{Mode: engine.MaintenanceMode(cfg.Maintenance)}
		}
		srv, err := flightsvc.NewServer(ctx, sc)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("server %d: %w", i, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(ctx) }()
		c, err := dial(srv.Addr().String())
		if err != nil {
			stop()
			return nil, nil, err
		}
		clients = append(clients, c)
		srvs = append(srvs, &benchServer{addr: srv.Addr().String(), client: c, store: fs, maintenance: sc.Sink.DefaultMaintenance})
	}
	return srvs, stop, nil
}

// serverRouteResult is what one route of the memwal-servers workload measured.
type serverRouteResult struct {
	acked       int64
	wall        time.Duration
	calls       map[faultstore.Op]int64 // store calls of the servers while the queries wrote (background maintenance included)
	lat         []time.Duration         // first send to acknowledgement, retries included
	retries     int64
	frags       int
	foldedFrags string // "-" on the direct route
	exact       string
	problems    []string // nil when every acknowledged epoch is there exactly once
}

func (r *serverRouteResult) rate() float64 { return float64(r.acked) / r.wall.Seconds() }

// callsPerEpoch returns the store calls per acknowledged epoch, in all and by operation.
func (r *serverRouteResult) callsPerEpoch() (float64, string) {
	var total int64
	var ops []string
	for _, op := range faultstore.Ops {
		if n := r.calls[op]; n > 0 {
			total += n
			ops = append(ops, fmt.Sprintf("%s %.2f", op, float64(n)/float64(r.acked)))
		}
	}
	return float64(total) / float64(r.acked), strings.Join(ops, ", ")
}

// runServerRoute runs the queries of one route for cfg.RouteDuration, then checks the table.
func runServerRoute(ctx context.Context, cfg Config, srvs []*benchServer, r serverRoute) (*serverRouteResult, error) {
	mem := memory.DefaultAllocator
	res := &serverRouteResult{foldedFrags: "-"}
	acked := make([][]int64, cfg.ServerQueries) // per query, its acknowledged epochs
	lat := make([][]time.Duration, cfg.ServerQueries)
	var retries atomic.Int64
	// Each query has its own client of its server (as each Spark driver has), and one template
	// batch whose id column is replaced per epoch: making data is not the sink's cost.
	clients := make([]flight.Client, cfg.ServerQueries)
	tmpls := make([]arrow.RecordBatch, cfg.ServerQueries)
	defer func() {
		for q := range clients {
			if clients[q] != nil {
				clients[q].Close()
			}
			if tmpls[q] != nil {
				tmpls[q].Release()
			}
		}
	}()
	for q := range clients {
		c, err := dial(srvs[q%len(srvs)].addr)
		if err != nil {
			return nil, err
		}
		clients[q] = c
		tmpls[q] = benchdata.Batch(mem, 0, cfg.EpochRows, uint64(7+q))
	}
	calls0 := storeCalls(srvs)
	start := time.Now()
	deadline := start.Add(cfg.RouteDuration)
	g, gctx := errgroup.WithContext(ctx)
	for q := range clients {
		g.Go(func() error {
			query := fmt.Sprintf("servers-q%d", q)
			for e := int64(0); time.Now().Before(deadline); e++ {
				rec := withIDs(mem, tmpls[q], int64(q)<<idQueryShift|e<<idEpochShift)
				t0 := time.Now()
				n, err := putUntilAcked(gctx, clients[q], r, map[string]any{"table": r.table, "query_id": query, "epoch_id": e, "create": r.create}, rec)
				rec.Release()
				retries.Add(int64(n))
				if err != nil {
					return fmt.Errorf("query %d epoch %d: %w", q, e, err)
				}
				lat[q] = append(lat[q], time.Since(t0))
				acked[q] = append(acked[q], e)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res.wall = time.Since(start)
	res.calls = map[faultstore.Op]int64{}
	for op, n := range storeCalls(srvs) {
		res.calls[op] = n - calls0[op]
	}
	res.retries = retries.Load()
	for q := range lat {
		res.lat = append(res.lat, lat[q]...)
		res.acked += int64(len(acked[q]))
	}
	if len(res.lat) == 0 {
		return nil, fmt.Errorf("no epoch acknowledged in %v", cfg.RouteDuration)
	}

	c := srvs[0].client
	var st tableStats
	if err := action(ctx, c, "table_stats", map[string]any{"table": r.table}, &st); err != nil {
		return nil, err
	}
	res.frags = st.Fragments
	if r.route == "memwal" {
		// The final flush and fold, through one server: it takes over the shards the other
		// servers hold (it fences their writers), so the base table ends up holding every row.
		for _, a := range []string{"flush_memwal", "fold_memwal_shard"} {
			if err := retryAction(ctx, c, a, map[string]any{"table": r.table}); err != nil {
				return nil, err
			}
		}
		if err := action(ctx, c, "table_stats", map[string]any{"table": r.table}, &st); err != nil {
			return nil, err
		}
		res.foldedFrags = strconv.Itoa(st.Fragments)
	}
	counts := map[serverEpoch]int64{}
	if err := scanIDs(ctx, c, r.table, func(id int64) {
		counts[serverEpoch{int(id >> idQueryShift), id >> idEpochShift & (1<<(idQueryShift-idEpochShift) - 1)}]++
	}); err != nil {
		return nil, fmt.Errorf("read back: %w", err)
	}
	res.problems = checkEpochCounts(counts, acked, int64(cfg.EpochRows))
	res.exact = fmt.Sprintf("yes: %d epochs x %d rows, each once", res.acked, cfg.EpochRows)
	if res.problems != nil {
		res.exact = fmt.Sprintf("NO: %d problems", len(res.problems))
	}
	return res, nil
}

// checkEpochCounts compares the rows read back per (query, epoch) with the acknowledged epochs:
// each must have exactly rows rows, and no other epoch may appear. It returns nil when all hold.
func checkEpochCounts(counts map[serverEpoch]int64, acked [][]int64, rows int64) []string {
	var problems []string
	want := map[serverEpoch]bool{}
	for q, es := range acked {
		for _, e := range es {
			k := serverEpoch{q, e}
			want[k] = true
			if n := counts[k]; n != rows {
				problems = append(problems, fmt.Sprintf("query %d epoch %d: %d rows, want %d", q, e, n, rows))
			}
		}
	}
	for k, n := range counts {
		if !want[k] {
			problems = append(problems, fmt.Sprintf("query %d epoch %d: %d rows of an epoch never acknowledged", k.query, k.epoch, n))
		}
	}
	sort.Strings(problems)
	if len(problems) > 10 {
		problems = append(problems[:10], fmt.Sprintf("and %d more", len(problems)-10))
	}
	return problems
}

// maxPutAttempts bounds the sends of one epoch: a route that keeps failing is a failed run.
const maxPutAttempts = 100

// putUntilAcked sends one epoch until it is acknowledged, as a streaming query re-sends the epoch
// it has no acknowledgement for, and returns the number of retries. A failure that a retry cannot
// explain, or an answer exactly-once forbids, is an error.
func putUntilAcked(ctx context.Context, c flight.Client, r serverRoute, cmd map[string]any, rec arrow.RecordBatch) (int, error) {
	for attempt := 1; ; attempt++ {
		ack, err := put(ctx, c, cmd, []arrow.RecordBatch{rec})
		if err == nil {
			var a struct{ Status, Route string }
			if err := json.Unmarshal(ack, &a); err != nil {
				return attempt - 1, fmt.Errorf("ack %s: %w", ack, err)
			}
			switch {
			case a.Status == "committed" && a.Route == r.route:
				return attempt - 1, nil
			// A retry of an epoch whose earlier attempt landed (its answer was lost to a fence
			// or a conflict) is answered duplicate: landed once. A first send never is on the
			// direct route; on the MemWAL route it may be when the put landed as its writer
			// learned it was fenced (the shard's replay holds it).
			case a.Status == "duplicate" && (attempt > 1 || r.route == "memwal"):
				return attempt - 1, nil
			default:
				return attempt - 1, fmt.Errorf("attempt %d: ack %s, want committed on route %s", attempt, ack, r.route)
			}
		}
		if !retryablePut(err) || attempt >= maxPutAttempts || ctx.Err() != nil {
			return attempt - 1, fmt.Errorf("attempt %d: %w", attempt, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
	}
}

// retryablePut reports whether a failed put is one a client retries: the writer was fenced by
// another server's claim, the commit lost a race or ran out of retries, or the server is briefly
// unavailable. Nothing of a failed put is acknowledged, so its retry may land.
func retryablePut(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Aborted:
		return true
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			switch ei.Reason {
			case "FENCED", "COMMIT_CONFLICT", "TOO_MANY_RETRIES":
				return true
			}
		}
	}
	return false
}

// retryAction runs a maintenance action, retrying the failures retryablePut retries.
func retryAction(ctx context.Context, c flight.Client, typ string, body any) error {
	for attempt := 1; ; attempt++ {
		err := action(ctx, c, typ, body, nil)
		if err == nil || !retryablePut(err) || attempt >= maxPutAttempts {
			if err != nil {
				return fmt.Errorf("%s: %w", typ, err)
			}
			return nil
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
	}
}

// withIDs is tmpl with its id column (column 0) replaced by first, first+1, ...
func withIDs(mem memory.Allocator, tmpl arrow.RecordBatch, first int64) arrow.RecordBatch {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	n := int(tmpl.NumRows())
	b.Reserve(n)
	for i := 0; i < n; i++ {
		b.UnsafeAppend(first + int64(i))
	}
	ids := b.NewArray()
	defer ids.Release()
	cols := append([]arrow.Array{ids}, tmpl.Columns()[1:]...)
	return array.NewRecordBatch(tmpl.Schema(), cols, int64(n))
}

// The OpenTelemetry reader the workloads read the server's metrics through (claimsMetric here,
// the WAL sync histogram in the floor workload). OpenTelemetry's global meter provider binds the
// instruments made before it to the first provider set, so the reader is installed once per
// process and sees nothing when another provider came first (the HTTP /metrics endpoint of a
// server in this process): the figures then print n/a.
var (
	claimsReaderOnce sync.Once
	claimsManual     *sdkmetric.ManualReader
)

func claimsReader() *sdkmetric.ManualReader {
	claimsReaderOnce.Do(func() {
		claimsManual = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(claimsManual)))
	})
	return claimsManual
}

// readClaims returns claimsMetric summed over every scope, in all and by its reason attribute,
// and false when the process has recorded none (a build without the counter).
func readClaims(ctx context.Context, r *sdkmetric.ManualReader) (int64, map[string]int64, bool) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		return 0, nil, false
	}
	var total int64
	byReason := map[string]int64{}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != claimsMetric || !ok {
				continue
			}
			found = true
			for _, dp := range sum.DataPoints {
				total += dp.Value
				reason, _ := dp.Attributes.Value("reason")
				byReason[reason.AsString()] += dp.Value
			}
		}
	}
	return total, byReason, found
}

// claimsDelta formats the claims recorded between two readings: "n/a" without the counter,
// else the total and, when the counter has reasons, the nonzero ones.
func claimsDelta(before, after map[string]int64, total int64, found bool) string {
	if !found {
		return "n/a"
	}
	var parts []string
	for reason, n := range after {
		if d := n - before[reason]; d != 0 && reason != "" {
			parts = append(parts, fmt.Sprintf("%s %d", reason, d))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return strconv.FormatInt(total, 10)
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
