package engine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/objstore"
)

// lastArrowType is the highest Arrow type id arrow-go defines (v18.8: DECIMAL64). A newer
// arrow-go that adds ids makes TestTypeRulesCoverEveryID fail until the policy decides them.
const lastArrowType = arrow.DECIMAL64

func TestTypeRulesCoverEveryID(t *testing.T) {
	samples := typetest.ByID()
	for id := arrow.NULL; id <= lastArrowType; id++ {
		if _, ok := typeRules[id]; !ok {
			t.Errorf("type id %s has no rule in typeRules", id)
		}
		if _, ok := samples[id]; !ok {
			t.Errorf("type id %s has no sample in typetest.ByID", id)
		}
	}
	if got := len(TypeRules()); got != int(lastArrowType)+1 {
		t.Errorf("TypeRules has %d rules, want one per id 0..%d", got, lastArrowType)
	}
	if r := TypeRuleOf(lastArrowType + 1); r.Decision != TypeRefused {
		t.Errorf("an unknown type id is %s, want refused", r.Decision)
	}
}

// TestStoredTypes checks StoredType against the rules for every sample: a stored type maps to
// itself, a converted one to another type, a refused one to ErrUnsupportedType (a schema
// mismatch) naming the column; and Create refuses a refused type before it writes anything.
func TestStoredTypes(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	samples := typetest.Nested()
	for _, s := range typetest.ByID() {
		samples = append(samples, s)
	}
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			st, err := StoredType("c", s.Type)
			rule := TypeRuleOf(s.Type.ID())
			switch {
			case err != nil:
				if !errors.Is(err, ErrUnsupportedType) || !errors.Is(err, ErrSchemaMismatch) {
					t.Fatalf("refusal %v is not ErrUnsupportedType/ErrSchemaMismatch", err)
				}
				if !strings.Contains(err.Error(), `column "c`) {
					t.Fatalf("refusal %q does not name the column", err)
				}
				sc := arrow.NewSchema([]arrow.Field{{Name: "c", Type: s.Type, Nullable: true}}, nil)
				if _, err := Create(t.Context(), store, "t-"+s.Name, sc, CreateOptions{}, nil); !errors.Is(err, ErrUnsupportedType) {
					t.Fatalf("Create of a refused type: %v", err)
				}
				if objs, _ := store.List(t.Context(), "t-"+s.Name+"/", ""); len(objs) > 0 {
					t.Fatalf("a refused Create wrote %v", objs)
				}
			case rule.Decision == TypeStored && !arrow.TypeEqual(st, s.Type):
				// A nested type is stored when its children are; it is converted when one is.
				if _, nested := s.Type.(arrow.NestedType); !nested {
					t.Fatalf("stored type %s maps to %s", s.Type, st)
				}
			case rule.Decision == TypeConverted && arrow.TypeEqual(st, s.Type):
				t.Fatalf("converted type %s maps to itself", s.Type)
			}
			if err == nil {
				if st2, err := StoredType("c", st); err != nil || !arrow.TypeEqual(st2, st) {
					t.Fatalf("stored type %s is not stored as itself: %v, %v", st, st2, err)
				}
			}
		})
	}
}

