package streaming

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// historyEpoch writes epoch e of query q into table: one row, in a schema of "id" and, when
// column is set, that one nullable column (merge_schema adds it when the table lacks it).
func historyEpoch(ctx context.Context, s *Sink, table, q string, e int64, column string) error {
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	if column != "" {
		fields = append(fields, arrow.Field{Name: column, Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, f := range b.Fields() {
		f.(*array.Int64Builder).Append(e)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	src, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		return err
	}
	defer src.Release()
	req := EpochRequest{Table: table, QueryID: q, EpochID: e, Mode: ModeAppend, MergeSchema: column != ""}
	if e == 0 && q == "q-0" {
		req.Create = &CreateSpec{}
	}
	a, err := s.WriteEpoch(ctx, req, src)
	if err == nil && a.Status != StatusCommitted {
		err = fmt.Errorf("epoch %d of %s: %+v", e, q, a)
	}
	return err
}

// BenchmarkEpochHistory measures one append epoch (one row) and the manifest it writes on a table
// whose history grew one way before it:
//
//   - queries=N: N streaming queries committed one epoch each (every one has a watermark);
//   - schemas=N: N epochs of one query each added a column (N schema versions, N+1 columns).
//
// It reports the manifest's bytes (manifest-B), the bytes of every version written during the
// history (versions-B) and of the watermark archives and schema files left at the end
// (archives-B, schemas-B). Table maintenance is off, so the figure is the commit path's alone. Run it
// with
//
//	go test ./streaming -run '^$' -bench BenchmarkEpochHistory -benchtime 20x
func BenchmarkEpochHistory(b *testing.B) {
	for _, c := range []struct {
		kind string
		n    int
	}{{"queries", 1}, {"queries", 1500}, {"schemas", 1}, {"schemas", 1000}} {
		b.Run(fmt.Sprintf("%s=%d", c.kind, c.n), func(b *testing.B) {
			ctx := context.Background()
			root := b.TempDir()
			store, err := objstore.NewLocal(root)
			if err != nil {
				b.Fatal(err)
			}
			s := NewSink(store, &Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}, DisableIceberg: true})
			defer s.Close()
			const table = "history"
			for i := range c.n {
				q, e, col := "q-0", int64(i), ""
				if c.kind == "queries" {
					q, e = fmt.Sprintf("q-%d", i), 0
				} else if i > 0 {
					col = fmt.Sprintf("c%d", i)
				}
				if err := historyEpoch(ctx, s, table, q, e, col); err != nil {
					b.Fatal(err)
				}
			}
			versionsDir := filepath.Join(root, table, "_versions")
			historyBytes := dirBytes(b, versionsDir)
			e := int64(c.n)
			b.ResetTimer()
			for b.Loop() {
				if err := historyEpoch(ctx, s, table, "q-0", e, ""); err != nil {
					b.Fatal(err)
				}
				e++
			}
			b.StopTimer()
			entries, err := os.ReadDir(versionsDir) // sorted: the newest version last
			if err != nil || len(entries) == 0 {
				b.Fatal(err)
			}
			fi, err := entries[len(entries)-1].Info()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(fi.Size()), "manifest-B")
			b.ReportMetric(float64(historyBytes), "versions-B")
			b.ReportMetric(float64(dirBytes(b, filepath.Join(root, table, "_streams"))), "archives-B")
			b.ReportMetric(float64(dirBytes(b, filepath.Join(root, table, "_schemas"))), "schemas-B")
		})
	}
}

// dirBytes sums the sizes of the files in dir (0 when there is no dir).
func dirBytes(tb testing.TB, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}
