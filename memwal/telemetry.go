package memwal

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	meter          = otel.Meter("github.com/flight-sink/flight-sink/memwal")
	putStalls      metric.Int64Counter
	putStalled     metric.Float64Histogram
	memtableRows   metric.Int64ObservableGauge
	unflushedBytes metric.Int64ObservableGauge
	generations    metric.Int64ObservableGauge
	shardClaims    metric.Int64Counter
	walSync        metric.Float64Histogram
	quarantined    metric.Int64Counter
)

func init() {
	putStalls, _ = meter.Int64Counter("flight_sink.memwal.put.stalls",
		metric.WithDescription("MemWAL puts that found their shard at the fold ceiling (max unfolded generations) and stalled for a fold, by outcome (folded, waited, no_progress, failed)."))
	putStalled, _ = meter.Float64Histogram("flight_sink.memwal.put.stall.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a MemWAL put stalled at the fold ceiling."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300))
	memtableRows, _ = meter.Int64ObservableGauge("flight_sink.memwal.memtable_rows",
		metric.WithDescription("Rows in a MemWAL shard's memtables, not yet flushed to a generation (shards written by this process)."))
	unflushedBytes, _ = meter.Int64ObservableGauge("flight_sink.memwal.unflushed_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of a MemWAL shard's memtables not yet flushed."))
	shardClaims, _ = meter.Int64Counter("flight_sink.memwal.shard.claims",
		metric.WithDescription("MemWAL shard claims (writer epoch bumps) by this process, by reason: start (a free shard for this server's puts), takeover (a dead owner's shard), fenced (reopened after another server claimed it), fallback (hash routing: no shard was free), flush, fold_all."))
	walSync, _ = meter.Float64Histogram(WALSyncMetric, metric.WithUnit("s"),
		metric.WithDescription("Time the storage took to make one MemWAL WAL entry durable, by store: local (the fdatasync of the segment after the entry is written), object (the entry's put-if-absent). A put's acknowledgement waits for it."),
		metric.WithExplicitBucketBoundaries(WALSyncBuckets...))
	quarantined, _ = meter.Int64Counter("flight_sink.memwal.fold.quarantined",
		metric.WithDescription("MemWAL generations a fold set aside because their data cannot be appended to the table (table_stats lists them with the error)."))
	generations, _ = meter.Int64ObservableGauge("flight_sink.memwal.generations",
		metric.WithDescription("Flushed MemWAL generations not yet folded into the base table."))
}

// WALSyncMetric is the name of the WAL durability histogram; WALSyncBuckets are its bucket
// bounds in seconds (the benchmark reads shares above a bound from them).
const WALSyncMetric = "flight_sink.memwal.wal.sync.duration"

var WALSyncBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5}

// walSyncAttrs are the attribute sets of the WAL sync histogram, made once: it is recorded on
// every put's path.
var walSyncAttrs = map[string]metric.MeasurementOption{
	"local":  metric.WithAttributes(attribute.String("store", "local")),
	"object": metric.WithAttributes(attribute.String("store", "object")),
}

// recordWALSync records the time one WAL entry took to become durable on a store of kind
// ("local" or "object").
func recordWALSync(kind string, d time.Duration) {
	walSync.Record(context.Background(), d.Seconds(), walSyncAttrs[kind])
}

// recordPutStall counts one MemWAL put stall at the fold ceiling and its duration.
func recordPutStall(ctx context.Context, outcome string, waited time.Duration) {
	attrs := metric.WithAttributes(attribute.String("outcome", outcome))
	putStalls.Add(ctx, 1, attrs)
	putStalled.Record(ctx, waited.Seconds(), attrs)
}

// recordClaim counts one shard claim of this process.
func recordClaim(ctx context.Context, reason string) {
	shardClaims.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

// registerBacklogGauges reports the backlog of each shard writer of ss: rows acknowledged but
// not yet flushed to a generation, their bytes, and flushed generations not yet folded. Close
// unregisters it.
func registerBacklogGauges(ss *ShardSet) metric.Registration {
	reg, _ := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ss.mu.Lock()
		writers := append([]*Shard(nil), ss.writers...)
		ss.mu.Unlock()
		for _, w := range writers {
			if w == nil {
				continue
			}
			st := w.Stats()
			attrs := metric.WithAttributes(attribute.String("table", ss.table.Name()), attribute.String("shard", st.Shard))
			o.ObserveInt64(memtableRows, st.MemtableRows, attrs)
			o.ObserveInt64(unflushedBytes, st.UnflushedBytes, attrs)
			o.ObserveInt64(generations, int64(st.Generations), attrs)
		}
		return nil
	}, memtableRows, unflushedBytes, generations)
	return reg
}

// recordQuarantine counts one generation a fold quarantined.
func recordQuarantine(ctx context.Context) { quarantined.Add(ctx, 1) }
