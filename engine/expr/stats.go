package expr

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Column statistics of a data file: the range of each top-level column a predicate can compare,
// recorded by the writer from the values it encodes and kept in the table's manifest, so a read
// with a filter drops a whole file before opening it (MayMatchStats). They describe every row the
// file holds, deleted ones included, so they only ever widen what may match.
//
// Values are ordered as predicates compare them (compareLit): integers, dates, times, timestamps
// and durations as their stored integers in the column's unit, floats with NaN below every other
// value (cmp.Compare), strings and binaries by bytes, false before true, decimals by value.

// maxStatBytes bounds a string column's recorded bounds: a longer minimum is cut (a prefix orders
// at or below the value), a longer maximum is cut and its last byte raised by one (ordering above
// the value); a maximum of nothing but 0xff bytes past the bound has no upper bound.
const maxStatBytes = 64

// maxStatsColumns bounds the columns a file keeps ranges of: the first ones of its schema, so a
// wide table's manifest does not grow with every column of every fragment.
const maxStatsColumns = 32

// ColumnStats is one column's range over the rows of one data file.
type ColumnStats struct {
	// Type is the column's Arrow type when the file was written: a range is used only while the
	// table's column still compares the same way (statsUsable).
	Type string `json:"type"`
	// Nulls counts the null values.
	Nulls int64 `json:"nulls"`
	// Min and Max are the smallest and largest non-null values (encodeStat); absent when every
	// value is null, and Max also when a long string has no cut upper bound.
	Min *string `json:"min,omitempty"`
	Max *string `json:"max,omitempty"`
}

// StatsBuilder accumulates the ColumnStats of the comparable top-level columns of the batches of
// one schema. The zero value is not usable: call NewStatsBuilder.
type StatsBuilder struct {
	cols []statsColumn
}

type statsColumn struct {
	index  int
	field  arrow.Field
	kind   valueKind
	nulls  int64
	lo, hi literal
	seen   bool
}

// NewStatsBuilder returns a builder for batches of schema sc: the first maxStatsColumns columns
// a predicate can compare.
func NewStatsBuilder(sc *arrow.Schema) *StatsBuilder {
	b := &StatsBuilder{}
	for i, f := range sc.Fields() {
		if k, err := kindOf(f); err == nil && len(b.cols) < maxStatsColumns {
			b.cols = append(b.cols, statsColumn{index: i, field: f, kind: k})
		}
	}
	return b
}

// Add folds the values of rec (a batch of the builder's schema) into the ranges.
func (b *StatsBuilder) Add(rec arrow.RecordBatch) error {
	for i := range b.cols {
		c := &b.cols[i]
		arr := rec.Column(c.index)
		c.nulls += int64(arr.NullN())
		if arr.NullN() == arr.Len() {
			continue
		}
		if c.kind == kindInt { // the common case, without a literal per value
			get, err := intGetter(arr)
			if err != nil {
				return err
			}
			lo, hi, seen := c.lo.i, c.hi.i, c.seen
			for j := range arr.Len() {
				if arr.IsNull(j) {
					continue
				}
				v := get(j)
				if !seen {
					lo, hi, seen = v, v, true
				}
				lo, hi = min(lo, v), max(hi, v)
			}
			c.lo.i, c.hi.i, c.seen = lo, hi, seen
			continue
		}
		get, err := literalGetter(arr, c.kind)
		if err != nil {
			return err
		}
		for j := range arr.Len() {
			if arr.IsNull(j) {
				continue
			}
			v := get(j)
			if !c.seen {
				c.lo, c.hi, c.seen = v, v, true
				continue
			}
			if compareLit(c.kind, v, c.lo) < 0 {
				c.lo = v
			}
			if compareLit(c.kind, v, c.hi) > 0 {
				c.hi = v
			}
		}
	}
	return nil
}

// Stats returns the ranges of the batches added so far, by column name, and starts anew.
func (b *StatsBuilder) Stats() map[string]ColumnStats {
	out := make(map[string]ColumnStats, len(b.cols))
	for i := range b.cols {
		c := &b.cols[i]
		st := ColumnStats{Type: c.field.Type.String(), Nulls: c.nulls}
		if c.seen {
			lo := encodeStat(c.kind, c.lo)
			st.Min = &lo
			if hi, ok := upperStat(c.kind, c.hi); ok {
				st.Max = &hi
			}
		}
		out[c.field.Name] = st
		c.nulls, c.seen, c.lo, c.hi = 0, false, literal{}, literal{}
	}
	return out
}

// upperStat encodes v as an upper bound: a string longer than maxStatBytes is cut and its last
// byte raised; false when no cut bound exists (every byte is 0xff).
func upperStat(k valueKind, v literal) (string, bool) {
	if k != kindString || len(v.s) <= maxStatBytes {
		return encodeStat(k, v), true
	}
	b := []byte(v.s[:maxStatBytes])
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0xff {
			b[i]++
			return encodeStat(k, literal{s: string(b[:i+1])}), true
		}
	}
	return "", false
}

