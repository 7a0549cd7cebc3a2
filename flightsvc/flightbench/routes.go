package flightbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
	tk, _ := json.Marshal(map[string]any{"table": table})
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tk})
	if err != nil {
		return 0, 0, 0, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rdr.Release()
	seen := map[int64]bool{}
	var rows int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			seen[ids.Value(i)] = true
		}
		rows += rec.NumRows()
	}
	if err := rdr.Err(); err != nil && err != io.EOF {
		return 0, 0, 0, err
	}
	return rows, len(seen), time.Since(start), nil
}

type tableStats struct {
	Version   uint64 `json:"version"`
	Rows      int64  `json:"rows"`
	Fragments int    `json:"fragments"`
}

// runRoutes is the 1-second-trigger workload: RouteEpochs epochs of EpochRows rows into a plain
// table (direct route, one version each) and into a MemWAL table (route auto), interleaved so
// both see the same machine; then the tables' fragments, a compaction of each, and a full read.
func runRoutes(ctx context.Context, cfg Config, out io.Writer) error {
	c, stop, err := connectSink(ctx, cfg.Root)
	if err != nil {
		return err
	}
	defer stop()
	mem := memory.DefaultAllocator
	tables := []struct {
		name   string
		create any
	}{{"route_direct", true}, {"route_memwal", map[string]any{"memwal": map[string]any{"shards": 2}}}}
	lat := make([][]time.Duration, len(tables))
	busy := make([]time.Duration, len(tables))
	for e := 0; e < cfg.RouteEpochs; e++ {
		rec := Batch(mem, int64(e*cfg.EpochRows), cfg.EpochRows, 4)
		for i, tb := range tables {
			t0 := time.Now()
			ack, err := put(ctx, c, map[string]any{"table": tb.name, "query_id": "bench-1s", "epoch_id": e, "create": tb.create}, []arrow.RecordBatch{rec})
			d := time.Since(t0)
			if err != nil {
				rec.Release()
				return fmt.Errorf("%s epoch %d: %w", tb.name, e, err)
			}
			var a struct{ Status string }
			json.Unmarshal(ack, &a)
			if a.Status != "committed" {
				rec.Release()
				return fmt.Errorf("%s epoch %d: ack %s", tb.name, e, ack)
			}
			lat[i] = append(lat[i], d)
			busy[i] += d
		}
		rec.Release()
	}
	want := int64(cfg.RouteEpochs * cfg.EpochRows)
	fmt.Fprintf(out, "\n1-second-trigger workload: %d epochs of %d rows per route (interleaved)\n", cfg.RouteEpochs, cfg.EpochRows)
	fmt.Fprintf(out, "%-8s %10s %9s %9s %11s %11s %13s %9s\n", "route", "epochs/s", "p50 ms", "p99 ms", "frags", "frags after", "read ms", "rows ok")
	var rate [2]float64
	for i, tb := range tables {
		rate[i] = float64(cfg.RouteEpochs) / busy[i].Seconds()
		var before, after tableStats
		if err := action(ctx, c, "table_stats", map[string]any{"table": tb.name}, &before); err != nil {
			return err
		}
		if i == 1 {
			if err := action(ctx, c, "flush_memwal", map[string]any{"table": tb.name}, nil); err != nil {
				return err
			}
			if err := action(ctx, c, "compact_memwal_shard", map[string]any{"table": tb.name}, nil); err != nil {
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
		fmt.Fprintf(out, "%-8s %10.1f %9.2f %9.2f %11d %11d %13.1f %9s\n", []string{"direct", "memwal"}[i], rate[i],
			ms(percentile(lat[i], 0.5)), ms(percentile(lat[i], 0.99)), before.Fragments, after.Fragments, ms(readTime), ok)
	}
	fmt.Fprintf(out, "MemWAL / direct epochs/s: %.2fx (frags = base-table fragments after the run; after = after flush + fold + compact)\n", rate[1]/rate[0])
	return nil
}
