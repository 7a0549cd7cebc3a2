package expr

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// ErrInvalidPredicate: a predicate is malformed or does not fit the table's schema (an unknown
// op, a literal of the wrong type, an empty "in").
var ErrInvalidPredicate = errors.New("invalid predicate")

// PredicateOp is the operator of one Predicate node.
type PredicateOp string

// The operators of the predicate model. They are named Pred*, apart from the Op* Operations
// that name transactions.
const (
	PredEq        PredicateOp = "="
	PredNe        PredicateOp = "!="
	PredLt        PredicateOp = "<"
	PredLe        PredicateOp = "<="
	PredGt        PredicateOp = ">"
	PredGe        PredicateOp = ">="
	PredIn        PredicateOp = "in"
	PredIsNull    PredicateOp = "is_null"
	PredIsNotNull PredicateOp = "is_not_null"
	PredAnd       PredicateOp = "and"
	PredOr        PredicateOp = "or"
	PredNot       PredicateOp = "not"
)

// Predicate is a boolean expression over a table's columns: the row filter of Delete and Update.
// It is a plain tree with a JSON encoding, so it can travel in a request unchanged:
//
//	{"op": "and", "args": [
//	    {"op": ">=", "column": "ts", "value": "2024-01-01T00:00:00Z"},
//	    {"op": "or", "args": [
//	        {"op": "in", "column": "country", "values": ["DE", "FR"]},
//	        {"op": "is_null", "column": "country"}]}]}
//
// Nodes:
//   - comparisons "=", "!=", "<", "<=", ">", ">=": Column compared with the literal Value;
//   - "in": Column equals one of Values;
//   - "is_null", "is_not_null": Column's validity;
//   - "and", "or" (one or more Args), "not" (exactly one Arg).
//
// Literals are JSON scalars (Go: integers, floats, strings, bools, time.Time). They must fit the
// column's type: integer columns take whole numbers within the range of their type, read exactly
// from the literal's digits (never rounded through a float64), decimal128 columns any number,
// compared exactly at the column's scale (decimal.go), float columns any number, string and
// binary columns strings, bool columns booleans, timestamp and date columns an integer in the
// column's unit (days for date32, milliseconds for date64) or an RFC 3339 time (a date
// "2006-01-02" for date columns). A null literal is only allowed in an "in" list; compare with
// null through "is_null".
//
// Evaluation follows SQL's three-valued logic: a comparison with a null column value is unknown,
// "and"/"or"/"not" combine unknowns the SQL way (false AND unknown = false, true OR unknown = true,
// NOT unknown = unknown), "x in (1, null)" is true when x = 1 and unknown otherwise. Only rows for
// which the whole predicate is true match; unknown never matches.
type Predicate struct {
	Op     PredicateOp  `json:"op"`
	Column string       `json:"column,omitempty"`
	Value  any          `json:"value,omitempty"`
	Values []any        `json:"values,omitempty"`
	Args   []*Predicate `json:"args,omitempty"`
}

// Eq returns column = v.
func Eq(column string, v any) *Predicate { return &Predicate{Op: PredEq, Column: column, Value: v} }

// Ne returns column != v.
func Ne(column string, v any) *Predicate { return &Predicate{Op: PredNe, Column: column, Value: v} }

// Lt returns column < v.
func Lt(column string, v any) *Predicate { return &Predicate{Op: PredLt, Column: column, Value: v} }

// Le returns column <= v.
func Le(column string, v any) *Predicate { return &Predicate{Op: PredLe, Column: column, Value: v} }

// Gt returns column > v.
func Gt(column string, v any) *Predicate { return &Predicate{Op: PredGt, Column: column, Value: v} }

// Ge returns column >= v.
func Ge(column string, v any) *Predicate { return &Predicate{Op: PredGe, Column: column, Value: v} }

// In returns column IN (vs...).
func In(column string, vs ...any) *Predicate {
	return &Predicate{Op: PredIn, Column: column, Values: vs}
}

// IsNull returns column IS NULL.
func IsNull(column string) *Predicate { return &Predicate{Op: PredIsNull, Column: column} }

// IsNotNull returns column IS NOT NULL.
func IsNotNull(column string) *Predicate { return &Predicate{Op: PredIsNotNull, Column: column} }

// And returns the conjunction of ps.
func And(ps ...*Predicate) *Predicate { return &Predicate{Op: PredAnd, Args: ps} }

