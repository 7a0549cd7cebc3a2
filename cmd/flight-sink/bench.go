package main

import (
	"context"
	"os"
	"time"

	"github.com/flight-sink/flight-sink/cmd/flight-sink/internal/flightbench"
)

// BenchCmd measures flight-sink over a real Flight connection on this machine.
type BenchCmd struct {
	Root          string        `env:"FLIGHT_SINK_BENCH_ROOT" help:"Table root for the benchmark server (default: a temporary directory, removed afterwards)."`
	Only          string        `env:"FLIGHT_SINK_BENCH_ONLY" enum:",throughput,epochs,history,memwal,memwal-floor,memwal-servers" default:"" help:"Run one workload: throughput, epochs, history, memwal, memwal-floor (MemWAL against a discarding server and an fdatasync probe) or memwal-servers (many queries over several servers on object-store latency: --store, direct against MemWAL); the last two only when asked for (default: all but those two)."`
	Batches       int           `env:"FLIGHT_SINK_BENCH_BATCHES" default:"16" help:"Batches of 65,536 rows per stream in the throughput workload."`
	Epochs        int           `env:"FLIGHT_SINK_BENCH_EPOCHS" default:"1000" help:"Epochs in the small-epoch workload."`
	EpochRows     int           `name:"epoch-rows" env:"FLIGHT_SINK_BENCH_EPOCH_ROWS" default:"1000" help:"Rows per epoch in the small-epoch and history workloads."`
	History       int           `env:"FLIGHT_SINK_BENCH_HISTORY" default:"10000" help:"Versions of history in the history workload."`
	Routes        int           `env:"FLIGHT_SINK_BENCH_ROUTES" default:"3600" help:"Epochs per route in the direct-vs-MemWAL workload."`
	Maintenance   string        `enum:"background,inline,off" default:"background" env:"FLIGHT_SINK_BENCH_MAINTENANCE" help:"The benchmark server's maintenance after commits (as serve --maintenance): background, inline or off."`
	RouteQueries  []int         `name:"route-queries" env:"FLIGHT_SINK_BENCH_ROUTE_QUERIES" default:"1,8" help:"Concurrent streaming queries in the direct-vs-MemWAL workload, one run per count (comma-separated)."`
	Store         string        `env:"FLIGHT_SINK_BENCH_STORE" help:"memwal-servers: the store the servers share, e.g. s3://bucket/prefix (endpoint and credentials from the S3 flags and the standard AWS environment, as serve); default the --root directory. make bench-servers runs it on a versitygw it starts."`
	StoreLatency  time.Duration `name:"store-latency" env:"FLIGHT_SINK_BENCH_STORE_LATENCY" default:"20ms" help:"memwal-servers: latency added to every store call (the regime of S3 users); 0 for none."`
	Servers       int           `env:"FLIGHT_SINK_BENCH_SERVERS" default:"2" help:"memwal-servers: in-process Flight servers, each with its own store handle and engine."`
	Queries       int           `env:"FLIGHT_SINK_BENCH_QUERIES" default:"16" help:"memwal-servers: streaming queries writing 1,000-row epochs as fast as they can, pinned evenly to the servers."`
	RouteDuration time.Duration `name:"route-duration" env:"FLIGHT_SINK_BENCH_ROUTE_DURATION" default:"30s" help:"memwal-servers: how long the queries write each route (direct, then MemWAL)."`
	Shards        int           `env:"FLIGHT_SINK_BENCH_SHARDS" default:"0" help:"memwal-servers: shards of the MemWAL table (default: one per server)."`
	CPUProfile    string        `name:"cpuprofile" type:"path" help:"Write a CPU profile of the whole run (client and server share this process) to this file, for go tool pprof."`
}

// Run runs the selected workloads and prints their report on stdout.
func (c *BenchCmd) Run(ctx context.Context, g *Globals) error {
	stop, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	return flightbench.Run(ctx, flightbench.Config{
		Root: c.Root, Only: c.Only, BatchesPerStrm: c.Batches, Epochs: c.Epochs, EpochRows: c.EpochRows,
		HistoryVersions: c.History, RouteEpochs: c.Routes, RouteStreams: c.RouteQueries, Maintenance: c.Maintenance,
		Store: c.Store, S3: g.S3Options(), StoreLatency: storeLatency(c.StoreLatency), Servers: c.Servers, ServerQueries: c.Queries,
		RouteDuration: c.RouteDuration, Shards: c.Shards,
	}, os.Stdout)
}

// storeLatency maps the flag's 0 (no latency) to the bench's "none", since 0 there takes the
// default.
func storeLatency(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
