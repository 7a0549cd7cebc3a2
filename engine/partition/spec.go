// Package partition is the vocabulary of partitioned tables: a table's partition spec (Iceberg's
// model: a list of source columns each with a transform), its check against the table's Arrow
// schema, and the partition value of each row, computed with Iceberg's exact semantics so that a
// fragment's partition tuple is the one an Iceberg reader computes from its rows.
//
// A Spec is parsed from JSON (ParseSpec) and bound to a schema (Spec.Bind), which checks it; the
// Bound spec computes the partition tuple of a row (Bound.Tuple) and groups a batch's rows by
// their tuple (Bound.Group). Tuples are stored per fragment in the table's manifest.
package partition

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// ErrInvalidSpec: a partition spec that is malformed or does not fit the table's schema. A
// *SpecError wraps it.
var ErrInvalidSpec = errors.New("invalid partition spec")

// SpecError is a refused partition spec field: the column it names and why. It wraps
// ErrInvalidSpec.
type SpecError struct {
	Column string // "" when the field names no column
	Reason string
}

func (e *SpecError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%v: %s", ErrInvalidSpec, e.Reason)
	}
	return fmt.Sprintf("%v: column %q: %s", ErrInvalidSpec, e.Column, e.Reason)
}

func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

func specError(column, format string, args ...any) error {
	return &SpecError{Column: column, Reason: fmt.Sprintf(format, args...)}
}

// NewField returns the field of source column `column` with the transform Iceberg writes as
// transform ("" is identity), or a *SpecError naming the column.
func NewField(column, transform string) (Field, error) {
	if column == "" {
		return Field{}, specError("", "a partition field needs a column")
	}
	t, err := ParseTransform(transform)
	if err != nil {
		return Field{}, specError(column, "%v", err)
	}
	return Field{Column: column, Transform: t}, nil
}

// Field is one field of a partition spec: a top-level source column and the transform that maps
// its values to partition values. JSON: {"column": "ts", "transform": "day"}; an omitted
// transform is identity.
type Field struct {
	Column    string    `json:"column"`
	Transform Transform `json:"transform"`
}

// Spec is a table's partition spec: its fields in order. A nil or empty Spec is an unpartitioned
// table. JSON: [{"column": "ts", "transform": "day"}, {"column": "id", "transform": "bucket[16]"}].
type Spec []Field

// ParseSpec decodes a spec from its JSON form, refusing unknown keys and unknown transforms. It
// does not check the spec against a schema: Bind does.
func ParseSpec(data []byte) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, specError("", "%v", err)
	}
	if dec.More() {
		return nil, specError("", "trailing data after the spec")
	}
	return s, nil
}

// String returns the spec's JSON form.
func (s Spec) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Columns returns the spec's source columns, in field order.
func (s Spec) Columns() []string {
	out := make([]string, len(s))
	for i, f := range s {
		out[i] = f.Column
	}
	return out
}

// Equal reports whether s and o are the same spec.
func (s Spec) Equal(o Spec) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// TransformKind names a transform.
type TransformKind string

// The transforms, spelled as Iceberg writes them (bucket and truncate take a parameter in
// brackets: bucket[16], truncate[4]).
const (
	Identity TransformKind = "identity"
	Year     TransformKind = "year"
	Month    TransformKind = "month"
	Day      TransformKind = "day"
	Hour     TransformKind = "hour"
	Bucket   TransformKind = "bucket"
	Truncate TransformKind = "truncate"
)

// Transform is a partition transform: its kind and, for bucket and truncate, its parameter (the
// number of buckets N, the width W). The zero Transform is identity. Its JSON form is Iceberg's
// string ("day", "bucket[16]").
type Transform struct {
	Kind  TransformKind
	Param int
}

// ParseTransform parses a transform as Iceberg writes it: identity, year, month, day, hour,
// bucket[N], truncate[W] (N and W positive). The empty string is identity.
func ParseTransform(s string) (Transform, error) {
	switch TransformKind(s) {
	case "", Identity:
		return Transform{Kind: Identity}, nil
	case Year, Month, Day, Hour:
		return Transform{Kind: TransformKind(s)}, nil
	}
	for _, k := range []TransformKind{Bucket, Truncate} {
		rest, ok := strings.CutPrefix(s, string(k)+"[")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(rest, "]")
		if !ok {
			break
		}
		n, err := strconv.Atoi(num)
		if err != nil || strconv.Itoa(n) != num {
			break
		}
		if n <= 0 || n > math.MaxInt32 {
			return Transform{}, fmt.Errorf("%s takes a parameter from 1 to %d, not %d", k, math.MaxInt32, n)
		}
		return Transform{Kind: k, Param: n}, nil
	}
	return Transform{}, fmt.Errorf("unknown transform %q (identity, year, month, day, hour, bucket[N], truncate[W])", s)
}

