package flightbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/flight-sink/flight-sink/bench/benchdata"
)

// action runs one DoAction and decodes its JSON result into out (when not nil).
func action(ctx context.Context, c flight.Client, typ string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	stream, err := c.DoAction(ctx, &flight.Action{Type: typ, Body: b})
	if err != nil {
		return err
	}
	res, err := stream.Recv()
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	if out != nil {
		return json.Unmarshal(res.Body, out)
	}
	return nil
}

// readAll reads a table with DoGet and returns its row count, its distinct ids and the time taken.
func readAll(ctx context.Context, c flight.Client, table string) (int64, int, time.Duration, error) {
	start := time.Now()
	seen := map[int64]bool{}
	var rows int64
	err := scanIDs(ctx, c, table, func(id int64) {
		seen[id] = true
		rows++
	})
	if err != nil {
		return 0, 0, 0, err
	}
	return rows, len(seen), time.Since(start), nil
}

// scanIDs reads a table with DoGet and calls fn with the id (column 0) of every row.
func scanIDs(ctx context.Context, c flight.Client, table string, fn func(id int64)) error {
	tk, _ := json.Marshal(map[string]any{"table": table})
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tk})
	if err != nil {
		return err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return err
	}
	defer rdr.Release()
	for rdr.Next() {
		ids := rdr.RecordBatch().Column(0).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			fn(ids.Value(i))
		}
	}
	if err := rdr.Err(); err != nil && err != io.EOF {
		return err
	}
	return nil
}

type tableStats struct {
	Version   uint64 `json:"version"`
	Rows      int64  `json:"rows"`
	Fragments int    `json:"fragments"`
}

// runRoutes is the 1-second-trigger workload: RouteEpochs epochs of EpochRows rows into a plain
// table (direct route, one version each) and into a MemWAL table (route auto), for each count in
// RouteStreams of streaming queries writing the table at once (each query sends its epochs one
// after another, as Spark does). The two routes run in alternating blocks so both see the same
// machine; then the tables' fragments, a compaction of each, and a full read.
func runRoutes(ctx context.Context, cfg Config, out io.Writer) error {
	c, stop, err := connectSink(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "\n1-second-trigger workload: %d epochs of %d rows per route, spread over concurrent queries; routes alternate in blocks\n", cfg.RouteEpochs, cfg.EpochRows)
	fmt.Fprintf(out, "%-8s %-8s %10s %9s %9s %11s %11s %13s %9s\n", "queries", "route", "epochs/s", "p50 ms", "p99 ms", "frags", "frags after", "read ms", "rows ok")
	for _, streams := range cfg.RouteStreams {
		if err := runRoutesWith(ctx, c, cfg, streams, out); err != nil {
			return fmt.Errorf("%d queries: %w", streams, err)
		}
	}
	maint := cfg.Maintenance
	if maint == "" {
		maint = "background, the server's default"
	}
	fmt.Fprintf(out, "frags = base-table fragments after the run (maintenance: %s); after = after flush + fold + compact\n", maint)
	return nil
}

// routeBlock is how many epochs each query sends to one route before the other route's turn.
const routeBlock = 20

func runRoutesWith(ctx context.Context, c flight.Client, cfg Config, streams int, out io.Writer) error {
	mem := memory.DefaultAllocator
	tables := []struct {
		route  string
		name   string
		create any
	}{
		{"direct", fmt.Sprintf("route_direct_q%d", streams), true},
		{"memwal", fmt.Sprintf("route_memwal_q%d", streams), map[string]any{"memwal": map[string]any{"shards": 2}}},
	}
	perQuery := (cfg.RouteEpochs + streams - 1) / streams
	total := perQuery * streams
	lat := make([][]time.Duration, len(tables))
	wall := make([]time.Duration, len(tables))
	var mu sync.Mutex
	for from := 0; from < perQuery; from += routeBlock {
		to := min(from+routeBlock, perQuery)
		// The block's data is generated before its clock starts: the client's data generation
		// is not the sink's cost. Both routes send the same batches.
		recs := make([][]arrow.RecordBatch, streams)
		for q := range recs {
			for e := from; e < to; e++ {
				first := int64((q*perQuery + e) * cfg.EpochRows) // distinct ids across queries
				recs[q] = append(recs[q], benchdata.Batch(mem, first, cfg.EpochRows, 4))
			}
		}
		for i, tb := range tables {
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			for q := 0; q < streams; q++ {
				g.Go(func() error {
					for e := from; e < to; e++ {
						rec := recs[q][e-from]
						t0 := time.Now()
						ack, err := put(gctx, c, map[string]any{"table": tb.name, "query_id": fmt.Sprintf("bench-1s-%d", q), "epoch_id": e, "create": tb.create}, []arrow.RecordBatch{rec})
						d := time.Since(t0)
						if err != nil {
							return fmt.Errorf("%s query %d epoch %d: %w", tb.name, q, e, err)
						}
						var a struct{ Status string }
						_ = json.Unmarshal(ack, &a)
						if a.Status != "committed" {
							return fmt.Errorf("%s query %d epoch %d: ack %s", tb.name, q, e, ack)
						}
						mu.Lock()
						lat[i] = append(lat[i], d)
						mu.Unlock()
					}
					return nil
				})
			}
			err := g.Wait()
			wall[i] += time.Since(start)
			if err != nil {
				releaseAll(recs)
				return err
			}
		}
		releaseAll(recs)
	}
	want := int64(total * cfg.EpochRows)
	var rate [2]float64
	for i, tb := range tables {
		rate[i] = float64(total) / wall[i].Seconds()
		var before, after tableStats
		if err := action(ctx, c, "table_stats", map[string]any{"table": tb.name}, &before); err != nil {
			return err
		}
		if tb.route == "memwal" {
			if err := action(ctx, c, "flush_memwal", map[string]any{"table": tb.name}, nil); err != nil {
				return err
			}
			if err := action(ctx, c, "fold_memwal_shard", map[string]any{"table": tb.name}, nil); err != nil {
				return err
			}
		}
		if err := action(ctx, c, "compact", map[string]any{"table": tb.name}, nil); err != nil {
			return err
		}
		if err := action(ctx, c, "table_stats", map[string]any{"table": tb.name}, &after); err != nil {
			return err
		}
		rows, distinct, readTime, err := readAll(ctx, c, tb.name)
		if err != nil {
			return err
		}
		ok := "yes"
		if rows != want || int64(distinct) != want {
			ok = fmt.Sprintf("NO (%d rows, %d distinct, want %d)", rows, distinct, want)
		}
		fmt.Fprintf(out, "%-8d %-8s %10.1f %9.2f %9.2f %11d %11d %13.1f %9s\n", streams, tb.route, rate[i],
			ms(percentile(lat[i], 0.5)), ms(percentile(lat[i], 0.99)), before.Fragments, after.Fragments, ms(readTime), ok)
	}
	fmt.Fprintf(out, "%-8d MemWAL / direct epochs/s: %.2fx\n", streams, rate[1]/rate[0])
	return nil
}

func releaseAll(recs [][]arrow.RecordBatch) {
	for _, rs := range recs {
		for _, r := range rs {
			r.Release()
		}
	}
}