// encodeStat writes v as the text a ColumnStats keeps: integers and decimals (unscaled) in
// decimal, floats in Go's shortest form (NaN and ±Inf spelled out), strings and binaries in
// base64, booleans as true or false. A minimum string is cut to maxStatBytes.
func encodeStat(k valueKind, v literal) string {
	switch k {
	case kindInt:
		return strconv.FormatInt(v.i, 10)
	case kindUint:
		return strconv.FormatUint(v.u, 10)
	case kindFloat:
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	case kindString:
		s := v.s
		if len(s) > maxStatBytes {
			s = s[:maxStatBytes]
		}
		return base64.StdEncoding.EncodeToString([]byte(s))
	case kindBool:
		return strconv.FormatBool(v.b)
	case kindDecimal:
		return v.dec.d.BigInt().String()
	}
	return ""
}

// decodeStat reads what encodeStat wrote.
func decodeStat(k valueKind, s string) (literal, error) {
	switch k {
	case kindInt:
		i, err := strconv.ParseInt(s, 10, 64)
		return literal{i: i}, err
	case kindUint:
		u, err := strconv.ParseUint(s, 10, 64)
		return literal{u: u}, err
	case kindFloat:
		f, err := strconv.ParseFloat(s, 64)
		return literal{f: f}, err
	case kindString:
		b, err := base64.StdEncoding.DecodeString(s)
		return literal{s: string(b)}, err
	case kindBool:
		b, err := strconv.ParseBool(s)
		return literal{b: b}, err
	case kindDecimal:
		var n big.Int
		if _, ok := n.SetString(s, 10); !ok || n.BitLen() > 127 {
			return literal{}, fmt.Errorf("bad decimal statistic %q", s)
		}
		return literal{dec: decimalLiteral{d: decimal128.FromBigInt(&n)}}, nil
	}
	return literal{}, fmt.Errorf("no statistics for this column kind")
}

// plainIntegers are the integer types whose values compare alike at any width: a range recorded
// under one holds under another (a widened column).
var plainIntegers = map[string]bool{
	"int8": true, "int16": true, "int32": true, "int64": true, "uint8": true, "uint16": true, "uint32": true,
}

// statsUsable reports whether a range recorded for a column of type written is valid for column
// f of the table now: the same type, or a widening that keeps every value and its order
// (integers, floats, strings and binaries of another width).
func statsUsable(written string, f arrow.Field, k valueKind) bool {
	now := f.Type.String()
	if written == now {
		return true
	}
	switch k {
	case kindInt:
		return plainIntegers[written] && plainIntegers[now]
	case kindFloat:
		return written == "float32" || written == "float64"
	case kindString:
		return written == "utf8" || written == "large_utf8" || written == "binary" || written == "large_binary"
	}
	return false
}

// MayMatchStats reports whether pred can be true for some row of a data file of rows rows whose
// column ranges are stats, in a table of schema sc: false only when the ranges prove it cannot.
func MayMatchStats(pred *Predicate, rows int64, stats map[string]ColumnStats, sc *arrow.Schema) bool {
	if pred == nil || len(stats) == 0 {
		return true
	}
	return mayMatch(pred, true, func(column string) (columnRange, bool) {
		st, ok := stats[column]
		if !ok {
			return columnRange{}, false
		}
		idx := sc.FieldIndices(column)
		if len(idx) != 1 {
			return columnRange{}, false
		}
		f := sc.Field(idx[0])
		r := columnRange{rows: rows, nulls: st.Nulls, hasNulls: true, field: f}
		k, err := kindOf(f)
		if err != nil || !statsUsable(st.Type, f, k) {
			return r, true // the null count holds whatever the type
		}
		r.kind = k
		if st.Min != nil {
			lo, err := decodeStat(k, *st.Min)
			if err != nil {
				return r, true
			}
			r.lo, r.hasLo = lo, true
		}
		if st.Max != nil {
			hi, err := decodeStat(k, *st.Max)
			if err != nil {
				return r, true
			}
			r.hi, r.hasHi = hi, true
		}
		return r, true
	})
}

// compareLit compares two literals of kind k in the order predicates compare values.
func compareLit(k valueKind, a, b literal) int {
	switch k {
	case kindInt:
		return cmp.Compare(a.i, b.i)
	case kindUint:
		return cmp.Compare(a.u, b.u)
	case kindFloat:
		return cmp.Compare(a.f, b.f)
	case kindString:
		return strings.Compare(a.s, b.s)
	case kindBool:
		return cmp.Compare(boolRank(a.b), boolRank(b.b))
	case kindDecimal:
		if c := a.dec.d.Cmp(b.dec.d); c != 0 {
			return c
		}
		switch {
		case a.dec.between == b.dec.between:
			return 0
		case a.dec.between:
			return 1
		}
		return -1
	}
	return 0
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
