package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/objstore"
)

// eventsSchema is the partitioned tests' schema: a key, a timestamp, a date, a country that is
// sometimes null, and a payload.
var eventsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "d", Type: arrow.FixedWidthTypes.Date32},
	{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "v", Type: arrow.PrimitiveTypes.Int64},
}, nil)

const hourMicros = int64(3_600_000_000)

var eventCountries = []string{"NL", "DE", "FR", "", "BE"} // "": null

// makeEvents builds rows ids: id i falls in hour i%hours of 2024-01-01 (and a few before 1970),
// on a date derived from it, in country i%5.
func makeEvents(ids []int64, hours int64, v int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, eventsSchema)
	defer b.Release()
	base := int64(1704067200) * 1_000_000 // 2024-01-01T00:00:00Z
	for _, id := range ids {
		ts := base + (id%hours)*hourMicros + id
		if id%11 == 0 {
			ts = -ts / 1000 // before 1970
		}
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts))
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(floorDivTest(ts, 24*hourMicros) + id%40))
		if c := eventCountries[id%5]; c == "" {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.StringBuilder).Append(c)
		}
		b.Field(4).(*array.Int64Builder).Append(v)
	}
	return b.NewRecordBatch()
}

func floorDivTest(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mustSpec(t testing.TB, s string) partition.Spec {
	t.Helper()
	spec, err := partition.ParseSpec([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// distinctTuples counts the partitions of ids' rows under spec.
func distinctTuples(t testing.TB, spec partition.Spec, rec arrow.RecordBatch) int {
	t.Helper()
	b, err := spec.Bind(rec.Schema())
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.Group(rec)
	if err != nil {
		t.Fatal(err)
	}
	return len(g)
}

// TestPartitionedWritesSplitByPartition writes appends, an overwrite and upserts into tables of
// every transform, keyed and not, and checks that every fragment holds the rows of exactly its
// partition, that a write makes one fragment per partition, and that the rows read back whole.
func TestPartitionedWritesSplitByPartition(t *testing.T) {
	specs := []string{
		`[{"column":"ts","transform":"day"}]`,
		`[{"column":"ts","transform":"hour"}]`,
		`[{"column":"d","transform":"month"}]`,
		`[{"column":"d","transform":"year"}]`,
		`[{"column":"country"}]`,
		`[{"column":"id","transform":"bucket[8]"}]`,
		`[{"column":"country","transform":"truncate[1]"},{"column":"id","transform":"truncate[100]"}]`,
		`[{"column":"country","transform":"bucket[3]"},{"column":"ts","transform":"day"}]`,
	}
	for _, keyed := range []bool{false, true} {
		for i, s := range specs {
			t.Run(fmt.Sprintf("keyed=%v/%s", keyed, s), func(t *testing.T) {
				store := newLocalStore(t)
				co := CreateOptions{PartitionBy: mustSpec(t, s)}
				if keyed {
					co.PrimaryKey = []string{"id"}
				}
				tbl, err := Create(t.Context(), store, fmt.Sprintf("p%d", i), eventsSchema, co, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids := idRange(0, 300)
				rec := makeEvents(ids, 6, 1)
				defer rec.Release()
				parts := distinctTuples(t, co.PartitionBy, rec)
				// Two batches in one write: still one fragment per partition.
				m, err := tbl.Append(t.Context(), []arrow.RecordBatch{rec.NewSlice(0, 150), rec.NewSlice(150, 300)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(m.Fragments) != parts {
					t.Fatalf("one append of %d partitions made %d fragments", parts, len(m.Fragments))
				}
				if err := tbl.CheckFragmentPartitions(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				if keyed {
					up := makeEvents(idRange(250, 100), 6, 2) // 50 replace, 50 new
					defer up.Release()
					if _, err := tbl.Upsert(t.Context(), []arrow.RecordBatch{up}, nil); err != nil {
						t.Fatal(err)
					}
				} else {
					more := makeEvents(idRange(300, 50), 6, 2)
					defer more.Release()
					if _, err := tbl.Append(t.Context(), []arrow.RecordBatch{more}, nil); err != nil {
						t.Fatal(err)
					}
				}
				m = mustLatest(t, tbl)
				if err := tbl.CheckFragmentPartitions(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				if got := m.Rows(); got != 350 {
					t.Fatalf("%d rows, want 350", got)
				}
				// Reopened, the spec is the table's.
				again, err := Open(t.Context(), store, tbl.Name(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if am := mustLatest(t, again); !am.PartitionSpec.Equal(co.PartitionBy) {
					t.Fatalf("reopened spec %s, want %s", am.PartitionSpec, co.PartitionBy)
				}
				// An overwrite splits too.
				ow := makeEvents(idRange(1000, 40), 3, 3)
				defer ow.Release()
				if m, err = tbl.Overwrite(t.Context(), eventsSchema, []arrow.RecordBatch{ow}, nil); err != nil {
					t.Fatal(err)
				}
				if err := tbl.CheckFragmentPartitions(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				if len(m.Fragments) != distinctTuples(t, co.PartitionBy, ow) {
					t.Fatalf("overwrite made %d fragments for %d partitions", len(m.Fragments), distinctTuples(t, co.PartitionBy, ow))
				}
			})
		}
	}
}

// TestPartitionedWriteTargetAndBuffer: a partition past the fragment target gets more files,
// each of it alone, and a writer past its buffer budget writes its largest partition out early.
func TestPartitionedWriteTargetAndBuffer(t *testing.T) {
	store := newLocalStore(t)
	tbl, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, `[{"column":"country"}]`)},
		&Options{TargetRowsPerFragment: 40, PartitionBufferBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := makeEvents(idRange(0, 500), 6, 1)
	defer rec.Release()
	var recs []arrow.RecordBatch
	for off := int64(0); off < 500; off += 50 {
		recs = append(recs, rec.NewSlice(off, off+50))
	}
	m, err := tbl.Append(t.Context(), recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.CheckFragmentPartitions(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Fragments {
		if f.PhysicalRows > 40 {
			t.Fatalf("fragment %d of %d rows, past the target 40", f.ID, f.PhysicalRows)
		}
	}
	if m.Rows() != 500 {
		t.Fatalf("%d rows", m.Rows())
	}
}

// TestPartitionLimitRefusesWrite: a write of more partitions than the table's limit fails with
// ErrTooManyPartitions and commits nothing; the table's config overrides the server's option.
func TestPartitionLimitRefusesWrite(t *testing.T) {
	store := newLocalStore(t)
	spec := mustSpec(t, `[{"column":"id","transform":"bucket[64]"}]`)
	tbl, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: spec}, &Options{MaxPartitionsPerWrite: 5})
	if err != nil {
		t.Fatal(err)
	}
	rec := makeEvents(idRange(0, 200), 6, 1)
	defer rec.Release()
	_, err = tbl.Append(t.Context(), []arrow.RecordBatch{rec}, nil)
	if !errors.Is(err, ErrTooManyPartitions) || !strings.Contains(err.Error(), "more than 5") {
		t.Fatalf("append of %d partitions past a limit of 5: %v", distinctTuples(t, spec, rec), err)
	}
	if m := mustLatest(t, tbl); m.Version != 1 {
		t.Fatalf("a refused write committed version %d", m.Version)
	}
	if files := listKeys(t, tbl, "data/"); len(files) != 0 {
		t.Fatalf("a refused write left data files %v", files)
	}
	// A table whose config allows more takes it.
	big, err := Create(t.Context(), store, "big", eventsSchema, CreateOptions{PartitionBy: spec, Config: map[string]string{ConfigMaxPartitionsPerWrite: "100"}},
		&Options{MaxPartitionsPerWrite: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.Append(t.Context(), []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(t.Context(), store, "bad", eventsSchema, CreateOptions{PartitionBy: spec, Config: map[string]string{ConfigMaxPartitionsPerWrite: "0"}}, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a limit of 0: %v", err)
	}
}

// TestCreatePartitionRefusals: a spec that does not fit the schema creates nothing.
func TestCreatePartitionRefusals(t *testing.T) {
	store := newLocalStore(t)
	for _, s := range []string{`[{"column":"nope"}]`, `[{"column":"id","transform":"day"}]`, `[{"column":"country","transform":"hour"}]`} {
		_, err := Create(t.Context(), store, "p", eventsSchema, CreateOptions{PartitionBy: mustSpec(t, s)}, nil)
		var se *partition.SpecError
		if !errors.As(err, &se) || se.Column == "" {
			t.Fatalf("%s: %v, want a SpecError naming the column", s, err)
		}
		if _, err := Open(t.Context(), store, "p", nil); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("%s: a refused create left a table: %v", s, err)
		}
	}
}

func newLocalStore(t testing.TB) objstore.Store {
	t.Helper()
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store
}
