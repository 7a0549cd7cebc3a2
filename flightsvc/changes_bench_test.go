package flightsvc_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/bench/benchdata"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// BenchmarkChangeFeed compares the change feed of a version that upserted 2^20 existing keys of
// a keyed table (2^20 update_preimage rows, then 2^20 update_postimage rows) with a DoGet of the
// 2^20 rows of that version, both over Flight, each op one of each. It reports the rows per
// second of both, the changed keys per second of the feed and their ratios:
// feed-rows/doget-rows compares rows returned per second, feed-keys/doget-rows the changed keys
// per second with the rows a DoGet returns per second.
//
//	go test ./flightsvc -run '^$' -bench BenchmarkChangeFeed -benchtime 5x
func BenchmarkChangeFeed(b *testing.B) {
	const table = "bench_changes"
	srv := startServer(b, flightsvc.Config{})
	epoch := func(e int64, mode string, seed uint64) {
		var recs []arrow.RecordBatch
		for first := int64(0); first < getRows; first += getBatchRows {
			rec := benchdata.Batch(memory.DefaultAllocator, first, getBatchRows, seed)
			defer rec.Release()
			recs = append(recs, rec)
		}
		c := cmd{"table": table, "query_id": benchQueryID, "epoch_id": e, "mode": mode, "create": cmd{"primary_key": []string{"id"}}}
		a, err := srv.put(b.Context(), cmdDesc(b, c), benchdata.Schema, recs...)
		if err != nil {
			b.Fatalf("DoPut epoch %d: %v", e, err)
		}
		wantAck(b, a, "committed", 0)
	}
	epoch(0, "append", benchBatchSeed)
	epoch(1, "update", benchBatchSeed+1) // every key again, with new values: one Upsert version
	v := srv.version(b, table)
	feed, err := json.Marshal(cmd{"table": table, "changes": cmd{"from_version": v, "to_version": v}})
	if err != nil {
		b.Fatal(err)
	}
	get, err := json.Marshal(cmd{"table": table, "version": v})
	if err != nil {
		b.Fatal(err)
	}
	var feedTime, getTime time.Duration
	for b.Loop() {
		start := time.Now()
		rows, err := countRows(b.Context(), srv.Client, feed)
		if err != nil || rows != 2*getRows {
			b.Fatalf("change feed of version %d: %d rows, %v; want %d", v, rows, err, 2*getRows)
		}
		feedTime += time.Since(start)
		start = time.Now()
		if rows, err = countRows(b.Context(), srv.Client, get); err != nil || rows != getRows {
			b.Fatalf("DoGet of version %d: %d rows, %v; want %d", v, rows, err, getRows)
		}
		getTime += time.Since(start)
	}
	n := float64(b.N)
	feedRows := 2 * getRows * n / feedTime.Seconds()
	feedKeys := getRows * n / feedTime.Seconds()
	getRowsRate := getRows * n / getTime.Seconds()
	b.ReportMetric(feedRows, "feed-rows/s")
	b.ReportMetric(feedKeys, "feed-keys/s")
	b.ReportMetric(getRowsRate, "doget-rows/s")
	b.ReportMetric(feedRows/getRowsRate, "feed-rows/doget-rows")
	b.ReportMetric(feedKeys/getRowsRate, "feed-keys/doget-rows")
}
