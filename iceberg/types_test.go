package iceberg

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/doctable"
)

// TestEveryStoredTypePublishes: every sample type the type policy does not refuse is stored as a
// type the publisher converts to Iceberg, and to the Iceberg type arrowschema.IcebergType names,
// so no table's publish can fail on its types.
func TestEveryStoredTypePublishes(t *testing.T) {
	samples := typetest.Nested()
	for _, s := range typetest.ByID() {
		samples = append(samples, s)
	}
	samples = append(samples,
		typetest.Sample{Name: "timestamp_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}},
		typetest.Sample{Name: "timestamp_us_utc", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		typetest.Sample{Name: "time32_ms", Type: arrow.FixedWidthTypes.Time32ms},
		typetest.Sample{Name: "decimal256_38", Type: &arrow.Decimal256Type{Precision: 38, Scale: 10}})
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			st, err := arrowschema.StoredType("c", s.Type)
			want := arrowschema.IcebergType(s.Type.ID())
			if err != nil {
				if want != "-" && s.Type.ID() != arrow.STRUCT && s.Type.ID() != arrow.LIST && s.Type.ID() != arrow.DECIMAL256 {
					t.Fatalf("%s is refused (%v) but has Iceberg type %q", s.Type, err, want)
				}
				return
			}
			sc, err := icebergSchema(arrow.NewSchema([]arrow.Field{{Name: "c", Type: st, Nullable: true}}, nil))
			if err != nil {
				t.Fatalf("%s is stored as %s, which does not publish: %v", s.Type, st, err)
			}
			got := sc.Field(0).Type.String()
			base := got
			if i := strings.IndexAny(base, "<[("); i >= 0 {
				base = base[:i]
			}
			switch s.Type.ID() {
			case arrow.DICTIONARY, arrow.RUN_END_ENCODED:
				want = arrowschema.IcebergType(st.ID())
			case arrow.EXTENSION:
				if st.ID() != arrow.EXTENSION {
					want = arrowschema.IcebergType(st.ID())
				}
			}
			if !strings.Contains(want, base) {
				t.Fatalf("%s (stored as %s) publishes as %s; the type table says %q", s.Type, st, got, want)
			}
		})
	}
}

// TestIcebergDocListsTypes: docs/iceberg.md's Types section lists, for every Arrow type id, the
// policy's decision and the Iceberg type, exactly as arrowschema holds them.
func TestIcebergDocListsTypes(t *testing.T) {
	rows := doctable.Rows(t, "../docs/iceberg.md", "## Types")
	var table strings.Builder
	for _, r := range arrowschema.TypeRules() {
		row := fmt.Sprintf("| `%s` | %s | %s |", r.ID, r.Decision, arrowschema.IcebergType(r.ID))
		fmt.Fprintln(&table, row)
		if !rows[row] {
			t.Errorf("docs/iceberg.md Types lacks the row %s", row)
		}
		delete(rows, row)
	}
	for row := range rows {
		t.Errorf("docs/iceberg.md Types has a row the type table does not: %s", row)
	}
	if t.Failed() {
		t.Logf("the table:\n| Arrow type | stored | Iceberg type |\n|---|---|---|\n%s", table.String())
	}
}

// TestUnpublishableNamesColumn: a schema holding a type with no Iceberg equivalent (one a table
// written before the type policy may hold) is ErrUnpublishable naming the column.
func TestUnpublishableNamesColumn(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "d", Type: arrow.FixedWidthTypes.Duration_s, Nullable: true},
	}, nil)
	for _, dt := range []arrow.DataType{arrow.FixedWidthTypes.Duration_s, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64, &arrow.TimestampType{Unit: arrow.Nanosecond}} {
		sc := arrow.NewSchema([]arrow.Field{sc.Field(0), {Name: "d", Type: dt, Nullable: true}}, nil)
		_, err := icebergSchema(sc)
		if !errors.Is(err, ErrUnpublishable) || !strings.Contains(err.Error(), `column "d"`) {
			t.Errorf("icebergSchema(%s) = %v; want ErrUnpublishable naming column d", dt, err)
		}
	}
}
