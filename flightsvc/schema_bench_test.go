package flightsvc_test

// Benchmarks of schema evolution over a real loopback socket:
//
//	go test ./flightsvc -run '^$' -bench 'BenchmarkSchemaChangeAck|BenchmarkDoGetSchemaVersions' -benchtime 10x

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// wideSchema is rowSchema with int64 columns c1..cn.
func wideSchema(n int) *arrow.Schema {
	fs := rowSchema.Fields()
	for i := 1; i <= n; i++ {
		fs = append(fs, arrow.Field{Name: fmt.Sprintf("c%d", i), Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	}
	return arrow.NewSchema(fs, nil)
}

// wideBatch is rows from..from+rows of wideSchema(n), where c1..cvalues hold id*i and the rest
// are null.
func wideBatch(n, values int, from, rows int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, wideSchema(n))
	defer b.Release()
	for id := from; id < from+rows; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", id))
		for i := 1; i <= n; i++ {
			if i <= values {
				b.Field(1 + i).(*array.Int64Builder).Append(id * int64(i))
			} else {
				b.Field(1 + i).AppendNull()
			}
		}
	}
	return b.NewRecordBatch()
}

// BenchmarkSchemaChangeAck: the ack latency of an epoch of 1000 rows that adds a column (with
// merge_schema) against one that does not.
func BenchmarkSchemaChangeAck(b *testing.B) {
	for _, adds := range []bool{false, true} {
		name := "same_schema"
		if adds {
			name = "adds_a_column"
		}
		b.Run(name, func(b *testing.B) {
			s := startServer(b, flightsvc.Config{})
			ctx := testCtx(b)
			first := wideBatch(0, 0, 0, 1000)
			if _, err := s.put(ctx, cmdDesc(b, epochCmd("ack", "q", 0)), first.Schema(), first); err != nil {
				b.Fatal(err)
			}
			first.Release()
			recs := make([]arrow.RecordBatch, b.N)
			for i := range recs {
				n := 0
				if adds {
					n = i + 1
				}
				recs[i] = wideBatch(n, n, int64(i+1)*1000, 1000)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := s.put(ctx, cmdDesc(b, cmd{"table": "ack", "query_id": "q", "epoch_id": i + 1, "merge_schema": true}), recs[i].Schema(), recs[i])
				if err != nil || a.Status != "committed" {
					b.Fatalf("epoch %d: %+v, %v", i+1, a, err)
				}
			}
			b.StopTimer()
			for _, r := range recs {
				r.Release()
			}
		})
	}
}

// BenchmarkDoGetSchemaVersions: DoGet of a table whose ten fragments span ten schema versions
// (fragment k written before columns c(k+1)..c9 existed) against the same rows written in the
// final schema (those columns null).
func BenchmarkDoGetSchemaVersions(b *testing.B) {
	const versions, rows = 10, 20000
	for _, evolved := range []bool{true, false} {
		name := "final_schema"
		if evolved {
			name = "ten_schema_versions"
		}
		b.Run(name, func(b *testing.B) {
			s := startServer(b, flightsvc.Config{})
			ctx := testCtx(b)
			for k := 0; k < versions; k++ {
				n := versions - 1
				if evolved {
					n = k
				}
				rec := wideBatch(n, k, int64(k)*rows, rows)
				c := cmd{"table": "sv", "query_id": "q", "epoch_id": k, "create": true, "merge_schema": true}
				if _, err := s.put(ctx, cmdDesc(b, c), rec.Schema(), rec); err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				stream, err := s.Client.DoGet(ctx, &flight.Ticket{Ticket: []byte(`{"table": "sv"}`)})
				if err != nil {
					b.Fatal(err)
				}
				rdr, err := flight.NewRecordReader(stream)
				if err != nil {
					b.Fatal(err)
				}
				var got int64
				for rdr.Next() {
					got += rdr.RecordBatch().NumRows()
				}
				if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				if rdr.Schema().NumFields() != 2+versions-1 || got != versions*rows {
					b.Fatalf("read %d rows of %d columns", got, rdr.Schema().NumFields())
				}
				rdr.Release()
			}
		})
	}
}
