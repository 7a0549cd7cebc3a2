package arrowschema

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestParseTypeName holds the names create_table accepts against the types they mean, and the
// refusals of malformed names.
func TestParseTypeName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want arrow.DataType // nil: refused
		err  string
	}{
		{name: "int64", want: arrow.PrimitiveTypes.Int64},
		{name: " Boolean ", want: arrow.FixedWidthTypes.Boolean},
		{name: "double", want: arrow.PrimitiveTypes.Float64},
		{name: "float", want: arrow.PrimitiveTypes.Float32},
		{name: "STRING", want: arrow.BinaryTypes.String},
		{name: "large_utf8", want: arrow.BinaryTypes.LargeString},
		{name: "date64", want: arrow.FixedWidthTypes.Date64},
		{name: "timestamp[us]", want: &arrow.TimestampType{Unit: arrow.Microsecond}},
		{name: "timestamp[ns, tz=utc]", want: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{name: "timestamp[ms, tz=europe/paris]", want: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "europe/paris"}},
		{name: "timestamp[s,tz=UTC]", want: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}},
		{name: "timestamp[us, UTC]", err: `bad timestamp type "timestamp[us, UTC]"`},
		{name: "timestamp[m]", err: `bad timestamp unit in "timestamp[m]"`},
		{name: "timestamp", err: `unknown Arrow type "timestamp"`},
		{name: "decimal128(10, 2)", err: `unknown Arrow type "decimal128(10, 2)"`},
		{name: "", err: `unknown Arrow type ""`},
	} {
		got, err := ParseTypeName(tc.name)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTypeName(%q) = %v, %v; want an error containing %q", tc.name, got, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParseTypeName(%q): %v", tc.name, err)
		case !arrow.TypeEqual(got, tc.want):
			t.Errorf("ParseTypeName(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestTypeNamesInTypeTable checks every accepted name against the type table: its type has a
// rule, and the name Arrow gives the type reads back as the same type, so a name and a type
// cannot drift apart.
func TestTypeNamesInTypeTable(t *testing.T) {
	for name, dt := range typeNames {
		if _, ok := typeRules[dt.ID()]; !ok {
			t.Errorf("type name %q: type %s has no rule in typeRules", name, dt)
		}
		back, err := ParseTypeName(dt.String())
		if err != nil || !arrow.TypeEqual(back, dt) {
			t.Errorf("type name %q: Arrow's name %q of its type reads as %v, %v", name, dt.String(), back, err)
		}
	}
	for unit := range timestampUnits {
		dt := &arrow.TimestampType{Unit: timestampUnits[unit], TimeZone: "UTC"}
		back, err := ParseTypeName(dt.String())
		if err != nil || !arrow.TypeEqual(back, dt) {
			t.Errorf("timestamp unit %q: Arrow's name %q reads as %v, %v", unit, dt.String(), back, err)
		}
	}
}
