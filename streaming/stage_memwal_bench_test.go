package streaming

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"
)

// BenchmarkStagedEpochRoutes lands multi-writer epochs of 4 partitions x 250 rows (staged at once,
// as 4 tasks do) on two MemWAL tables of one sink, interleaved epoch by epoch: one with route
// "direct" on its DoPuts and commits (parts in data files, a base version per epoch), the other
// with route "auto" (parts held in their stage records, one MemWAL put per epoch). It reports
// each route's epochs/s over the same run, their ratio, and each route's commit time.
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
	var commitTime map[Route]time.Duration
	epoch := func(table string, route Route, e int64) {
		tokens := make([]string, parts)
		var g errgroup.Group // the tasks of an epoch stage their parts at once
		for p := range tokens {
			g.Go(func() error {
				ack, err := s.WriteEpoch(ctx, EpochRequest{Table: table, QueryID: "q", EpochID: e, Create: memwalSpec(2), Route: route,
					Partition: &Partition{ID: int64(p)}}, kvSource(b, batches[p]))
				tokens[p] = ack.Stage
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		cs := time.Now()
		defer func() { commitTime[route] += time.Since(cs) }()
		ack, err := s.CommitStaged(ctx, CommitStagedRequest{Table: table, QueryID: "q", EpochID: e, Stages: tokens, Route: route})
		if err != nil || ack.Status != StatusCommitted {
			b.Fatalf("%s epoch %d: %+v %v", table, e, ack, err)
		}
		if want := route; want != RouteAuto && ack.Route != want || route == RouteAuto && ack.Route != RouteMemWAL {
			b.Fatalf("%s epoch %d landed on route %q", table, e, ack.Route)
		}
	}
	commitTime = map[Route]time.Duration{}
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
	b.ReportMetric(float64(commitTime[RouteDirect].Milliseconds())/float64(b.N), "direct-commit-ms")
	b.ReportMetric(float64(commitTime[RouteAuto].Milliseconds())/float64(b.N), "memwal-commit-ms")
}