// Or returns the disjunction of ps.
func Or(ps ...*Predicate) *Predicate { return &Predicate{Op: PredOr, Args: ps} }

// Not returns the negation of p.
func Not(p *Predicate) *Predicate { return &Predicate{Op: PredNot, Args: []*Predicate{p}} }

// ParsePredicate decodes a predicate from its JSON encoding. Numbers keep their exact value
// (an int64 literal beyond 2^53 survives the round trip).
// It refuses a predicate over the bounds (MaxPredicateJSONBytes, MaxPredicateDepth,
// MaxPredicateNodes) before decoding more of it than its nesting.
func ParsePredicate(b []byte) (*Predicate, error) {
	p, err := decodePredicate(b)
	if err != nil {
		if errors.Is(err, ErrInvalidPredicate) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: not a predicate: %v", ErrInvalidPredicate, err)
	}
	return p, nil
}

// UnmarshalJSON decodes numbers as json.Number so integer literals stay exact, and refuses
// unknown fields at every level (a misspelt "colum" must not widen what a delete removes) and a
// predicate over the bounds (ParsePredicate). The whole tree is decoded in one pass.
func (p *Predicate) UnmarshalJSON(b []byte) error {
	q, err := decodePredicate(b)
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

// Columns returns the names of the columns p reads, sorted, each once.
func (p *Predicate) Columns() []string {
	var out []string
	var walk func(q *Predicate)
	walk = func(q *Predicate) {
		if q == nil {
			return
		}
		if q.Column != "" {
			out = append(out, q.Column)
		}
		for _, a := range q.Args {
			walk(a)
		}
	}
	walk(p)
	slices.Sort(out)
	return slices.Compact(out)
}

// Validate checks that p is well formed, within MaxPredicateDepth and MaxPredicateNodes, and
// that every column and literal fits schema. Its errors wrap ErrInvalidPredicate.
func (p *Predicate) Validate(schema *arrow.Schema) error {
	if err := p.checkShape(); err != nil {
		return err
	}
	if _, err := p.bind(schema); err != nil {
		if errors.Is(err, ErrInvalidPredicate) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrInvalidPredicate, err)
	}
	return nil
}

// String renders p in a SQL-like form for messages and logs.
func (p *Predicate) String() string {
	if p == nil {
		return "<nil>"
	}
	switch p.Op {
	case PredAnd, PredOr:
		parts := make([]string, len(p.Args))
		for i, a := range p.Args {
			parts[i] = a.String()
			if a != nil && (a.Op == PredAnd || a.Op == PredOr) && a.Op != p.Op {
				parts[i] = "(" + parts[i] + ")"
			}
		}
		return strings.Join(parts, " "+strings.ToUpper(string(p.Op))+" ")
	case PredNot:
		if len(p.Args) == 1 {
			return "NOT (" + p.Args[0].String() + ")"
		}
	case PredIsNull:
		return p.Column + " IS NULL"
	case PredIsNotNull:
		return p.Column + " IS NOT NULL"
	case PredIn:
		parts := make([]string, len(p.Values))
		for i, v := range p.Values {
			parts[i] = literalString(v)
		}
		return p.Column + " IN (" + strings.Join(parts, ", ") + ")"
	case PredEq, PredNe, PredLt, PredLe, PredGt, PredGe:
		return p.Column + " " + string(p.Op) + " " + literalString(p.Value)
	}
	return fmt.Sprintf("<invalid predicate %q>", p.Op)
}

func literalString(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(x, "'", "''") + "'"
	case time.Time:
		return "'" + x.Format(time.RFC3339Nano) + "'"
	default:
		return fmt.Sprint(x)
	}
}

// tri is a three-valued truth value.
type tri uint8

const (
	triFalse tri = iota
	triTrue
	triNull
)

// evaluator computes a predicate over the rows of a batch whose schema it was bound to.
type evaluator interface {
	eval(rec arrow.RecordBatch, out []tri) error
}

// Match evaluates p over rec and returns, per row, whether p is true. rec must hold every column
// p reads (it may hold more).
func (p *Predicate) Match(rec arrow.RecordBatch) ([]bool, error) {
	ev, err := p.bind(rec.Schema())
	if err != nil {
		return nil, err
	}
	return matchRows(ev, rec)
}

