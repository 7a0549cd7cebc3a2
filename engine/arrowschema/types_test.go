package arrowschema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/doctable"
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

// TestStoredTypesRoundTrip lands every accepted sample in a table (converted at the edge, as
// streaming does), appends it three times, and reads it back equal before and after compaction
// and from a reopened handle. It covers the Parquet paths a type can break: the column-parallel
// writer, pqarrow's writer, the Parquet shape of fixed-size lists, and ConformBatch on reads.
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
	rows := doctable.Rows(t, "../../docs/protocol.md", "## Arrow types")
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

// TestStoredSchemaForKeepsTableTypes: a write into a table keeps a column of a type the table
// already holds as it arrives (a table created while that type was stored unconverted keeps
// taking writes of it); every other column gets its stored type, and a new table gets them all.
func TestStoredSchemaForKeepsTableTypes(t *testing.T) {
	ns := &arrow.TimestampType{Unit: arrow.Nanosecond}
	us := &arrow.TimestampType{Unit: arrow.Microsecond}
	in := arrow.NewSchema([]arrow.Field{
		{Name: "ts", Type: ns},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint32},
	}, nil)
	legacy := arrow.NewSchema([]arrow.Field{{Name: "ts", Type: ns}, {Name: "u", Type: arrow.PrimitiveTypes.Int64}}, nil)
	got, err := StoredSchemaFor(legacy, in)
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(got.Field(0).Type, ns) || !arrow.TypeEqual(got.Field(1).Type, arrow.PrimitiveTypes.Int64) {
		t.Fatalf("StoredSchemaFor(legacy table) = %s; want ts kept as timestamp[ns], u stored as int64", got)
	}
	fresh, err := StoredSchemaFor(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(fresh.Field(0).Type, us) {
		t.Fatalf("StoredSchemaFor(new table) = %s; want ts stored as timestamp[us]", fresh)
	}
	current := arrow.NewSchema([]arrow.Field{{Name: "ts", Type: us}}, nil)
	if got, err := StoredSchemaFor(current, in); err != nil || !arrow.TypeEqual(got.Field(0).Type, us) {
		t.Fatalf("StoredSchemaFor(table of timestamp[us]) = %v, %v; want ts converted to timestamp[us]", got, err)
	}
}
