package expr

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// MayMatch reports whether pred can be want (true or false, never unknown) for some row of row
// group rg, judging by its column statistics: false only when the statistics prove it cannot.
// leaves maps a column name to its Parquet column index; fields holds the columns whose
// statistics may be compared (pruneKind).
func MayMatch(p *Predicate, rg *metadata.RowGroupMetaData, leaves map[string]int, fields map[string]arrow.Field, want bool) bool {
	return mayMatch(p, want, func(column string) (columnRange, bool) {
		st := columnStats(rg, leaves, column)
		if st == nil {
			return columnRange{}, false // no statistics: anything is possible
		}
		r := columnRange{rows: rg.NumRows(), nulls: st.NullCount(), hasNulls: st.HasNullCount()}
		if f, ok := fields[column]; ok {
			k := pruneKind(f)
			if lo, hi, ok := statRange(st, k); ok {
				r.field, r.kind, r.lo, r.hi, r.hasLo, r.hasHi = f, k, lo, hi, true, true
			}
		}
		return r, true
	})
}

// columnRange is what statistics say of one column over a set of rows: the null count (when
// hasNulls) and, when kind is set, bounds of the non-null values (hasLo, hasHi: each may be
// missing).
type columnRange struct {
	field        arrow.Field
	kind         valueKind
	rows, nulls  int64
	hasNulls     bool
	lo, hi       literal
	hasLo, hasHi bool
}

// mayMatch is MayMatch over any source of column ranges: rangeOf returns a column's range, or
// false when nothing is known of it.
func mayMatch(p *Predicate, want bool, rangeOf func(column string) (columnRange, bool)) bool {
	switch p.Op {
	case PredAnd, PredOr:
		// AND is true when every argument is, false when one is; OR the other way round.
		every := (p.Op == PredAnd) == want
		for _, a := range p.Args {
			m := mayMatch(a, want, rangeOf)
			if every && !m {
				return false
			}
			if !every && m {
				return true
			}
		}
		return every
	case PredNot:
		return mayMatch(p.Args[0], !want, rangeOf)
	}
	r, ok := rangeOf(p.Column)
	if !ok {
		return true
	}
	switch p.Op {
	case PredIsNull, PredIsNotNull:
		if !r.hasNulls {
			return true
		}
		someNull, someValue := r.nulls > 0, r.nulls < r.rows
		if (p.Op == PredIsNull) == want {
			return someNull
		}
		return someValue
	}
	if r.hasNulls && r.nulls >= r.rows {
		return false // every value is null: a comparison is unknown for every row
	}
	if r.kind == 0 {
		return true
	}
	k := r.kind
	inRange := func(lit literal) bool {
		return (!r.hasLo || compareLit(k, r.lo, lit) <= 0) && (!r.hasHi || compareLit(k, lit, r.hi) <= 0)
	}
	if p.Op == PredIn {
		if !want {
			return true // conservative: "not in" is rarely provable from a range
		}
		for _, v := range p.Values {
			if v == nil {
				continue
			}
			lit, err := convertLiteral(r.field, k, v)
			if err != nil || inRange(lit) {
				return true
			}
		}
		return false
	}
	lit, err := convertLiteral(r.field, k, p.Value)
	if err != nil {
		return true
	}
	op := p.Op
	if !want {
		op = negateOp(op)
	}
	switch op {
	case PredEq:
		return inRange(lit)
	case PredNe: // false for every row only when every value is the literal
		return !(r.hasLo && r.hasHi && compareLit(k, r.lo, lit) == 0 && compareLit(k, r.hi, lit) == 0)
	case PredLt:
		return !r.hasLo || compareLit(k, r.lo, lit) < 0
	case PredLe:
		return !r.hasLo || compareLit(k, r.lo, lit) <= 0
	case PredGt:
		return !r.hasHi || compareLit(k, r.hi, lit) > 0
	case PredGe:
		return !r.hasHi || compareLit(k, r.hi, lit) >= 0
	}
	return true
}

// negateOp returns the comparison that is true exactly where op is false (for non-null values).
func negateOp(op PredicateOp) PredicateOp {
	switch op {
	case PredEq:
		return PredNe
	case PredNe:
		return PredEq
	case PredLt:
		return PredGe
	case PredLe:
		return PredGt
	case PredGt:
		return PredLe
	case PredGe:
		return PredLt
	}
	return op
}

// columnStats returns the statistics of column name in rg, or nil when the file has no such
// top-level leaf column or no statistics for it.
func columnStats(rg *metadata.RowGroupMetaData, leaves map[string]int, name string) metadata.TypedStatistics {
	ci, ok := leaves[name]
	if !ok {
		return nil
	}
	cc, err := rg.ColumnChunk(ci)
	if err != nil {
		return nil
	}
	if set, err := cc.StatsSet(); err != nil || !set {
		return nil
	}
	st, err := cc.Statistics()
	if err != nil {
		return nil
	}
	return st
}

// statRange returns a column chunk's min and max as literals of kind k. Only kinds whose
// Parquet statistics order like the predicate's comparison are used: signed integers (and
// dates) and strings. Floats (NaN ordering) and unsigned integers (signed physical storage) are
// never pruned on.
func statRange(st metadata.TypedStatistics, k valueKind) (lo, hi literal, ok bool) {
	if !st.HasMinMax() {
		return literal{}, literal{}, false
	}
	switch s := st.(type) {
	case *metadata.Int32Statistics:
		if k == kindInt {
			return literal{i: int64(s.Min())}, literal{i: int64(s.Max())}, true
		}
	case *metadata.Int64Statistics:
		if k == kindInt {
			return literal{i: s.Min()}, literal{i: s.Max()}, true
		}
	case *metadata.ByteArrayStatistics:
		if k == kindString {
			return literal{s: string(s.Min())}, literal{s: string(s.Max())}, true
		}
	}
	return literal{}, literal{}, false
}

// pruneKind returns the comparison kind the statistics of column f are used with, or 0 when
// they are not used (see statRange; timestamps and times may be stored in another unit than the
// column's, so only plain integers and date32 are).
func pruneKind(f arrow.Field) valueKind {
	switch f.Type.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.DATE32:
		return kindInt
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		return kindString
	}
	return 0
}

// PrunesOn reports whether the row-group statistics of column f are used by MayMatch.
func PrunesOn(f arrow.Field) bool { return pruneKind(f) != 0 }

// FilterBatch returns the rows of rec for which pred is true (nil when none is), for callers that
// filter rows a Scanner did not read (a MemWAL read). rec must hold every column pred reads; the
// result is the caller's.
func FilterBatch(ctx context.Context, pred *Predicate, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	match, err := pred.Match(rec)
	if err != nil {
		return nil, fmt.Errorf("evaluate filter %s: %w", pred, err)
	}
	return arrowschema.FilterRecord(compute.GetAllocator(ctx), rec, match)
}