// Bound is a predicate bound to one schema (Predicate.Bind): it evaluates batches of that schema
// without resolving columns and literals again.
type Bound struct {
	pred *Predicate
	ev   evaluator
}

// Bind resolves p's columns and literals against schema. Its error says which node does not fit
// schema, or that p passes MaxPredicateDepth or MaxPredicateNodes; Validate is the check that
// wraps ErrInvalidPredicate.
func (p *Predicate) Bind(schema *arrow.Schema) (*Bound, error) {
	if err := p.checkShape(); err != nil {
		return nil, err
	}
	ev, err := p.bind(schema)
	if err != nil {
		return nil, err
	}
	return &Bound{pred: p, ev: ev}, nil
}

// Match returns, per row of rec (a batch of the bound schema), whether the predicate is true.
func (b *Bound) Match(rec arrow.RecordBatch) ([]bool, error) { return matchRows(b.ev, rec) }

func matchRows(ev evaluator, rec arrow.RecordBatch) ([]bool, error) {
	t := make([]tri, rec.NumRows())
	if err := ev.eval(rec, t); err != nil {
		return nil, err
	}
	out := make([]bool, len(t))
	for i, v := range t {
		out[i] = v == triTrue
	}
	return out, nil
}

// bind resolves columns and literals against schema and returns an evaluator for batches of it.
func (p *Predicate) bind(schema *arrow.Schema) (evaluator, error) {
	if p == nil {
		return nil, fmt.Errorf("predicate: missing expression")
	}
	switch p.Op {
	case PredAnd, PredOr:
		if len(p.Args) == 0 {
			return nil, fmt.Errorf("predicate: %q needs at least one argument", p.Op)
		}
		evs := make([]evaluator, len(p.Args))
		for i, a := range p.Args {
			ev, err := a.bind(schema)
			if err != nil {
				return nil, err
			}
			evs[i] = ev
		}
		return &logicalEval{and: p.Op == PredAnd, args: evs}, nil
	case PredNot:
		if len(p.Args) != 1 {
			return nil, fmt.Errorf("predicate: \"not\" needs exactly one argument, got %d", len(p.Args))
		}
		ev, err := p.Args[0].bind(schema)
		if err != nil {
			return nil, err
		}
		return notEval{ev}, nil
	case PredIsNull, PredIsNotNull:
		col, _, err := bindColumn(schema, p)
		if err != nil {
			return nil, err
		}
		return nullEval{col: col, wantNull: p.Op == PredIsNull}, nil
	case PredEq, PredNe, PredLt, PredLe, PredGt, PredGe:
		col, f, err := bindColumn(schema, p)
		if err != nil {
			return nil, err
		}
		if p.Value == nil {
			return nil, fmt.Errorf("predicate %s: comparison with null is never true; use is_null / is_not_null", p)
		}
		k, err := kindOf(f)
		if err != nil {
			return nil, err
		}
		lit, err := convertLiteral(f, k, p.Value)
		if err != nil {
			return nil, fmt.Errorf("predicate %s: %w", p, err)
		}
		return &compareEval{col: col, kind: k, op: p.Op, lit: lit}, nil
	case PredIn:
		col, f, err := bindColumn(schema, p)
		if err != nil {
			return nil, err
		}
		if len(p.Values) == 0 {
			return nil, fmt.Errorf("predicate %s: \"in\" needs at least one value", p)
		}
		k, err := kindOf(f)
		if err != nil {
			return nil, err
		}
		ev := &inEval{col: col, kind: k, set: make(map[literal]struct{}, len(p.Values))}
		for _, v := range p.Values {
			if v == nil {
				ev.hasNull = true
				continue
			}
			lit, err := convertLiteral(f, k, v)
			if err != nil {
				return nil, fmt.Errorf("predicate %s: %w", p, err)
			}
			ev.set[lit] = struct{}{}
		}
		return ev, nil
	case "":
		return nil, fmt.Errorf("predicate: missing \"op\"")
	default:
		return nil, fmt.Errorf("predicate: unknown op %q (use =, !=, <, <=, >, >=, in, is_null, is_not_null, and, or, not)", p.Op)
	}
}

