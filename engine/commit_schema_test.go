package engine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

func field(name string, dt arrow.DataType, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
}

func schemaOf(fs ...arrow.Field) *arrow.Schema { return arrow.NewSchema(fs, nil) }

func TestMergeSchemaRules(t *testing.T) {
	i8, i16, i32, i64 := arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64
	u8, u16, u32, u64 := arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64
	f32, f64 := arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64
	str := arrow.BinaryTypes.String
	dec := func(p, s int32) arrow.DataType { return &arrow.Decimal128Type{Precision: p, Scale: s} }
	key := field("id", i64, false)
	st := func(fs ...arrow.Field) arrow.DataType { return arrow.StructOf(fs...) }
	cases := []struct {
		name      string
		table, in *arrow.Schema
		// want is the merged type of column "c" (nil: the table's, unchanged); refused names
		// what the error must say (empty: allowed).
		want    *arrow.Schema
		refused string
		strict  bool // allowed without merge_schema (nothing changes)
	}{
		{name: "same", table: schemaOf(key, field("c", i32, true)), in: schemaOf(key, field("c", i32, true)), strict: true},
		{name: "int8->int16", table: schemaOf(key, field("c", i8, true)), in: schemaOf(key, field("c", i16, true)), want: schemaOf(key, field("c", i16, true))},
		{name: "int16->int32", table: schemaOf(key, field("c", i16, true)), in: schemaOf(key, field("c", i32, true)), want: schemaOf(key, field("c", i32, true))},
		{name: "int32->int64", table: schemaOf(key, field("c", i32, true)), in: schemaOf(key, field("c", i64, true)), want: schemaOf(key, field("c", i64, true))},
		{name: "int8->int64", table: schemaOf(key, field("c", i8, true)), in: schemaOf(key, field("c", i64, true)), want: schemaOf(key, field("c", i64, true))},
		{name: "uint8->uint16", table: schemaOf(key, field("c", u8, true)), in: schemaOf(key, field("c", u16, true)), want: schemaOf(key, field("c", u16, true))},
		{name: "uint16->uint32", table: schemaOf(key, field("c", u16, true)), in: schemaOf(key, field("c", u32, true)), want: schemaOf(key, field("c", u32, true))},
		{name: "uint32->uint64", table: schemaOf(key, field("c", u32, true)), in: schemaOf(key, field("c", u64, true)), want: schemaOf(key, field("c", u64, true))},
		{name: "float32->float64", table: schemaOf(key, field("c", f32, true)), in: schemaOf(key, field("c", f64, true)), want: schemaOf(key, field("c", f64, true))},
		{name: "decimal precision up", table: schemaOf(key, field("c", dec(10, 2), true)), in: schemaOf(key, field("c", dec(12, 2), true)), want: schemaOf(key, field("c", dec(12, 2), true))},
		{name: "new nullable column", table: schemaOf(key), in: schemaOf(key, field("c", str, true)), want: schemaOf(key, field("c", str, true))},
		{name: "new nested struct field", table: schemaOf(key, field("c", st(field("a", i32, true)), true)),
			in:   schemaOf(key, field("c", st(field("a", i32, true), field("b", str, true)), true)),
			want: schemaOf(key, field("c", st(field("a", i32, true), field("b", str, true)), true))},
		{name: "list element promoted", table: schemaOf(key, field("c", arrow.ListOf(i32), true)), in: schemaOf(key, field("c", arrow.ListOf(i64), true)), want: schemaOf(key, field("c", arrow.ListOf(i64), true))},
		// An older schema of the table: nothing changes, so strict mode takes it too.
		{name: "omitted nullable column", table: schemaOf(key, field("c", str, true)), in: schemaOf(key), strict: true},
		{name: "narrower type widened on write", table: schemaOf(key, field("c", i64, true)), in: schemaOf(key, field("c", i16, true)), strict: true},
		{name: "struct with fewer fields", table: schemaOf(key, field("c", st(field("a", i32, true), field("b", str, true)), true)),
			in: schemaOf(key, field("c", st(field("a", i32, true)), true)), strict: true},
		{name: "required data into nullable column", table: schemaOf(key, field("c", i32, true)), in: schemaOf(key, field("c", i32, false)), strict: true},

		{name: "drop of a required column", table: schemaOf(key, field("c", i32, false)), in: schemaOf(key), refused: `"c"`},
		{name: "rename of a required column", table: schemaOf(key, field("c", i32, false)), in: schemaOf(key, field("d", i32, false)), refused: `"c"`},
		{name: "new column not nullable", table: schemaOf(key), in: schemaOf(key, field("c", i32, false)), refused: `new column "c"`},
		{name: "nullable into required", table: schemaOf(key, field("c", i32, false)), in: schemaOf(key, field("c", i32, true)), refused: `"c" is not nullable`},
		{name: "narrowing float64 to float32 type", table: schemaOf(key, field("c", f32, true)), in: schemaOf(key, field("c", i32, true)), refused: `"c"`},
		{name: "int64 to float64", table: schemaOf(key, field("c", i64, true)), in: schemaOf(key, field("c", f64, true)), refused: `"c"`},
		{name: "signed to unsigned", table: schemaOf(key, field("c", i32, true)), in: schemaOf(key, field("c", u64, true)), refused: `"c"`},
		{name: "utf8 to int", table: schemaOf(key, field("c", str, true)), in: schemaOf(key, field("c", i64, true)), refused: `"c"`},
		{name: "decimal scale", table: schemaOf(key, field("c", dec(10, 2), true)), in: schemaOf(key, field("c", dec(12, 3), true)), refused: `"c"`},
		{name: "nested field type change", table: schemaOf(key, field("c", st(field("a", i32, true)), true)), in: schemaOf(key, field("c", st(field("a", str, true)), true)), refused: `"c.a"`},
		{name: "primary key promoted", table: schemaOf(field("id", i32, false)), in: schemaOf(field("id", i64, false)), refused: `primary-key column "id"`},
		{name: "primary key narrower", table: schemaOf(key), in: schemaOf(field("id", i32, false)), refused: `primary-key column "id"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			merged, changed, err := arrowschema.MergeSchema(c.table, c.in, []string{"id"})
			strictErr := arrowschema.CheckWriteSchema(c.table, c.in, []string{"id"})
			if c.refused != "" {
				if !errors.Is(err, arrowschema.ErrSchemaChangeRefused) || !errors.Is(err, arrowschema.ErrSchemaMismatch) || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("MergeSchema: %v, want a refusal naming %s", err, c.refused)
				}
				if !errors.Is(strictErr, arrowschema.ErrSchemaChangeRefused) {
					t.Fatalf("strict: %v, want the same refusal", strictErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("MergeSchema: %v", err)
			}
			want := c.want
			if want == nil {
				want = c.table
			}
			if changed != (c.want != nil) || !arrowschema.EqualIgnoringFieldIDs(merged, want) {
				t.Fatalf("merged %v (changed %v), want %v", merged, changed, want)
			}
			switch {
			case c.strict && strictErr != nil:
				t.Fatalf("strict mode refuses what changes nothing: %v", strictErr)
			case !c.strict && (!errors.Is(strictErr, arrowschema.ErrSchemaMismatch) || errors.Is(strictErr, arrowschema.ErrSchemaChangeRefused) || !strings.Contains(strictErr.Error(), "merge_schema")):
				t.Fatalf("strict mode: %v, want a mismatch that says to set merge_schema", strictErr)
			}
		})
	}
}

// evolvedSchema is rowsSchema with a promoted score (it stays float64) and a new nullable column.
var evolvedSchema = arrow.NewSchema(append(rowsSchema.Fields(), arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), nil)

func extraValue(id int64) int32 { return int32(id * 3) }

func makeEvolvedRows(ids []int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, evolvedSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(rowName(id))
		if rowScoreNull(id) {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(rowScore(id))
		}
		b.Field(3).(*array.Int32Builder).Append(extraValue(id))
	}
	return b.NewRecordBatch()
}

// appendMerged appends rec the way a merge_schema epoch does: its schema merged into the table's
// (SchemaForWrite), the rows written in the merged schema and committed with it.
func appendMerged(ctx context.Context, tbl *Table, base *Manifest, rec arrow.RecordBatch) (*Manifest, error) {
	sc, changed, err := SchemaForWrite(base, rec.Schema())
	if err != nil {
		return nil, err
	}
	w, err := tbl.NewWriterFor(sc, rec.Schema())
	if err != nil {
		return nil, err
	}
	txn := &Transaction{Operation: OpAppend, ReadVersion: base.Version}
	if changed {
		if err := txn.SetSchema(sc); err != nil {
			return nil, err
		}
	}
	return tbl.writeAndCommit(ctx, w, []arrow.RecordBatch{rec}, txn)
}

// readExtra reads the table and returns extra by id (nil for null) and checks the other columns.
func readExtra(t *testing.T, tbl *Table, version uint64) map[int64]*int32 {
	t.Helper()
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Version: version})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	out := map[int64]*int32{}
	for _, r := range recs {
		if !arrowschema.EqualIgnoringFieldIDs(r.Schema(), evolvedSchema) {
			t.Fatalf("read schema %v, want %v", r.Schema(), evolvedSchema)
		}
		ids, names, extra := r.Column(0).(*array.Int64), r.Column(1).(*array.String), r.Column(3).(*array.Int32)
		for i := 0; i < int(r.NumRows()); i++ {
			id := ids.Value(i)
			if names.Value(i) != rowName(id) {
				t.Fatalf("row %d: name %q", id, names.Value(i))
			}
			if extra.IsNull(i) {
				out[id] = nil
			} else {
				v := extra.Value(i)
				out[id] = &v
			}
		}
		r.Release()
	}
	return out
}

func requireExtra(t *testing.T, got map[int64]*int32, nullIDs, valueIDs []int64) {
	t.Helper()
	if len(got) != len(nullIDs)+len(valueIDs) {
		t.Fatalf("%d rows, want %d", len(got), len(nullIDs)+len(valueIDs))
	}
	for _, id := range nullIDs {
		if v, ok := got[id]; !ok || v != nil {
			t.Fatalf("row %d (written before the column existed): extra %v, want null", id, v)
		}
	}
	for _, id := range valueIDs {
		if v := got[id]; v == nil || *v != extraValue(id) {
			t.Fatalf("row %d: extra %v, want %d", id, v, extraValue(id))
		}
	}
}

// TestAddColumnDirect: a merge adds a column in the transaction of the rows that carry it; old
// rows read null, an epoch in the old schema still lands afterwards, a compaction writes the new
// schema with the new field id, and the old version still reads in its own schema.
func TestAddColumnDirect(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		tbl := createRowsTable(t, store, "evolve", nil)
		v2 := appendIDs(t, tbl, idRange(0, 5), nil)
		rec := makeEvolvedRows(idRange(5, 5))
		defer rec.Release()
		v3, err := appendMerged(ctx, tbl, v2, rec)
		if err != nil {
			t.Fatal(err)
		}
		if v3.SchemaID != 1 || v3.LastFieldID != 4 || len(v3.Fragments) != 2 {
			t.Fatalf("after the merge: schema_id %d last_field_id %d fragments %d, want 1, 4, 2", v3.SchemaID, v3.LastFieldID, len(v3.Fragments))
		}
		if id, _ := arrowschema.FieldID(v3.ArrowSchema().Field(3)); id != 4 {
			t.Fatalf("new column has field id %d, want 4", id)
		}
		requireExtra(t, readExtra(t, tbl, 0), idRange(0, 5), idRange(5, 5))
		// An epoch in the old schema lands without a merge: strict mode, nothing to change.
		v4 := appendIDs(t, tbl, idRange(10, 5), nil)
		if v4.SchemaID != 1 {
			t.Fatalf("an old-schema append changed the schema id to %d", v4.SchemaID)
		}
		requireExtra(t, readExtra(t, tbl, 0), append(idRange(0, 5), idRange(10, 5)...), idRange(5, 5))
		// The old version reads in its own schema.
		old, err := tbl.ReadAll(ctx, ScanOptions{Version: v2.Version})
		if err != nil || len(old) == 0 || !arrowschema.EqualIgnoringFieldIDs(old[0].Schema(), rowsSchema) {
			t.Fatalf("version %d: %v, %v", v2.Version, old, err)
		}
		for _, r := range old {
			r.Release()
		}
		if _, err := tbl.Compact(ctx, CompactOptions{}); err != nil {
			t.Fatal(err)
		}
		m := mustLatest(t, tbl)
		if len(m.Fragments) != 1 {
			t.Fatalf("after compaction: %d fragments", len(m.Fragments))
		}
		if ids := parquetFieldIDs(t, ctx, tbl, m.Fragments[0].Files[0].Path); len(ids) != 4 || ids[3] != 4 {
			t.Fatalf("compacted file has field ids %v, want [1 2 3 4]", ids)
		}
		requireExtra(t, readExtra(t, tbl, 0), append(idRange(0, 5), idRange(10, 5)...), idRange(5, 5))
	})
}

// TestPromoteColumnReadsWidened: old fragments of a promoted column read widened.
func TestPromoteColumnReadsWidened(t *testing.T) {
	store := mustLocalStore(t)
	ctx := t.Context()
	narrow := schemaOf(field("id", arrow.PrimitiveTypes.Int64, false), field("v", arrow.PrimitiveTypes.Int16, true))
	wide := schemaOf(field("id", arrow.PrimitiveTypes.Int64, false), field("v", arrow.PrimitiveTypes.Int64, true))
	tbl, err := Create(ctx, store, "promote", narrow, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	build := func(sc *arrow.Schema, ids ...int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for _, id := range ids {
			b.Field(0).(*array.Int64Builder).Append(id)
			switch vb := b.Field(1).(type) {
			case *array.Int16Builder:
				vb.Append(int16(id))
			case *array.Int64Builder:
				vb.Append(id << 40)
			}
		}
		return b.NewRecordBatch()
	}
	r1 := build(narrow, 1, 2)
	defer r1.Release()
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{r1}, nil); err != nil {
		t.Fatal(err)
	}
	r2 := build(wide, 3)
	defer r2.Release()
	m, err := appendMerged(ctx, tbl, mustLatest(t, tbl), r2)
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(m.ArrowSchema().Field(1).Type, arrow.PrimitiveTypes.Int64) || m.LastFieldID != 2 {
		t.Fatalf("after the promotion: %v, last_field_id %d", m.ArrowSchema(), m.LastFieldID)
	}
	if id, _ := arrowschema.FieldID(m.ArrowSchema().Field(1)); id != 2 {
		t.Fatalf("a promoted column keeps its field id: got %d", id)
	}
	r3 := build(narrow, 4) // an old-schema write after the promotion: widened
	defer r3.Release()
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{r3}, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := tbl.ReadAll(ctx, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int64{}
	for _, r := range recs {
		for i := 0; i < int(r.NumRows()); i++ {
			got[r.Column(0).(*array.Int64).Value(i)] = r.Column(1).(*array.Int64).Value(i)
		}
		r.Release()
	}
	want := map[int64]int64{1: 1, 2: 2, 3: 3 << 40, 4: 4}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("read %v, want %v", got, want)
		}
	}
}

// TestSchemaMergeConcurrent: writers on two handles of one table (two processes' view) that read
// the same version: a plain old-schema append rebases over a schema change, the same change made
// twice lands twice, a different column or an incompatible change from the old version is a
// conflict that commits nothing.
func TestSchemaMergeConcurrent(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := t.Context()
		a := createRowsTable(t, store, "race", nil)
		b := hOpen(t, store, "race", nil)
		base := appendIDs(t, a, idRange(0, 3), nil)
		baseB := mustLatest(t, b)
		if baseB.Version != base.Version {
			t.Fatalf("handles at %d and %d", base.Version, baseB.Version)
		}
		rec := makeEvolvedRows(idRange(3, 3))
		defer rec.Release()
		if _, err := appendMerged(ctx, a, base, rec); err != nil {
			t.Fatal(err)
		}
		// b read the old version: its old-schema append rebases.
		old := makeRows(idRange(6, 3))
		defer old.Release()
		w, err := b.NewWriterFor(baseB.ArrowSchema(), rowsSchema)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.writeAndCommit(ctx, w, []arrow.RecordBatch{old}, &Transaction{Operation: OpAppend, ReadVersion: baseB.Version}); err != nil {
			t.Fatalf("old-schema append over a schema change: %v", err)
		}
		// The same change from the old version: same column, same id, lands.
		same := makeEvolvedRows(idRange(9, 3))
		defer same.Release()
		if _, err := appendMerged(ctx, b, baseB, same); err != nil {
			t.Fatalf("the same change twice: %v", err)
		}
		before := mustLatest(t, b)
		// An incompatible change from the old version: extra as utf8.
		bad := schemaOf(append(rowsSchema.Fields(), field("extra", arrow.BinaryTypes.String, true))...)
		bb := array.NewRecordBuilder(memory.DefaultAllocator, bad)
		bb.Field(0).(*array.Int64Builder).Append(100)
		bb.Field(1).(*array.StringBuilder).Append(rowName(100))
		bb.Field(2).AppendNull()
		bb.Field(3).(*array.StringBuilder).Append("x")
		badRec := bb.NewRecordBatch()
		bb.Release()
		defer badRec.Release()
		if _, err := appendMerged(ctx, b, baseB, badRec); !errors.Is(err, ErrCommitConflict) {
			t.Fatalf("incompatible concurrent change: %v, want a commit conflict", err)
		}
		// A different new column from the old version: its id collides with extra's.
		other := schemaOf(append(rowsSchema.Fields(), field("other", arrow.PrimitiveTypes.Int32, true))...)
		ob := array.NewRecordBuilder(memory.DefaultAllocator, other)
		ob.Field(0).(*array.Int64Builder).Append(101)
		ob.Field(1).(*array.StringBuilder).Append(rowName(101))
		ob.Field(2).AppendNull()
		ob.Field(3).(*array.Int32Builder).Append(1)
		otherRec := ob.NewRecordBatch()
		ob.Release()
		defer otherRec.Release()
		if _, err := appendMerged(ctx, b, baseB, otherRec); !errors.Is(err, ErrCommitConflict) {
			t.Fatalf("different concurrent column: %v, want a commit conflict", err)
		}
		after := mustLatest(t, hOpen(t, store, "race", nil))
		if after.Version != before.Version || after.SchemaID != 1 {
			t.Fatalf("refused changes committed something: version %d -> %d, schema_id %d", before.Version, after.Version, after.SchemaID)
		}
		// Retried against the new version, the other column merges.
		if _, err := appendMerged(ctx, b, after, otherRec); err != nil {
			t.Fatalf("retry of the other column: %v", err)
		}
		requireExtra(t, readExtraOnly(t, b), append(idRange(0, 3), append(idRange(6, 3), 101)...), append(idRange(3, 3), idRange(9, 3)...))
	})
}

// readExtraOnly reads id and extra by name whatever else the schema has.
func readExtraOnly(t *testing.T, tbl *Table) map[int64]*int32 {
	t.Helper()
	recs, err := tbl.ReadAll(t.Context(), ScanOptions{Columns: []string{"id", "extra"}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]*int32{}
	for _, r := range recs {
		ids, extra := r.Column(0).(*array.Int64), r.Column(1).(*array.Int32)
		for i := 0; i < int(r.NumRows()); i++ {
			if extra.IsNull(i) {
				out[ids.Value(i)] = nil
			} else {
				v := extra.Value(i)
				out[ids.Value(i)] = &v
			}
		}
		r.Release()
	}
	return out
}

const schemaCrashEnv = "FLIGHT_SINK_SCHEMA_CRASH"

// TestHelperProcessSchemaCrash is the child of TestSchemaChangeKilled: it commits a schema merge
// and is killed (SIGKILL) at the point FLIGHT_SINK_SCHEMA_CRASH names.
func TestHelperProcessSchemaCrash(t *testing.T) {
	if os.Getenv(helperProcessEnv) != "1" {
		t.Skip("helper process")
	}
	store, err := objstore.NewLocal(os.Getenv(helperURIEnv))
	if err != nil {
		t.Fatal(err)
	}
	point := os.Getenv(schemaCrashEnv)
	kill := func(uint64) error { return syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	opts := &Options{}
	if point == "before-manifest" {
		opts.BeforeManifestWrite = kill
	}
	tbl := hOpen(t, store, "crash", opts)
	rec := makeEvolvedRows(idRange(5, 5))
	if _, err := appendMerged(t.Context(), tbl, mustLatest(t, tbl), rec); err != nil {
		t.Fatal(err)
	}
	if point == "after-manifest" {
		_ = kill(0) // what follows the commit (the ack, maintenance) never runs
	}
	t.Fatal("not killed")
}

// TestSchemaChangeKilled: a process killed (kill -9) while committing a schema change leaves the
// table at the old schema with the old rows, or at the new schema with the epoch's rows; never
// the schema without its rows or rows without their schema.
func TestSchemaChangeKilled(t *testing.T) {
	for _, point := range []string{"before-manifest", "after-manifest"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			store, err := objstore.NewLocal(dir)
			if err != nil {
				t.Fatal(err)
			}
			tbl := createRowsTable(t, store, "crash", nil)
			appendIDs(t, tbl, idRange(0, 5), nil)
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcessSchemaCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperProcessEnv+"=1", helperURIEnv+"="+dir, schemaCrashEnv+"="+point)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child was not killed: %v\n%s", err, out)
			}
			m := mustLatest(t, hOpen(t, store, "crash", nil))
			switch {
			case m.SchemaID == 0 && m.Version == 2:
				requireSameIDs(t, "old schema", scanRows(t, hOpen(t, store, "crash", nil), 0), idRange(0, 5))
				if point != "before-manifest" {
					t.Fatalf("killed after the manifest, the table is at the old schema")
				}
			case m.SchemaID == 1 && m.Version == 3:
				requireExtra(t, readExtra(t, hOpen(t, store, "crash", nil), 0), idRange(0, 5), idRange(5, 5))
				if point != "after-manifest" {
					t.Fatalf("killed before the manifest, the table is at the new schema")
				}
			default:
				t.Fatalf("table at version %d schema_id %d: neither the old nor the new state", m.Version, m.SchemaID)
			}
			// The table takes the change afterwards.
			rec := makeEvolvedRows(idRange(20, 2))
			defer rec.Release()
			if _, err := appendMerged(t.Context(), hOpen(t, store, "crash", nil), m, rec); err != nil {
				t.Fatal(err)
			}
		})
	}
}
