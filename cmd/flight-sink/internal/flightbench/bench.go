package flightbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/bench/benchdata"
	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// Config sizes the benchmark. Zero values take the defaults in EnsureDefaults.
type Config struct {
	Root            string // table root for the flight-sink server; a temp dir when empty
	BatchRows       int    // rows per batch in the throughput run (65,536)
	BatchesPerStrm  int    // batches per stream in the throughput run (16)
	Streams         []int  // stream counts for the throughput run (1 and 4)
	Epochs          int    // small epochs in the epoch-rate run (1,000)
	EpochRows       int    // rows per small epoch (1,000)
	HistoryVersions int    // versions of history in the latency run (10,000)
	LatencyEpochs   int    // epochs timed per table in the latency run (200)
	RouteEpochs     int    // epochs per route in the direct-vs-MemWAL run (3,600)
	RouteStreams    []int  // concurrent streaming queries in the direct-vs-MemWAL run (1 and 8)
	Only            string // run only "throughput", "epochs", "history", "memwal", or one run only on request: "memwal-floor", "memwal-servers"
	Maintenance     string // the server's default maintenance: background (the default), inline or off

	// The memwal-servers workload (runServers).
	Store         string              // store URI the servers share (s3://bucket/prefix); Root when empty
	S3            *objstore.S3Options // reaches an s3:// Store; nil uses the standard AWS environment
	StoreLatency  time.Duration       // added to every store call (20ms); negative for none
	Servers       int                 // in-process servers (2)
	ServerQueries int                 // streaming queries, pinned evenly to the servers (16)
	RouteDuration time.Duration       // how long the queries write each route (30s)
	Shards        int                 // shards of the MemWAL table (Servers)
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.BatchRows <= 0 {
		c.BatchRows = 64 * 1024
	}
	if c.BatchesPerStrm <= 0 {
		c.BatchesPerStrm = 16
	}
	if len(c.Streams) == 0 {
		c.Streams = []int{1, 4}
	}
	if c.Epochs <= 0 {
		c.Epochs = 1000
	}
	if c.EpochRows <= 0 {
		c.EpochRows = 1000
	}
	if c.HistoryVersions <= 0 {
		c.HistoryVersions = 10000
	}
	if c.LatencyEpochs <= 0 {
		c.LatencyEpochs = 200
	}
	if c.RouteEpochs <= 0 {
		c.RouteEpochs = 3600
	}
	if len(c.RouteStreams) == 0 {
		c.RouteStreams = []int{1, 8}
	}
	if c.StoreLatency == 0 {
		c.StoreLatency = defaultStoreLatency
	}
	c.StoreLatency = max(c.StoreLatency, 0)
	if c.Servers <= 0 {
		c.Servers = defaultServers
	}
	if c.ServerQueries <= 0 {
		c.ServerQueries = defaultServerQueries
	}
	if c.RouteDuration <= 0 {
		c.RouteDuration = defaultRouteDuration
	}
	if c.Shards <= 0 {
		c.Shards = c.Servers
	}
}

// discardService acknowledges DoPut streams after reading and dropping every batch: the network
// and IPC-decoding bound of a Flight server, what flight-sink is compared with.
type discardService struct{ flight.BaseFlightServer }

func (*discardService) DoPut(stream flight.FlightService_DoPutServer) error {
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return err
	}
	defer rdr.Release()
	var rows int64
	for rdr.Next() {
		rows += rdr.RecordBatch().NumRows()
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	body, _ := json.Marshal(map[string]any{"status": "discarded", "rows": rows})
	return stream.Send(&flight.PutResult{AppMetadata: body})
}

func startDiscard() (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(256 << 20))
	flight.RegisterFlightServiceServer(gs, &discardService{})
	go func() { _ = gs.Serve(lis) }()
	return lis.Addr().String(), gs.Stop, nil
}