func bindColumn(schema *arrow.Schema, p *Predicate) (int, arrow.Field, error) {
	if p.Column == "" {
		return 0, arrow.Field{}, fmt.Errorf("predicate: %q needs a column", p.Op)
	}
	idx := schema.FieldIndices(p.Column)
	if len(idx) == 0 {
		return 0, arrow.Field{}, fmt.Errorf("predicate %s: %w: no column %q in %s", p, arrowschema.ErrSchemaMismatch, p.Column, arrowschema.FieldList(schema))
	}
	return idx[0], schema.Field(idx[0]), nil
}

// valueKind is the comparison domain of a column type.
type valueKind uint8

const (
	kindInt valueKind = iota + 1 // signed integers, uint8-32, dates, times, timestamps, durations
	kindUint
	kindFloat
	kindString // strings and binaries
	kindBool
	kindDecimal // decimal128, compared exactly at the column's scale (decimal.go)
)

func kindOf(f arrow.Field) (valueKind, error) {
	switch f.Type.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32,
		arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.TIME32, arrow.TIME64, arrow.DURATION:
		return kindInt, nil
	case arrow.UINT64:
		return kindUint, nil
	case arrow.FLOAT32, arrow.FLOAT64:
		return kindFloat, nil
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		return kindString, nil
	case arrow.BOOL:
		return kindBool, nil
	case arrow.DECIMAL128:
		return kindDecimal, nil
	}
	return 0, fmt.Errorf("predicate: column %q has type %s, which predicates cannot compare", f.Name, f.Type)
}

// literal is a literal converted to its column's comparison domain; exactly one field is used.
type literal struct {
	i   int64
	u   uint64
	f   float64
	s   string
	b   bool
	dec decimalLiteral
}

func convertLiteral(f arrow.Field, k valueKind, v any) (literal, error) {
	bad := func(why string) (literal, error) {
		return literal{}, fmt.Errorf("literal %s does not fit column %q (%s): %s", literalString(v), f.Name, f.Type, why)
	}
	switch k {
	case kindInt:
		if s, ok := v.(string); ok {
			if i, ok, err := parseTemporal(f.Type, s); ok {
				if err != nil {
					return bad(err.Error())
				}
				return literal{i: i}, nil
			}
		}
		if t, ok := v.(time.Time); ok {
			if i, ok := temporalFromTime(f.Type, t); ok {
				return literal{i: i}, nil
			}
		}
		w, err := integerLiteral(f, v)
		if err != nil {
			return bad(err.Error())
		}
		return literal{i: w.int64Value()}, nil
	case kindUint:
		w, err := integerLiteral(f, v)
		if err != nil {
			return bad(err.Error())
		}
		return literal{u: w.mag}, nil
	case kindFloat:
		x, ok := toFloat64(v)
		if !ok {
			return bad("want a number")
		}
		return literal{f: x}, nil
	case kindString:
		switch x := v.(type) {
		case string:
			return literal{s: x}, nil
		case []byte:
			return literal{s: string(x)}, nil
		}
		return bad("want a string")
	case kindBool:
		if x, ok := v.(bool); ok {
			return literal{b: x}, nil
		}
		return bad("want true or false")
	case kindDecimal:
		d, err := decimalLiteralOf(f.Type.(*arrow.Decimal128Type), v)
		if err != nil {
			return bad(err.Error())
		}
		return literal{dec: d}, nil
	}
	return bad("unsupported column type")
}

// integerLiteral returns the exact value of v for integer column f: a whole number within the
// range of f's type (an out-of-range literal is refused, whatever its sign or f's width).
func integerLiteral(f arrow.Field, v any) (wholeNumber, error) {
	w, st := wholeNumberOf(v)
	lo, hi := integerRange(f.Type)
	switch {
	case st == numberMalformed:
		return w, fmt.Errorf("want an integer")
	case st == numberFractional:
		return w, fmt.Errorf("want an integer, not a fraction")
	case st == numberHuge || !w.inRange(lo, hi):
		return w, fmt.Errorf("out of the range of %s (%s..%s)", f.Type, lo, hi)
	}
	return w, nil
}

func toFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	w, st := wholeNumberOf(v)
	if st != numberWhole {
		return 0, false
	}
	if w.neg {
		return -float64(w.mag), true
	}
	return float64(w.mag), true
}

