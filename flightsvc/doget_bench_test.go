package flightsvc_test

// Benchmarks of the two Flight hot paths, over a real loopback socket between arrow-go's Flight
// client and an in-process server on local disk (startServer: maintenance off, so every op does
// the same work). The data is flightbench's mixed eight-column schema, what `flight-sink bench`
// writes.
//
//	go test ./flightsvc -run '^$' -bench 'BenchmarkDoGet|BenchmarkDoPutEpoch' -benchtime 20x

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/bench/benchdata"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// BenchmarkDoGet's table: 2^20 rows in four fragments, one epoch each, sent as 64 Ki-row batches
// (an epoch stays under the engine's 1 Mi rows per fragment, so each is one fragment).
const (
	getFragments    = 4
	getFragmentRows = 256 * 1024
	getBatchRows    = 64 * 1024
	getRows         = getFragments * getFragmentRows
	getTable        = "bench_doget"
)

// BenchmarkDoPutEpoch's epochs: one 1-second trigger of a modest stream.
const (
	putEpochRows = 1000
	putTable     = "bench_doput"
)

const (
	benchQueryID   = "bench-query"
	benchBatchSeed = 7
)

// BenchmarkDoGet reads a whole table of 2^20 rows in four fragments with one DoGet: the Parquet
// scan, the IPC encoding of bounded messages, gRPC over loopback and the client's decoding.
// b.SetBytes is the Arrow size of the rows, so MB/s is the uncompressed read rate. The rows are
// checked once, id by id, before the timed reads; each timed read checks its row count.
func BenchmarkDoGet(b *testing.B) {
	srv := startServer(b, flightsvc.Config{})
	var size int64
	for e := range int64(getFragments) {
		size += putGetEpoch(b, srv, e)
	}
	if st := srv.stats(b, getTable); st.Rows != getRows || st.Fragments != getFragments {
		b.Fatalf("table holds %d rows in %d fragments, want %d in %d", st.Rows, st.Fragments, getRows, getFragments)
	}
	res, err := srv.get(b.Context(), cmd{"table": getTable})
	if err != nil {
		b.Fatalf("DoGet: %v", err)
	}
	if !slices.Equal(res.IDs, idRange(0, getRows)) {
		b.Fatalf("DoGet read %d rows, want ids 0..%d exactly once each: %s", res.Rows, getRows-1, abbrev(res.IDs))
	}

	tk, err := json.Marshal(cmd{"table": getTable})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		rows, err := countRows(b.Context(), srv.Client, tk)
		if err != nil {
			b.Fatalf("DoGet: %v", err)
		}
		if rows != getRows {
			b.Fatalf("DoGet read %d rows, want %d", rows, getRows)
		}
	}
}

// putGetEpoch lands epoch e of getTable, the rows getFragmentRows*e onwards, and returns their
// Arrow size.
func putGetEpoch(b *testing.B, srv *testServer, e int64) int64 {
	var recs []arrow.RecordBatch
	var size int64
	for first := e * getFragmentRows; first < (e+1)*getFragmentRows; first += getBatchRows {
		rec := benchdata.Batch(memory.DefaultAllocator, first, getBatchRows, benchBatchSeed)
		defer rec.Release()
		recs = append(recs, rec)
		size += arrowschema.RecordBytes(rec)
	}
	a, err := srv.put(b.Context(), cmdDesc(b, epochCmd(getTable, benchQueryID, e)), benchdata.Schema, recs...)
	if err != nil {
		b.Fatalf("DoPut epoch %d: %v", e, err)
	}
	wantAck(b, a, "committed", 0)
	return size
}

// countRows reads ticket tk to the end with DoGet and returns its row count.
func countRows(ctx context.Context, c flight.Client, tk []byte) (int64, error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tk})
	if err != nil {
		return 0, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, err
	}
	defer rdr.Release()
	var rows int64
	for rdr.Next() {
		rows += rdr.RecordBatch().NumRows()
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return rows, nil
}

// BenchmarkDoPutEpoch lands one 1,000-row append epoch per op with DoPut into a direct (non-MemWAL)
// table and waits for its ack: the Parquet file, the transaction file and the manifest commit,
// all fsynced, plus the Flight round trip. It reports the median and 99th-percentile ack
// latency next to ns/op. Every ack must say committed; the table must then hold every row.
func BenchmarkDoPutEpoch(b *testing.B) {
	srv := startServer(b, flightsvc.Config{})
	rec := benchdata.Batch(memory.DefaultAllocator, 0, putEpochRows, benchBatchSeed)
	defer rec.Release()
	putEpoch := func(e int64) ack {
		a, err := srv.put(b.Context(), cmdDesc(b, epochCmd(putTable, benchQueryID, e)), benchdata.Schema, rec)
		if err != nil {
			b.Fatalf("DoPut epoch %d: %v", e, err)
		}
		if a.Status != "committed" || a.Rows != putEpochRows {
			b.Fatalf("DoPut epoch %d: ack %+v, want committed with %d rows", e, a, putEpochRows)
		}
		return a
	}
	first := putEpoch(0) // untimed: creates the table

	var lat []time.Duration
	var last ack
	e := int64(0)
	for b.Loop() {
		e++
		start := time.Now()
		last = putEpoch(e)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if want := first.Version + uint64(e); last.Version != want {
		b.Fatalf("last epoch committed version %d, want %d (one version per epoch)", last.Version, want)
	}
	if st := srv.stats(b, putTable); st.Rows != (e+1)*putEpochRows {
		b.Fatalf("table holds %d rows after %d epochs of %d", st.Rows, e+1, putEpochRows)
	}
	reportLatency(b, lat)
}

// reportLatency reports the median and 99th percentile of lat in milliseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
