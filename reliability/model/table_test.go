package model

// The model: a plain in-memory table (rows as canonical values; a keyed table by primary key),
// and the predicates of the `delete` action evaluated on it with SQL's three-valued logic.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// column is one column of a modelled table.
type column struct {
	name     string
	typ      colType
	nullable bool
}

// row is one modelled row: column name to canonical value; a column it lacks is null.
type row map[string]string

// query is a streaming query writing a table: its next epoch and the last one it sent.
type query struct {
	next int64
	last *epoch // nil before the first epoch of this incarnation
}

// tableModel is the model of one table.
type tableModel struct {
	name    string
	exists  bool
	cols    []column
	keys    []string // primary-key columns; empty: no key
	shards  int      // MemWAL shards; 0: a direct-only table
	rows    []row    // without a key: every row; with one: one row per key (keyOf)
	queries map[string]*query
	nextCol int  // the number of the next column a schema merge adds
	indexed bool // create_index ran on this incarnation
	// feed is how far this incarnation's change feed has been replayed (nil: not yet).
	feed *feedCursor
}

func (m *tableModel) keyed() bool { return len(m.keys) > 0 }

// keyOf returns the primary key of r.
func (m *tableModel) keyOf(r row) string {
	parts := make([]string, len(m.keys))
	for i, k := range m.keys {
		parts[i] = r[k]
	}
	return strings.Join(parts, "\x1f")
}

// holds reports whether a column's stored type is or holds a type of id.
func (m *tableModel) holds(id arrow.Type) bool {
	var in func(dt arrow.DataType) bool
	in = func(dt arrow.DataType) bool {
		if dt.ID() == id {
			return true
		}
		if n, ok := dt.(arrow.NestedType); ok {
			for _, f := range n.Fields() {
				if in(f.Type) {
					return true
				}
			}
		}
		return false
	}
	for _, c := range m.cols {
		if in(c.typ.stored) {
			return true
		}
	}
	return false
}

// holdsNestedOfStruct reports whether a column holds, at any depth, a list whose elements or a
// map whose values are structs (knownIssues.icebergNullListOfStruct).
func (m *tableModel) holdsNestedOfStruct() bool {
	var in func(dt arrow.DataType) bool
	in = func(dt arrow.DataType) bool {
		switch t := dt.(type) {
		case *arrow.MapType:
			if t.ItemType().ID() == arrow.STRUCT {
				return true
			}
		case arrow.ListLikeType:
			if t.Elem().ID() == arrow.STRUCT {
				return true
			}
		}
		if n, ok := dt.(arrow.NestedType); ok {
			for _, f := range n.Fields() {
				if in(f.Type) {
					return true
				}
			}
		}
		return false
	}
	for _, c := range m.cols {
		if in(c.typ.stored) {
			return true
		}
	}
	return false
}

// apply changes the model as an acknowledged epoch of mode does.
func (m *tableModel) apply(mode string, rows []row) {
	switch {
	case mode == "complete":
		m.rows = slices.Clone(rows)
	case mode == "update" && m.keyed():
		at := map[string]int{}
		for i, r := range m.rows {
			at[m.keyOf(r)] = i
		}
		for _, r := range rows {
			if i, ok := at[m.keyOf(r)]; ok {
				m.rows[i] = r
			} else {
				at[m.keyOf(r)] = len(m.rows)
				m.rows = append(m.rows, r)
			}
		}
	default:
		m.rows = append(m.rows, rows...)
	}
}

// render returns r as one comparable string over the model's columns.
func (m *tableModel) render(r row) string {
	var b strings.Builder
	for i, c := range m.cols {
		if i > 0 {
			b.WriteString(" | ")
		}
		v, ok := r[c.name]
		if !ok {
			v = "null"
		}
		if len(v) > 80 {
			v = fmt.Sprintf("%s…(%d bytes)", v[:40], len(v))
		}
		b.WriteString(c.name + "=" + v)
	}
	return b.String()
}

// expected returns the model's rows rendered and sorted.
func (m *tableModel) expected() []string {
	out := make([]string, len(m.rows))
	for i, r := range m.rows {
		out[i] = m.render(r)
	}
	slices.Sort(out)
	return out
}

// tri is a value of SQL's three-valued logic.
type tri int8

const (
	falseV tri = iota
	trueV
	unknownV
)

// predicate is a `delete` predicate: its JSON and its evaluation on the model.
type predicate struct {
	json any
	eval func(row) tri
}

func (p predicate) String() string {
	b, _ := json.Marshal(p.json)
	return string(b)
}