// parseTemporal parses a string literal for a date or timestamp column. ok is false when the
// column is not temporal (the string is then not a valid literal for it).
func parseTemporal(dt arrow.DataType, s string) (int64, bool, error) {
	switch dt.ID() {
	case arrow.DATE32, arrow.DATE64:
		t, err := time.Parse("2006-01-02", s)
		if err != nil {
			if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return 0, true, fmt.Errorf("want a date like 2006-01-02")
			}
		}
		i, _ := temporalFromTime(dt, t)
		return i, true, nil
	case arrow.TIMESTAMP:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, true, fmt.Errorf("want an RFC 3339 time")
		}
		i, _ := temporalFromTime(dt, t)
		return i, true, nil
	}
	return 0, false, nil
}

func temporalFromTime(dt arrow.DataType, t time.Time) (int64, bool) {
	switch dt.ID() {
	case arrow.DATE32:
		return int64(arrow.Date32FromTime(t)), true
	case arrow.DATE64:
		return int64(arrow.Date64FromTime(t)), true
	case arrow.TIMESTAMP:
		ts, err := arrow.TimestampFromTime(t, dt.(*arrow.TimestampType).Unit)
		return int64(ts), err == nil
	}
	return 0, false
}

// column accessors: the value of row i of arr in its comparison domain.

func intGetter(arr arrow.Array) (func(int) int64, error) {
	switch a := arr.(type) {
	case *array.Int8:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Int16:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Int32:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Int64:
		return a.Value, nil
	case *array.Uint8:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Uint16:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Uint32:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Date32:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Date64:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Timestamp:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Time32:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Time64:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Duration:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	}
	return nil, fmt.Errorf("predicate: unexpected array %s for an integer column", arr.DataType())
}

func stringGetter(arr arrow.Array) (func(int) string, error) {
	switch a := arr.(type) {
	case *array.String:
		return a.Value, nil
	case *array.LargeString:
		return a.Value, nil
	case *array.Binary:
		return a.ValueString, nil
	case *array.LargeBinary:
		return a.ValueString, nil
	}
	return nil, fmt.Errorf("predicate: unexpected array %s for a string column", arr.DataType())
}

func floatGetter(arr arrow.Array) (func(int) float64, error) {
	switch a := arr.(type) {
	case *array.Float32:
		return func(i int) float64 { return float64(a.Value(i)) }, nil
	case *array.Float64:
		return a.Value, nil
	}
	return nil, fmt.Errorf("predicate: unexpected array %s for a float column", arr.DataType())
}

// literalGetter returns row i of arr as a literal of kind k (for "in" lookups).
func literalGetter(arr arrow.Array, k valueKind) (func(int) literal, error) {
	switch k {
	case kindInt:
		g, err := intGetter(arr)
		if err != nil {
			return nil, err
		}
		return func(i int) literal { return literal{i: g(i)} }, nil
	case kindUint:
		a, ok := arr.(*array.Uint64)
		if !ok {
			return nil, fmt.Errorf("predicate: unexpected array %s for a uint64 column", arr.DataType())
		}
		return func(i int) literal { return literal{u: a.Value(i)} }, nil
	case kindFloat:
		g, err := floatGetter(arr)
		if err != nil {
			return nil, err
		}
		return func(i int) literal { return literal{f: g(i)} }, nil
	case kindString:
		g, err := stringGetter(arr)
		if err != nil {
			return nil, err
		}
		return func(i int) literal { return literal{s: g(i)} }, nil
	case kindBool:
		a, ok := arr.(*array.Boolean)
		if !ok {
			return nil, fmt.Errorf("predicate: unexpected array %s for a bool column", arr.DataType())
		}
		return func(i int) literal { return literal{b: a.Value(i)} }, nil
	case kindDecimal:
		a, ok := arr.(*array.Decimal128)
		if !ok {
			return nil, fmt.Errorf("predicate: unexpected array %s for a decimal128 column", arr.DataType())
		}
		return func(i int) literal { return literal{dec: decimalLiteral{d: a.Value(i)}} }, nil
	}
	return nil, fmt.Errorf("predicate: unsupported column kind")
}

type compareEval struct {
	col  int
	kind valueKind
	op   PredicateOp
	lit  literal
}