// TestStoredTypesRoundTrip lands every accepted sample in a table (converted at the edge, as
// streaming does), appends it three times, and reads it back equal before and after compaction
// and from a reopened handle. It covers the Parquet paths a type can break: the column-parallel
// writer, pqarrow's writer, the Parquet shape of fixed-size lists, and ConformBatch on reads.
func TestStoredTypesRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		samples := typetest.Nested()
		for id := arrow.NULL; id <= lastArrowType; id++ {
			samples = append(samples, typetest.ByID()[id])
		}
		for _, s := range samples {
			in := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: s.Type, Nullable: true}}, nil)
			stored, err := StoredSchema(in)
			if err != nil {
				continue // refused: TestStoredTypes
			}
			t.Run(s.Name, func(t *testing.T) {
				ctx := t.Context()
				raw, err := s.Rows(s.Type)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Release()
				want, err := s.Rows(stored.Field(1).Type)
				if err != nil {
					t.Fatal(err)
				}
				defer want.Release()
				ids, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64, strings.NewReader(`[0,1,2]`))
				defer ids.Release()
				rec := array.NewRecordBatch(in, []arrow.Array{ids, raw}, int64(raw.Len()))
				defer rec.Release()
				conv, err := StoreBatch(ctx, nil, stored, rec, 0)
				if err != nil {
					t.Fatalf("StoreBatch: %v", err)
				}
				defer conv.Release()
				tbl, err := Create(ctx, store, s.Name, in, CreateOptions{}, nil)
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				got := mustLatest(t, tbl).ArrowSchema()
				if !EqualIgnoringFieldIDs(got, stored) {
					t.Fatalf("table schema %s, want the stored %s", got, stored)
				}
				// array.Equal of a large_list compares its element's field id: relabel the
				// expected values with the table's.
				rel, err := ConformColumns(arrow.NewSchema([]arrow.Field{got.Field(1)}, nil), []arrow.Array{want}, int64(want.Len()))
				if err != nil {
					t.Fatal(err)
				}
				defer rel.Release()
				want = rel.Column(0)
				for i := 0; i < 3; i++ {
					if _, err := tbl.Append(ctx, []arrow.RecordBatch{conv}, nil); err != nil {
						t.Fatalf("append: %v", err)
					}
				}
				check := func(tbl *Table, when string) {
					recs, err := tbl.ReadAll(ctx, ScanOptions{})
					if err != nil {
						t.Fatalf("%s: read: %v", when, err)
					}
					n := 0
					for _, r := range recs {
						for i := 0; i < int(r.NumRows()); i++ {
							id := r.Column(0).(*array.Int64).Value(i)
							got, exp := array.NewSlice(r.Column(1), int64(i), int64(i+1)), array.NewSlice(want, id, id+1)
							if !array.Equal(got, exp) {
								t.Errorf("%s: row %d: %v (%s), want %v (%s)", when, id, got, got.DataType(), exp, exp.DataType())
							}
							got.Release()
							exp.Release()
						}
						n += int(r.NumRows())
						r.Release()
					}
					if n != 3*typetest.Len {
						t.Fatalf("%s: %d rows, want %d", when, n, 3*typetest.Len)
					}
				}
				check(tbl, "after the appends")
				if rep, err := tbl.Compact(ctx, CompactOptions{}); err != nil || rep.FragmentsRemoved == 0 {
					t.Fatalf("compact: %+v, %v", rep, err)
				}
				check(tbl, "after compaction")
				check(hOpen(t, store, s.Name, nil), "reopened")
			})
		}
	})
}

// TestConformBatchRefusesWithoutPanic: a read column whose type cannot become the table's is an
// error naming the column, not the panic of stamping a wrong type.
func TestConformBatchRefusesWithoutPanic(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "c", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true}}, nil)
	col, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.BinaryTypes.String, strings.NewReader(`["a"]`))
	defer col.Release()
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "c", Type: arrow.BinaryTypes.String}}, nil), []arrow.Array{col}, 1)
	defer rec.Release()
	if _, err := ConformBatch(sc, rec); err == nil || !strings.Contains(err.Error(), `column "c"`) {
		t.Fatalf("ConformBatch(utf8 as list) = %v; want an error naming the column", err)
	}
}

func TestRecoverError(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := RecoverError(quiet, "test op", func() error { panic("boom") })
	if !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), "test op") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("RecoverError of a panic = %v", err)
	}
	want := errors.New("plain")
	if err := RecoverError(quiet, "test op", func() error { return want }); err != want {
		t.Fatalf("RecoverError of an error = %v", err)
	}
	var nilMap map[string]int
	err = RecoverError(quiet, "runtime error", func() error { nilMap["x"] = 1; return nil })
	if !errors.Is(err, ErrPanic) {
		t.Fatalf("RecoverError of a runtime panic = %v", err)
	}
}

// typeDocRow is the docs/protocol.md table row of rule r.
func typeDocRow(r TypeRule) string {
	note := r.Note
	if note == "" {
		note = "-"
	}
	return fmt.Sprintf("| `%s` | %s | %s |", r.ID, r.Decision, note)
}

// TestProtocolDocListsTypePolicy: the "Arrow types" section of docs/protocol.md lists every rule
// of the type policy, with its decision and note, exactly as typeRules holds it, so the two cannot
// drift. On a mismatch it prints the section's table to paste.
func TestProtocolDocListsTypePolicy(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Arrow types")
	if start < 0 {
		t.Fatal(`docs/protocol.md has no "## Arrow types" section`)
	}
	section := doc[start+len("## Arrow types"):]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			rows[strings.TrimSpace(line)] = true
		}
	}
	var table strings.Builder
	missing := false
	for _, r := range TypeRules() {
		row := typeDocRow(r)
		fmt.Fprintln(&table, row)
		if !rows[row] {
			missing = true
			t.Errorf("docs/protocol.md Arrow types lacks the row %s", row)
		}
		delete(rows, row)
	}
	for row := range rows {
		t.Errorf("docs/protocol.md Arrow types has a row the policy does not: %s", row)
	}
	if missing || len(rows) > 0 {
		t.Logf("the table, as the policy has it:\n| Arrow type | decision | note |\n|---|---|---|\n%s", table.String())
	}
}
