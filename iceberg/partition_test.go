package iceberg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/iceberg"
)

var partSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "price", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
}, nil)

var partCountries = []string{"NL", "DE", "FR", "BE"}

// partRows builds rows of partSchema for ids: a timestamp 7h30m apart per id from 2026-11-01 (so
// hours, days and months vary), its date, a country by id, a price; id%11 == 0 rows have
// nulls in every nullable column (a null partition).
func partRows(ids ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, partSchema)
	defer b.Release()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		if id%11 == 0 {
			for i := 1; i < 5; i++ {
				b.Field(i).AppendNull()
			}
			continue
		}
		at := base.Add(time.Duration(id) * 450 * time.Minute)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(at.UnixMicro()))
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32FromTime(at))
		b.Field(3).(*array.StringBuilder).Append(partCountries[id%4])
		b.Field(4).(*array.Decimal128Builder).Append(decimal128.FromI64(id*137 - 500))
	}
	return b.NewRecordBatch()
}

func idRange(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// TestPublishPartitioned: for each transform (and a spec of two fields), on a keyed and an
// unkeyed table, through appends, an upsert, a whole-partition delete, a partial delete and a
// compaction: the published table has the spec, every data file's partition tuple is PyIceberg's
// transform of each of its rows, every snapshot reads exactly its version (PyIceberg, Polars), and
// a filter on a partition column plans only that partition's files.
func TestPublishPartitioned(t *testing.T) {
	py := python(t)
	specs := []struct {
		name   string
		spec   string
		filter func(m *engine.Manifest) []map[string]any // the pruning checks on the final version
	}{
		{"identity", `[{"column": "country", "transform": "identity"}]`, func(m *engine.Manifest) []map[string]any {
			return []map[string]any{{"column": "country", "value": "DE", "files": countFragments(m, func(v partition.Tuple) bool { return string(v[0].Bytes) == "DE" })}}
		}},
		{"day", `[{"column": "ts", "transform": "day"}]`, func(m *engine.Manifest) []map[string]any {
			// 2026-11-03T10:00Z is in day 20760 (days since 1970-01-01)
			day := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC).Unix() / 86400
			return []map[string]any{{"column": "ts", "value": "2026-11-03T10:00:00+00:00", "files": countFragments(m, func(v partition.Tuple) bool { return !v[0].IsNull() && v[0].Int == day })}}
		}},
		{"hour", `[{"column": "ts", "transform": "hour"}]`, nil},
		{"month", `[{"column": "ts", "transform": "month"}]`, nil},
		{"year of a date", `[{"column": "day", "transform": "year"}]`, nil},
		{"bucket", `[{"column": "id", "transform": "bucket[4]"}]`, nil},
		{"truncate string", `[{"column": "country", "transform": "truncate[1]"}]`, nil},
		{"truncate long", `[{"column": "id", "transform": "truncate[10]"}]`, nil},
		{"bucket decimal", `[{"column": "price", "transform": "bucket[3]"}]`, nil},
		{"day and bucket", `[{"column": "ts", "transform": "day"}, {"column": "id", "transform": "bucket[2]"}]`, nil},
	}
	for _, sc := range specs {
		for _, keyed := range []bool{false, true} {
			name := sc.name + "/unkeyed"
			if keyed {
				name = sc.name + "/keyed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				spec, err := partition.ParseSpec([]byte(sc.spec))
				if err != nil {
					t.Fatal(err)
				}
				se := storeKinds(t)[0]
				co := engine.CreateOptions{PartitionBy: spec}
				if keyed {
					co.PrimaryKey = []string{"id"}
				}
				tb, err := engine.Create(ctx, se.store, "parts", partSchema, co, &engine.Options{CleanupRetain: iceberg.Retain})
				if err != nil {
					t.Fatal(err)
				}
				for e := int64(0); e < 3; e++ {
					if _, err := tb.Append(ctx, []arrow.RecordBatch{partRows(idRange(e*20, 20)...)}, nil); err != nil {
						t.Fatal(err)
					}
				}
				mustPublish(t, ctx, tb)
				if keyed {
					if _, err := tb.Upsert(ctx, []arrow.RecordBatch{partRows(5, 6, 7, 70, 71)}, nil); err != nil {
						t.Fatal(err)
					}
					mustPublish(t, ctx, tb)
				}
				// A whole partition (of the first field's source column's values) and a part of one.
				whole := map[string]string{
					"country": `{"op": "=", "column": "country", "value": "FR"}`,
					"ts":      `{"op": "<", "column": "ts", "value": "2026-11-03T00:00:00Z"}`,
					"day":     `{"op": "<", "column": "day", "value": "2026-11-03"}`,
					"id":      `{"op": "<", "column": "id", "value": 10}`,
					"price":   `{"op": "is_null", "column": "price"}`,
				}[spec[0].Column]
				for _, pred := range []string{whole, `{"op": "=", "column": "id", "value": 33}`} {
					p, err := expr.ParsePredicate([]byte(pred))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := tb.Delete(ctx, p, nil); err != nil {
						t.Fatal(err)
					}
					mustPublish(t, ctx, tb)
				}
				if _, err := tb.Compact(ctx, engine.CompactOptions{}); err != nil {
					t.Fatal(err)
				}
				mustPublish(t, ctx, tb)
				verify(t, ctx, py, se, tb)
				m, err := tb.Latest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var filters []map[string]any
				if sc.filter != nil {
					filters = sc.filter(m)
				}
				checkPartitions(t, ctx, py, se, tb, sc.spec, filters)
			})
		}
	}
}

// countFragments counts the fragments of m whose partition tuple satisfies keep.
func countFragments(m *engine.Manifest, keep func(partition.Tuple) bool) int {
	n := 0
	for _, f := range m.Fragments {
		if keep(f.Partition) {
			n++
		}
	}
	return n
}

// checkPartitions runs testdata/check_partitions.py on the table's current snapshot.
func checkPartitions(t *testing.T, ctx context.Context, py string, se storeEnv, tb *engine.Table, spec string, filters []map[string]any) {
	t.Helper()
	fj, err := json.Marshal(filters)
	if err != nil {
		t.Fatal(err)
	}
	if filters == nil {
		fj = []byte("[]")
	}
	var want []map[string]string
	if err := json.Unmarshal([]byte(spec), &want); err != nil {
		t.Fatal(err)
	}
	sj, _ := json.Marshal(want)
	cmd := exec.CommandContext(ctx, py, "testdata/check_partitions.py", tb.URI(), string(sj), string(fj))
	cmd.Env = append(os.Environ(), se.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check_partitions.py: %v\n%s", err, stderr.String())
	}
	var res struct {
		OK     bool     `json:"ok"`
		Errors []string `json:"errors"`
		Files  int      `json:"files"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("check_partitions.py printed %q: %v", out, err)
	}
	if !res.OK {
		t.Fatalf("partitioning of the published table:\n%s", strings.Join(res.Errors, "\n"))
	}
	if res.Files < 2 {
		t.Fatalf("the published table has %d data files: nothing partitioned", res.Files)
	}
	t.Logf("%d data files checked", res.Files)
}