// randomPredicate draws a predicate over m's top-level columns: comparisons and `in` on integer
// and string columns with values the table holds, is_null/is_not_null on any nullable column,
// and and/or/not of those.
func randomPredicate(r *rand.Rand, m *tableModel, depth int) predicate {
	if depth > 0 && r.IntN(3) == 0 {
		n := 1 + r.IntN(3)
		args := make([]predicate, n)
		js := make([]any, n)
		for i := range args {
			args[i] = randomPredicate(r, m, depth-1)
			js[i] = args[i].json
		}
		switch r.IntN(3) {
		case 0:
			return predicate{json: map[string]any{"op": "and", "args": js}, eval: func(rw row) tri {
				out := trueV
				for _, a := range args {
					switch a.eval(rw) {
					case falseV:
						return falseV
					case unknownV:
						out = unknownV
					}
				}
				return out
			}}
		case 1:
			return predicate{json: map[string]any{"op": "or", "args": js}, eval: func(rw row) tri {
				out := falseV
				for _, a := range args {
					switch a.eval(rw) {
					case trueV:
						return trueV
					case unknownV:
						out = unknownV
					}
				}
				return out
			}}
		default:
			a := args[0]
			return predicate{json: map[string]any{"op": "not", "args": js[:1]}, eval: func(rw row) tri {
				switch a.eval(rw) {
				case trueV:
					return falseV
				case falseV:
					return trueV
				}
				return unknownV
			}}
		}
	}
	var nullables, comparable []column
	for _, c := range m.cols {
		if c.nullable {
			nullables = append(nullables, c)
		}
		if c.typ.integer || c.typ.stringy {
			comparable = append(comparable, c)
		}
	}
	if len(nullables) > 0 && r.IntN(4) == 0 {
		c := nullables[r.IntN(len(nullables))]
		op := []string{"is_null", "is_not_null"}[r.IntN(2)]
		return predicate{json: map[string]any{"op": op, "column": c.name}, eval: func(rw row) tri {
			isNull := rw[c.name] == "" || rw[c.name] == "null"
			if isNull == (op == "is_null") {
				return trueV
			}
			return falseV
		}}
	}
	c := comparable[r.IntN(len(comparable))]
	// A literal: a value the table holds (so predicates match), or a fresh one.
	lit := func() json.RawMessage {
		if len(m.rows) > 0 && r.IntN(4) != 0 {
			if v := m.rows[r.IntN(len(m.rows))][c.name]; v != "" && v != "null" {
				return json.RawMessage(v)
			}
		}
		if c.typ.stringy {
			return json.RawMessage(stringValue(r))
		}
		if c.name == "id" {
			return json.RawMessage(fmt.Sprint(r.IntN(60)))
		}
		return json.RawMessage(c.typ.value(r))
	}
	if r.IntN(5) == 0 {
		n := 1 + r.IntN(4)
		vals := make([]any, n)
		lits := make([]json.RawMessage, n)
		for i := range vals {
			lits[i] = lit()
			vals[i] = lits[i]
		}
		return predicate{json: map[string]any{"op": "in", "column": c.name, "values": vals}, eval: func(rw row) tri {
			v := rw[c.name]
			if v == "" || v == "null" {
				return unknownV
			}
			for _, l := range lits {
				if compareJSON(c, v, string(l)) == 0 {
					return trueV
				}
			}
			return falseV
		}}
	}
	op := []string{"=", "!=", "<", "<=", ">", ">="}[r.IntN(6)]
	l := lit()
	return predicate{json: map[string]any{"op": op, "column": c.name, "value": l}, eval: func(rw row) tri {
		v := rw[c.name]
		if v == "" || v == "null" {
			return unknownV
		}
		cmp := compareJSON(c, v, string(l))
		var ok bool
		switch op {
		case "=":
			ok = cmp == 0
		case "!=":
			ok = cmp != 0
		case "<":
			ok = cmp < 0
		case "<=":
			ok = cmp <= 0
		case ">":
			ok = cmp > 0
		case ">=":
			ok = cmp >= 0
		}
		if ok {
			return trueV
		}
		return falseV
	}}
}

// compareJSON compares two canonical values of column c: integers as integers, strings by
// their bytes.
func compareJSON(c column, a, b string) int {
	if c.typ.stringy {
		var x, y string
		_ = json.Unmarshal([]byte(a), &x)
		_ = json.Unmarshal([]byte(b), &y)
		return strings.Compare(x, y)
	}
	x, y := parseInt(a), parseInt(b)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func parseInt(s string) int64 {
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var n json.Number
	if err := d.Decode(&n); err != nil {
		return 0
	}
	v, _ := n.Int64()
	return v
}
