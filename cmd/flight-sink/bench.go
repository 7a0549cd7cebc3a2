package main

import (
	"context"
	"os"

	"github.com/flight-sink/flight-sink/flightsvc/flightbench"
)

// BenchCmd measures flight-sink over a real Flight connection on this machine.
type BenchCmd struct {
	Root         string `env:"FLIGHT_SINK_BENCH_ROOT" help:"Table root for the benchmark server (default: a temporary directory, removed afterwards)."`
	Only         string `env:"FLIGHT_SINK_BENCH_ONLY" enum:",throughput,epochs,history,memwal,memwal-floor" default:"" help:"Run one workload: throughput, epochs, history, memwal, or memwal-floor (MemWAL against a discarding server and an fdatasync probe; only when asked for) (default: all but memwal-floor)."`
	Batches      int    `env:"FLIGHT_SINK_BENCH_BATCHES" default:"16" help:"Batches of 65,536 rows per stream in the throughput workload."`
	Epochs       int    `env:"FLIGHT_SINK_BENCH_EPOCHS" default:"1000" help:"Epochs in the small-epoch workload."`
	EpochRows    int    `name:"epoch-rows" env:"FLIGHT_SINK_BENCH_EPOCH_ROWS" default:"1000" help:"Rows per epoch in the small-epoch and history workloads."`
	History      int    `env:"FLIGHT_SINK_BENCH_HISTORY" default:"10000" help:"Versions of history in the history workload."`
	Routes       int    `env:"FLIGHT_SINK_BENCH_ROUTES" default:"3600" help:"Epochs per route in the direct-vs-MemWAL workload."`
	Maintenance  string `enum:"background,inline,off" default:"background" env:"FLIGHT_SINK_BENCH_MAINTENANCE" help:"The benchmark server's maintenance after commits (as serve --maintenance): background, inline or off."`
	RouteQueries []int  `name:"route-queries" env:"FLIGHT_SINK_BENCH_ROUTE_QUERIES" default:"1,8" help:"Concurrent streaming queries in the direct-vs-MemWAL workload, one run per count (comma-separated)."`
	CPUProfile   string `name:"cpuprofile" type:"path" help:"Write a CPU profile of the whole run (client and server share this process) to this file, for go tool pprof."`
}

// Run runs the selected workloads and prints their report on stdout.
func (c *BenchCmd) Run(ctx context.Context) error {
	stop, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	return flightbench.Run(ctx, flightbench.Config{
		Root: c.Root, Only: c.Only, BatchesPerStrm: c.Batches, Epochs: c.Epochs, EpochRows: c.EpochRows,
		HistoryVersions: c.History, RouteEpochs: c.Routes, RouteStreams: c.RouteQueries, Maintenance: c.Maintenance,
	}, os.Stdout)
}
