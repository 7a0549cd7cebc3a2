package streaming

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

var (
	meter       = otel.Meter("github.com/flight-sink/flight-sink/streaming")
	tracer      = otel.Tracer("github.com/flight-sink/flight-sink/streaming")
	epochsTotal metric.Int64Counter
	rowsIn      metric.Int64Counter
	bytesIn     metric.Int64Counter
	putStalls   metric.Int64Counter
	putStalled  metric.Float64Histogram
)

func init() {
	epochsTotal, _ = meter.Int64Counter("flight_sink.epochs", metric.WithDescription("Epoch writes acknowledged, by status (committed, duplicate, empty, staged) and mode."))
	rowsIn, _ = meter.Int64Counter("flight_sink.rows", metric.WithDescription("Rows committed by epoch writes."))
	bytesIn, _ = meter.Int64Counter("flight_sink.data_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of data files (Parquet) written for epochs and plain appends, committed or not."))
	putStalls, _ = meter.Int64Counter("flight_sink.memwal.put.stalls",
		metric.WithDescription("MemWAL puts that found their shard at the fold ceiling (max unfolded generations) and stalled for a fold, by outcome (folded, waited, no_progress, failed)."))
	putStalled, _ = meter.Float64Histogram("flight_sink.memwal.put.stall.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a MemWAL put stalled at the fold ceiling."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300))
}

// recordPutStall counts one MemWAL put stall at the fold ceiling and its duration.
func recordPutStall(ctx context.Context, outcome string, waited time.Duration) {
	attrs := metric.WithAttributes(attribute.String("outcome", outcome))
	putStalls.Add(ctx, 1, attrs)
	putStalled.Record(ctx, waited.Seconds(), attrs)
}

func recordAck(ctx context.Context, a Ack, mode Mode) {
	epochsTotal.Add(ctx, 1, metric.WithAttributes(attribute.String("status", string(a.Status)), attribute.String("mode", string(mode))))
	if a.Status == StatusCommitted && a.Rows > 0 {
		rowsIn.Add(ctx, a.Rows)
	}
}

// startSpan starts a span for one epoch operation.
func startSpan(ctx context.Context, name string, r *EpochRequest) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithAttributes(attribute.String("table", r.Table),
		attribute.String("query_id", r.QueryID), attribute.Int64("epoch_id", r.EpochID), attribute.String("mode", string(r.Mode))))
}

// endSpan records the outcome of an epoch operation on its span and ends it.
func endSpan(span trace.Span, a Ack, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("status", string(a.Status)), attribute.Int64("version", int64(a.Version)), attribute.Int64("rows", a.Rows))
	}
	span.End()
}

// registerMemWALGauges reports each open MemWAL shard writer's backlog: rows acknowledged but
// not yet flushed to a generation, their bytes, and flushed generations not yet folded.
func (s *Sink) registerMemWALGauges() metric.Registration {
	rows, _ := meter.Int64ObservableGauge("flight_sink.memwal.memtable_rows", metric.WithDescription("Rows in a MemWAL shard's memtables, not yet flushed to a generation (shards written by this process)."))
	bytes, _ := meter.Int64ObservableGauge("flight_sink.memwal.unflushed_bytes", metric.WithUnit("By"), metric.WithDescription("Bytes of a MemWAL shard's memtables not yet flushed."))
	gens, _ := meter.Int64ObservableGauge("flight_sink.memwal.generations", metric.WithDescription("Flushed MemWAL generations not yet folded into the base table."))
	reg, _ := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		s.mu.Lock()
		sets := make(map[string]*shardSet, len(s.memwal))
		for t, ss := range s.memwal {
			sets[t] = ss
		}
		s.mu.Unlock()
		for table, ss := range sets {
			ss.mu.Lock()
			for _, w := range ss.shards {
				if w == nil {
					continue
				}
				st := w.Stats()
				attrs := metric.WithAttributes(attribute.String("table", table), attribute.String("shard", st.Shard))
				o.ObserveInt64(rows, st.MemtableRows, attrs)
				o.ObserveInt64(bytes, st.UnflushedBytes, attrs)
				o.ObserveInt64(gens, int64(st.Generations), attrs)
			}
			ss.mu.Unlock()
		}
		return nil
	}, rows, bytes, gens)
	return reg
}
