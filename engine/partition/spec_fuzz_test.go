package partition

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// FuzzParseSpec: a partition spec from the network (create_table, DoPut's create object) parses
// and binds to a schema, or fails with ErrInvalidSpec; it never panics, and a spec that parses
// reads back the same from its JSON.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		`[{"column":"ts","transform":"day"}]`,
		`[{"column":"id","transform":"bucket[16]"},{"column":"name","transform":"truncate[4]"}]`,
		`[{"column":"d","transform":"year"},{"column":"price","transform":"truncate[10]"}]`,
		`[{"column":"id","transform":"bucket[0]"}]`,
		`[{"column":"id","transform":"bucket[2147483648]"}]`,
		`[{"column":"f","transform":"identity"}]`,
		`[{"column":"nope"}]`, `[{"column":"ts","transform":"hour","x":1}]`, `{}`, `[`, ``,
	} {
		f.Add([]byte(s))
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "price", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := ParseSpec(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %q does not wrap ErrInvalidSpec", err)
			}
			return
		}
		if _, err := spec.Bind(sc); err != nil && !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("bind error %q does not wrap ErrInvalidSpec", err)
		}
		enc, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSpec(enc)
		if err != nil || !again.Equal(spec) {
			t.Fatalf("spec %s changed in a round trip: %v, %v", enc, again, err)
		}
	})
}