// String returns the transform as Iceberg writes it.
func (t Transform) String() string {
	switch t.Kind {
	case "":
		return string(Identity)
	case Bucket, Truncate:
		return fmt.Sprintf("%s[%d]", t.Kind, t.Param)
	}
	return string(t.Kind)
}

// MarshalJSON writes the transform's string.
func (t Transform) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON parses the transform's string (ParseTransform).
func (t *Transform) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a transform is a string: %v", err)
	}
	p, err := ParseTransform(s)
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// UnmarshalJSON decodes a field, naming its column in a transform error.
func (f *Field) UnmarshalJSON(b []byte) error {
	var raw struct {
		Column    *string          `json:"column"`
		Transform *json.RawMessage `json:"transform"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("a partition field is {\"column\": ..., \"transform\": ...}: %v", err)
	}
	if raw.Column == nil || *raw.Column == "" {
		return errors.New("a partition field needs a \"column\"")
	}
	*f = Field{Column: *raw.Column, Transform: Transform{Kind: Identity}}
	if raw.Transform != nil {
		if err := f.Transform.UnmarshalJSON(*raw.Transform); err != nil {
			return fmt.Errorf("column %q: %w", f.Column, err)
		}
	}
	return nil
}

// ResultType returns the Iceberg type of the transform's values for a source column of Iceberg
// type src (SourceType): the source type for identity and truncate, int for the others.
func (t Transform) ResultType(src string) string {
	switch t.Kind {
	case "", Identity, Truncate:
		return src
	}
	return "int"
}

// Monotonic reports whether the transform preserves order (a <= b implies t(a) <= t(b)), so a
// range of source values maps to a range of partition values. Bucket does not.
func (t Transform) Monotonic() bool { return t.Kind != Bucket }

// Bind checks the spec against schema sc and returns it bound to sc's columns. It refuses, with an
// error wrapping ErrInvalidSpec that names the column: an empty column name, a column sc lacks or
// that is not top-level, a transform that does not fit the column's type (SourceType), and a
// field whose column and transform repeat an earlier field's.
func (s Spec) Bind(sc *arrow.Schema) (*Bound, error) {
	b := &Bound{spec: s, fields: make([]boundField, len(s))}
	seen := make(map[Field]bool, len(s))
	for i, f := range s {
		if f.Transform.Kind == "" {
			f.Transform.Kind = Identity
		}
		if f.Column == "" {
			return nil, specError("", "field %d has no column", i)
		}
		if seen[f] {
			return nil, specError(f.Column, "%s appears twice", f.Transform)
		}
		seen[f] = true
		idx := sc.FieldIndices(f.Column)
		if len(idx) == 0 {
			hint := ""
			if strings.Contains(f.Column, ".") {
				hint = " (a partition source is a top-level column)"
			}
			return nil, specError(f.Column, "not in the table (columns: %s)%s", columnList(sc), hint)
		}
		if len(idx) > 1 {
			return nil, specError(f.Column, "names %d columns", len(idx))
		}
		dt := sc.Field(idx[0]).Type
		src, err := sourceOf(dt)
		if err != nil {
			return nil, specError(f.Column, "%v", err)
		}
		if err := fits(f.Transform, src); err != nil {
			return nil, specError(f.Column, "type %s: %v", src.iceberg, err)
		}
		b.fields[i] = boundField{Field: f, col: idx[0], src: src}
	}
	return b, nil
}

// Validate checks the spec against schema sc (Bind, without keeping the result).
func (s Spec) Validate(sc *arrow.Schema) error {
	_, err := s.Bind(sc)
	return err
}

// CheckSchemaChange checks that schema next, which follows a table's schema, still carries the
// spec: every source column is kept (a partition column cannot be dropped or renamed) and every
// transform still fits its column's type (a promotion such as int to long keeps it; Bind). The
// error wraps ErrInvalidSpec and names the column.
func (s Spec) CheckSchemaChange(next *arrow.Schema) error {
	for _, f := range s {
		if len(next.FieldIndices(f.Column)) == 0 {
			return specError(f.Column, "a partition source column cannot be dropped or renamed")
		}
	}
	return s.Validate(next)
}

func columnList(sc *arrow.Schema) string {
	names := make([]string, sc.NumFields())
	for i, f := range sc.Fields() {
		names[i] = strconv.Quote(f.Name)
	}
	return strings.Join(names, ", ")
}