func startSink(ctx context.Context, cfg Config) (string, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	sc := flightsvc.Config{Listen: "127.0.0.1:0", Root: cfg.Root, Logger: quietLogger()}
	if cfg.Maintenance != "" {
		sc.Sink.DefaultMaintenance = &engine.MaintenanceConfig{Mode: engine.MaintenanceMode(cfg.Maintenance)}
	}
	srv, err := flightsvc.NewServer(ctx, sc)
	if err != nil {
		cancel()
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	return srv.Addr().String(), func() { cancel(); <-done }, nil
}

// connectSink starts a flight-sink server on root and returns a client of it; stop closes the
// client and stops the server.
func connectSink(ctx context.Context, cfg Config) (flight.Client, func(), error) {
	addr, stopServer, err := startSink(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	c, err := dial(addr)
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return c, func() { c.Close(); stopServer() }, nil
}

func dial(addr string) (flight.Client, error) {
	return flight.NewClientWithMiddleware(addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20), grpc.MaxCallRecvMsgSize(256<<20)))
}

// put sends one DoPut with the given descriptor command and batches and returns the ack body.
func put(ctx context.Context, c flight.Client, cmd any, recs []arrow.RecordBatch) ([]byte, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	stream, err := c.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(benchdata.Schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	res, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	for { // drain to EOF so the call completes
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	return res.GetAppMetadata(), nil
}

// Run runs the benchmark and writes a report to out.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	cfg.EnsureDefaults()
	if cfg.Root == "" {
		dir, err := os.MkdirTemp("", "flight-sink-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.Root = dir
	}
	if cfg.Only == "" || cfg.Only == "throughput" {
		if err := runThroughput(ctx, cfg, out); err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
	}
	if cfg.Only == "" || cfg.Only == "epochs" {
		if err := runEpochs(ctx, cfg, out); err != nil {
			return fmt.Errorf("epochs: %w", err)
		}
	}
	if cfg.Only == "" || cfg.Only == "history" {
		if err := runHistory(ctx, cfg, out); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	if cfg.Only == "" || cfg.Only == "memwal" {
		if err := runRoutes(ctx, cfg, out); err != nil {
			return fmt.Errorf("memwal: %w", err)
		}
	}
	if cfg.Only == "memwal-floor" { // not part of the default run: it measures the machine, not only flight-sink
		if err := runFloor(ctx, cfg, out); err != nil {
			return fmt.Errorf("memwal-floor: %w", err)
		}
	}
	if cfg.Only == "memwal-servers" { // not part of the default run: it wants an S3 server
		if err := runServers(ctx, cfg, out); err != nil {
			return fmt.Errorf("memwal-servers: %w", err)
		}
	}
	return nil
}

func runThroughput(ctx context.Context, cfg Config, out io.Writer) error {
	mem := memory.DefaultAllocator
	recs := make([]arrow.RecordBatch, cfg.BatchesPerStrm)
	var bytesPerStream int64
	for i := range recs {
		recs[i] = benchdata.Batch(mem, int64(i*cfg.BatchRows), cfg.BatchRows, 1)
		defer recs[i].Release()
		bytesPerStream += arrowschema.RecordBytes(recs[i]) // the uncompressed payload size of MB/s figures
	}
	dAddr, dStop, err := startDiscard()
	if err != nil {
		return err
	}
	defer dStop()
	sAddr, sStop, err := startSink(ctx, cfg)
	if err != nil {
		return err
	}
	defer sStop()
	fmt.Fprintf(out, "DoPut throughput: %d batches x %d rows per stream, %.1f MB (Arrow) per stream\n",
		cfg.BatchesPerStrm, cfg.BatchRows, float64(bytesPerStream)/1e6)
	fmt.Fprintf(out, "%-8s %14s %14s %8s\n", "streams", "discard MB/s", "sink MB/s", "ratio")
	epoch := int64(0)
	for _, n := range cfg.Streams {
		measure := func(addr string, sink bool) (float64, error) {
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for s := 0; s < n; s++ {
				wg.Add(1)
				go func(s int) {
					defer wg.Done()
					c, err := dial(addr)
					if err != nil {
						errs[s] = err
						return
					}
					defer c.Close()
					cmd := map[string]any{"table": "throughput", "query_id": fmt.Sprintf("bench-%d", s), "epoch_id": epoch, "create": true}
					_, errs[s] = put(ctx, c, cmd, recs)
				}(s)
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return 0, err
			}
			return float64(bytesPerStream*int64(n)) / 1e6 / time.Since(start).Seconds(), nil
		}
		// Warm up both once, then measure each twice, interleaved, and keep the better run.
		var best [2]float64
		for round := 0; round < 3; round++ {
			for i, addr := range []string{dAddr, sAddr} {
				mbs, err := measure(addr, i == 1)
				if err != nil {
					return err
				}
				epoch++
				if round > 0 && mbs > best[i] {
					best[i] = mbs
				}
			}
		}
		fmt.Fprintf(out, "%-8d %14.1f %14.1f %8.2f\n", n, best[0], best[1], best[1]/best[0])
	}
	return nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func runEpochs(ctx context.Context, cfg Config, out io.Writer) error {
	c, stop, err := connectSink(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	mem := memory.DefaultAllocator
	lat := make([]time.Duration, 0, cfg.Epochs)
	start := time.Now()
	for e := 0; e < cfg.Epochs; e++ {
		rec := benchdata.Batch(mem, int64(e*cfg.EpochRows), cfg.EpochRows, 2)
		t0 := time.Now()
		_, err := put(ctx, c, map[string]any{"table": "epochs", "query_id": "bench-epochs", "epoch_id": e, "create": true}, []arrow.RecordBatch{rec})
		lat = append(lat, time.Since(t0))
		rec.Release()
		if err != nil {
			return err
		}
	}
	el := time.Since(start)
	fmt.Fprintf(out, "\n%d epochs of %d rows, one client: %.1f epochs/s, ack p50 %.2f ms, p99 %.2f ms\n",
		cfg.Epochs, cfg.EpochRows, float64(cfg.Epochs)/el.Seconds(), ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)))
	return nil
}

// runHistory compares ack latency on a fresh table with a table that already has
// HistoryVersions versions written by other streaming queries.
func runHistory(ctx context.Context, cfg Config, out io.Writer) error {
	store, err := objstore.NewLocal(cfg.Root)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nbuilding a table with %d versions of history...\n", cfg.HistoryVersions)
	ht, err := engine.Create(ctx, store, "history_long", benchdata.Schema, engine.CreateOptions{}, nil)
	if err != nil {
		return err
	}
	for v := 1; v < cfg.HistoryVersions; v++ {
		props := engine.EpochProperties(epochid.ID{QueryID: fmt.Sprintf("filler-%d", v%50), EpochID: int64(v)}, nil)
		if _, err := ht.Commit(ctx, &engine.Transaction{Operation: engine.OpAppend, Properties: props}); err != nil {
			return err
		}
	}
	if _, err := engine.Create(ctx, store, "history_fresh", benchdata.Schema, engine.CreateOptions{}, nil); err != nil {
		return err
	}
	c, stop, err := connectSink(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	rec := benchdata.Batch(memory.DefaultAllocator, 0, cfg.EpochRows, 3)
	defer rec.Release()
	var fresh, long []time.Duration
	for e := 0; e < cfg.LatencyEpochs; e++ { // interleaved, so drift hits both alike
		for _, tbl := range []string{"history_fresh", "history_long"} {
			t0 := time.Now()
			if _, err := put(ctx, c, map[string]any{"table": tbl, "query_id": "bench-history", "epoch_id": e}, []arrow.RecordBatch{rec}); err != nil {
				return err
			}
			if tbl == "history_fresh" {
				fresh = append(fresh, time.Since(t0))
			} else {
				long = append(long, time.Since(t0))
			}
		}
	}
	fp, lp := percentile(fresh, 0.5), percentile(long, 0.5)
	fmt.Fprintf(out, "ack latency, %d epochs of %d rows: fresh table p50 %.2f ms p99 %.2f ms; %d-version table p50 %.2f ms p99 %.2f ms; ratio (p50) %.2fx\n",
		cfg.LatencyEpochs, cfg.EpochRows, ms(fp), ms(percentile(fresh, 0.99)), cfg.HistoryVersions, ms(lp), ms(percentile(long, 0.99)), float64(lp)/float64(fp))
	return nil
}
