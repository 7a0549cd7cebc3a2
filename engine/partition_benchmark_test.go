package engine

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/partition"
)

// BenchmarkPartitionedDayRead reads one day of a 30-day table (one epoch per day of 20,000 rows,
// 1% of them late rows of the day before) with a filter on the timestamp, day-partitioned and
// not. It reports the fragments the scan opened (a footer read at least) and decoded.
func BenchmarkPartitionedDayRead(b *testing.B) {
	const days, rowsPerDay = 30, 20_000
	for _, spec := range []string{"", `[{"column":"ts","transform":"day"}]`} {
		name := "unpartitioned"
		if spec != "" {
			name = "day"
		}
		b.Run(name, func(b *testing.B) {
			var ps partition.Spec
			if spec != "" {
				ps = mustSpec(b, spec)
			}
			tbl, err := Create(b.Context(), newLocalStore(b), "t", eventsSchema, CreateOptions{PartitionBy: ps}, nil)
			if err != nil {
				b.Fatal(err)
			}
			for d := range int64(days) {
				rec := eventsOnDay(d*rowsPerDay, rowsPerDay, d)
				if _, err := tbl.Append(b.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			m := mustLatest(b, tbl)
			filter := expr.And(expr.Ge("ts", "2024-01-15T00:00:00Z"), expr.Lt("ts", "2024-01-16T00:00:00Z"))
			var st ScanStats
			for b.Loop() {
				s, err := tbl.ScanManifest(b.Context(), m, ScanOptions{Filter: filter})
				if err != nil {
					b.Fatal(err)
				}
				var rows int64
				for s.Next() {
					rows += s.RecordBatch().NumRows()
				}
				if err := s.Err(); err != nil {
					b.Fatal(err)
				}
				st = s.Stats()
				s.Release()
				if rows == 0 {
					b.Fatal("no row of the day")
				}
			}
			b.ReportMetric(float64(st.FragmentsRead+st.FragmentsSkipped), "fragments-opened/op")
			b.ReportMetric(float64(st.FragmentsRead), "fragments-decoded/op")
			b.ReportMetric(float64(len(m.Fragments)), "fragments")
		})
	}
}

// eventsOnDay builds n eventsSchema rows from id `from`, spread over day d of January 2024, every
// hundredth an hour before the day.
func eventsOnDay(from, n, d int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, eventsSchema)
	defer b.Release()
	dayStart := (int64(1704067200) + d*86400) * 1_000_000
	for i := range n {
		ts := dayStart + i*(86_400_000_000/n)
		if i%100 == 0 {
			ts = dayStart - hourMicros
		}
		b.Field(0).(*array.Int64Builder).Append(from + i)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts))
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(floorDivTest(ts, 24*hourMicros)))
		b.Field(3).(*array.StringBuilder).Append(eventCountries[i%2])
		b.Field(4).(*array.Int64Builder).Append(i)
	}
	return b.NewRecordBatch()
}

// BenchmarkPartitionedSmallEpochs appends 1,000-row epochs spread over 24 hours, into a table
// partitioned by hour(ts) (24 files an epoch) and an unpartitioned one (1 file).
func BenchmarkPartitionedSmallEpochs(b *testing.B) {
	for _, c := range []struct{ name, spec string }{
		{"unpartitioned", ""}, {"hour", `[{"column":"ts","transform":"hour"}]`},
		{"hour-no-ceiling", `[{"column":"ts","transform":"hour"}]`},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ps partition.Spec
			if c.spec != "" {
				ps = mustSpec(b, c.spec)
			}
			var cfg map[string]string
			if c.name == "hour-no-ceiling" {
				mc := MaintenanceConfig{}
				mc.Compaction.MaxFragments = MaxMaxFragments
				cfg = map[string]string{ConfigMaintenance: encodeConfig(b, mc)}
			}
			tbl, err := Create(b.Context(), newLocalStore(b), "t", eventsSchema, CreateOptions{PartitionBy: ps, Config: cfg}, nil)
			if err != nil {
				b.Fatal(err)
			}
			rec := eventsOnDay(0, 1000, 0)
			defer rec.Release()
			for b.Loop() {
				if _, err := tbl.Append(b.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPartitionedTrickle appends 40-row epochs of one hour to a table that already holds
// 30 days of hourly partitions (720, one small fragment each): the shape of a time-ordered stream
// into a partitioned table. The fragment ceiling (64) is below the partition count.
func BenchmarkPartitionedTrickle(b *testing.B) {
	tbl, err := Create(b.Context(), newLocalStore(b), "t", eventsSchema,
		CreateOptions{PartitionBy: mustSpec(b, `[{"column":"ts","transform":"hour"}]`)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var batches []arrow.RecordBatch
	for d := range int64(30) {
		batches = append(batches, eventsOnDay(d*240, 240, d))
	}
	if _, err := tbl.Append(b.Context(), batches, nil); err != nil {
		b.Fatal(err)
	}
	for _, r := range batches {
		r.Release()
	}
	parts := len(mustLatest(b, tbl).Fragments)
	day := eventsOnDay(0, 1000, 29)
	defer day.Release()
	last := day.NewSlice(day.NumRows()-40, day.NumRows()) // the day's last hour
	defer last.Release()
	for b.Loop() {
		if _, err := tbl.Append(b.Context(), []arrow.RecordBatch{last}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(parts), "partitions")
}