func (e *compareEval) eval(rec arrow.RecordBatch, out []tri) error {
	arr := rec.Column(e.col)
	switch e.kind {
	case kindInt:
		g, err := intGetter(arr)
		if err != nil {
			return err
		}
		compareRows(arr, g, e.lit.i, e.op, out)
	case kindUint:
		a, ok := arr.(*array.Uint64)
		if !ok {
			return fmt.Errorf("predicate: unexpected array %s for a uint64 column", arr.DataType())
		}
		compareRows(arr, a.Value, e.lit.u, e.op, out)
	case kindFloat:
		g, err := floatGetter(arr)
		if err != nil {
			return err
		}
		compareRows(arr, g, e.lit.f, e.op, out)
	case kindString:
		g, err := stringGetter(arr)
		if err != nil {
			return err
		}
		compareRows(arr, g, e.lit.s, e.op, out)
	case kindBool:
		a, ok := arr.(*array.Boolean)
		if !ok {
			return fmt.Errorf("predicate: unexpected array %s for a bool column", arr.DataType())
		}
		b2i := func(b bool) int {
			if b {
				return 1
			}
			return 0
		}
		compareRows(arr, func(i int) int { return b2i(a.Value(i)) }, b2i(e.lit.b), e.op, out)
	case kindDecimal:
		a, ok := arr.(*array.Decimal128)
		if !ok {
			return fmt.Errorf("predicate: unexpected array %s for a decimal128 column", arr.DataType())
		}
		compareRowsBy(arr, func(i int) int { return compareDecimal(a.Value(i), e.lit.dec) }, e.op, out)
	}
	return nil
}

func compareRows[V cmp.Ordered](arr arrow.Array, get func(int) V, lit V, op PredicateOp, out []tri) {
	compareRowsBy(arr, func(i int) int { return cmp.Compare(get(i), lit) }, op, out)
}

// compareRowsBy sets out[i] to op applied to compare(i), row i's value compared with the
// literal (-1, 0, 1); unknown for a null row.
func compareRowsBy(arr arrow.Array, compare func(int) int, op PredicateOp, out []tri) {
	for i := range out {
		if arr.IsNull(i) {
			out[i] = triNull
			continue
		}
		c := compare(i)
		var ok bool
		switch op {
		case PredEq:
			ok = c == 0
		case PredNe:
			ok = c != 0
		case PredLt:
			ok = c < 0
		case PredLe:
			ok = c <= 0
		case PredGt:
			ok = c > 0
		case PredGe:
			ok = c >= 0
		}
		if ok {
			out[i] = triTrue
		} else {
			out[i] = triFalse
		}
	}
}

type inEval struct {
	col     int
	kind    valueKind
	set     map[literal]struct{}
	hasNull bool
}

func (e *inEval) eval(rec arrow.RecordBatch, out []tri) error {
	arr := rec.Column(e.col)
	get, err := literalGetter(arr, e.kind)
	if err != nil {
		return err
	}
	for i := range out {
		switch {
		case arr.IsNull(i):
			out[i] = triNull
		case has(e.set, get(i)):
			out[i] = triTrue
		case e.hasNull:
			out[i] = triNull // x IN (..., NULL) with no match is unknown
		default:
			out[i] = triFalse
		}
	}
	return nil
}

func has(set map[literal]struct{}, l literal) bool {
	_, ok := set[l]
	return ok
}

type nullEval struct {
	col      int
	wantNull bool
}

func (e nullEval) eval(rec arrow.RecordBatch, out []tri) error {
	arr := rec.Column(e.col)
	for i := range out {
		if arr.IsNull(i) == e.wantNull {
			out[i] = triTrue
		} else {
			out[i] = triFalse
		}
	}
	return nil
}

type notEval struct{ arg evaluator }

func (e notEval) eval(rec arrow.RecordBatch, out []tri) error {
	if err := e.arg.eval(rec, out); err != nil {
		return err
	}
	for i, v := range out {
		switch v {
		case triTrue:
			out[i] = triFalse
		case triFalse:
			out[i] = triTrue
		}
	}
	return nil
}

type logicalEval struct {
	and  bool
	args []evaluator
}

func (e *logicalEval) eval(rec arrow.RecordBatch, out []tri) error {
	if err := e.args[0].eval(rec, out); err != nil {
		return err
	}
	tmp := make([]tri, len(out))
	// dominant is the value that decides the result on its own: false for AND, true for OR.
	dominant := triTrue
	if e.and {
		dominant = triFalse
	}
	for _, a := range e.args[1:] {
		if err := a.eval(rec, tmp); err != nil {
			return err
		}
		for i, v := range tmp {
			switch {
			case out[i] == dominant:
			case v == dominant:
				out[i] = dominant
			case v == triNull:
				out[i] = triNull
			}
		}
	}
	return nil
}
