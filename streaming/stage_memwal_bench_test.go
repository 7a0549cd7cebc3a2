package streaming

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// BenchmarkStagedEpochRoutes lands multi-writer epochs of 4 partitions x 250 rows on two MemWAL
// tables of one sink, interleaved epoch by epoch: one committed on the direct route (a base
// version per epoch), the other through MemWAL (one put per epoch). It reports each route's
// epochs/s over the same run, and their ratio.
//
//	go test ./streaming/ -run '^$' -bench BenchmarkStagedEpochRoutes -benchtime 200x
func BenchmarkStagedEpochRoutes(b *testing.B) {
	ctx := context.Background()
	s, _ := newSink(b, nil)
	const parts, rows = 4, 250
	batches := make([]arrow.RecordBatch, parts)
	for p := range batches {
		var pairs []any
		for i := 0; i < rows; i++ {
			pairs = append(pairs, p*rows+i, fmt.Sprintf("value-%d", i))
		}
		batches[p] = kv(pairs...)
		defer batches[p].Release()
	}
	epoch := func(table string, route Route, e int64) {
		tokens := make([]string, parts)
		for p := range tokens {
			ack, err := s.WriteEpoch(ctx, EpochRequest{Table: table, QueryID: "q", EpochID: e, Create: memwalSpec(2),
				Partition: &Partition{ID: int64(p)}}, kvSource(b, batches[p]))
			if err != nil {
				b.Fatal(err)
			}
			tokens[p] = ack.Stage
		}
		ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: table, QueryID: "q", EpochID: e, Stages: tokens, Route: route})
		if err != nil || ack.Status != StatusCommitted {
			b.Fatalf("%s epoch %d: %+v %v", table, e, ack, err)
		}
		if want := route; want != RouteAuto && ack.Route != want || route == RouteAuto && ack.Route != RouteMemWAL {
			b.Fatalf("%s epoch %d landed on route %q", table, e, ack.Route)
		}
	}
	epoch("direct", RouteDirect, 0) // create both tables outside the timing
	epoch("memwal", RouteAuto, 0)
	var direct, memwal time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		start := time.Now()
		epoch("direct", RouteDirect, int64(i))
		mid := time.Now()
		epoch("memwal", RouteAuto, int64(i))
		direct, memwal = direct+mid.Sub(start), memwal+time.Since(mid)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/direct.Seconds(), "direct-epochs/s")
	b.ReportMetric(float64(b.N)/memwal.Seconds(), "memwal-epochs/s")
	b.ReportMetric(direct.Seconds()/memwal.Seconds(), "memwal/direct")
}
