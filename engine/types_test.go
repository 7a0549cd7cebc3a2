package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/objstore"
)

func TestStoredTypesRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		samples := typetest.Nested()
		for id := arrow.NULL; int(id) < len(arrowschema.TypeRules()); id++ {
			samples = append(samples, typetest.ByID()[id])
		}
		for _, s := range samples {
			in := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: s.Type, Nullable: true}}, nil)
			stored, err := arrowschema.StoredSchema(in)
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
				conv, err := arrowschema.StoreBatch(ctx, nil, stored, rec, 0)
				if err != nil {
					t.Fatalf("StoreBatch: %v", err)
				}
				defer conv.Release()
				tbl, err := Create(ctx, store, s.Name, in, CreateOptions{}, nil)
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				got := mustLatest(t, tbl).ArrowSchema()
				if !arrowschema.EqualIgnoringFieldIDs(got, stored) {
					t.Fatalf("table schema %s, want the stored %s", got, stored)
				}
				// array.Equal of a large_list compares its element's field id: relabel the
				// expected values with the table's.
				rel, err := arrowschema.ConformColumns(arrow.NewSchema([]arrow.Field{got.Field(1)}, nil), []arrow.Array{want}, int64(want.Len()))
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

// TestStoredTypes checks arrowschema.StoredType against the rules for every sample: a stored type maps to
// itself, a converted one to another type, a refused one to arrowschema.ErrUnsupportedType (a schema
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
			st, err := arrowschema.StoredType("c", s.Type)
			rule := arrowschema.TypeRuleOf(s.Type.ID())
			switch {
			case err != nil:
				if !errors.Is(err, arrowschema.ErrUnsupportedType) || !errors.Is(err, arrowschema.ErrSchemaMismatch) {
					t.Fatalf("refusal %v is not arrowschema.ErrUnsupportedType/arrowschema.ErrSchemaMismatch", err)
				}
				if !strings.Contains(err.Error(), `column "c`) {
					t.Fatalf("refusal %q does not name the column", err)
				}
				sc := arrow.NewSchema([]arrow.Field{{Name: "c", Type: s.Type, Nullable: true}}, nil)
				if _, err := Create(t.Context(), store, "t-"+s.Name, sc, CreateOptions{}, nil); !errors.Is(err, arrowschema.ErrUnsupportedType) {
					t.Fatalf("Create of a refused type: %v", err)
				}
				if objs, _ := store.List(t.Context(), "t-"+s.Name+"/", ""); len(objs) > 0 {
					t.Fatalf("a refused Create wrote %v", objs)
				}
			case rule.Decision == arrowschema.TypeStored && !arrow.TypeEqual(st, s.Type):
				// A nested type is stored when its children are; it is converted when one is. An
				// extension other than arrow.uuid is stored as bool or its storage type.
				_, nested := s.Type.(arrow.NestedType)
				_, ext := s.Type.(arrow.ExtensionType)
				if !nested && !ext {
					t.Fatalf("stored type %s maps to %s", s.Type, st)
				}
			case rule.Decision == arrowschema.TypeConverted && arrow.TypeEqual(st, s.Type):
				t.Fatalf("converted type %s maps to itself", s.Type)
			}
			if err == nil {
				if st2, err := arrowschema.StoredType("c", st); err != nil || !arrow.TypeEqual(st2, st) {
					t.Fatalf("stored type %s is not stored as itself: %v, %v", st, st2, err)
				}
			}
		})
	}
}
