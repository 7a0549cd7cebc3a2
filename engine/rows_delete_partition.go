package engine

import (
	"context"
	"math/big"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/engine/rowset"
)

// Deletes in a partitioned table: a delete's filter is first held against each fragment's
// partition. A fragment whose partition cannot match (PartitionPruner) is not read; one whose
// partition the filter covers (true for every row a partition of that tuple can hold) has all its
// live rows deleted without reading it; only the others are scanned for matching rows. When
// every fragment the delete touches is left with no live row, they are dropped from the version
// (rowRebase.dropFullyDeleted) instead of being given deletion files, so a delete of whole
// partitions changes metadata only; a delete that also removes some rows of other fragments
// gives every fragment it touches a deletion file.

// partitionCover reports whether a predicate is true for every row of a partition.
type partitionCover func(t partition.Tuple) bool

// newPartitionCover compiles pred against the spec of version m; nil when m is unpartitioned or
// pred covers no partition.
func newPartitionCover(m *Manifest, pred *expr.Predicate) partitionCover {
	if len(m.PartitionSpec) == 0 || m.ArrowSchema() == nil {
		return nil
	}
	b, err := m.PartitionSpec.Bind(m.ArrowSchema())
	if err != nil {
		return nil
	}
	c, ok := compileCover(b, m.ArrowSchema(), pred)
	if !ok {
		return nil
	}
	return c
}

// compileCover compiles pred; ok is false when it can cover no partition.
func compileCover(b *partition.Bound, sc *arrow.Schema, pred *expr.Predicate) (partitionCover, bool) {
	switch pred.Op {
	case expr.PredAnd:
		conds := make([]partitionCover, 0, len(pred.Args))
		for _, a := range pred.Args {
			c, ok := compileCover(b, sc, a)
			if !ok {
				return nil, false // an argument no partition makes true for all its rows
			}
			conds = append(conds, c)
		}
		return allOf(conds), len(conds) > 0
	case expr.PredOr:
		var conds []partitionCover
		for _, a := range pred.Args {
			if c, ok := compileCover(b, sc, a); ok {
				conds = append(conds, c)
			}
		}
		return anyOf(conds), len(conds) > 0
	case expr.PredNot:
		return nil, false
	}
	js := sc.FieldIndices(pred.Column)
	if len(js) != 1 {
		return nil, false
	}
	col, f := js[0], sc.Field(js[0])
	var fields []int
	for i := range b.Len() {
		if b.Column(i) == col {
			fields = append(fields, i)
		}
	}
	if len(fields) == 0 {
		return nil, false
	}
	switch pred.Op {
	case expr.PredIsNull, expr.PredIsNotNull:
		wantNull := pred.Op == expr.PredIsNull
		return func(t partition.Tuple) bool {
			for _, i := range fields {
				if t[i].IsNull() == wantNull {
					return true
				}
			}
			return false
		}, true
	}
	var lits []partition.Value
	for _, v := range append([]any{pred.Value}, pred.Values...) {
		if v == nil {
			continue
		}
		lit, ok := sourceLiteral(f, v)
		if !ok {
			return nil, false
		}
		lits = append(lits, lit)
	}
	if len(lits) == 0 {
		return nil, false
	}
	var holds func(lo, hi partition.Value) bool
	lit := lits[0]
	switch pred.Op {
	case expr.PredEq:
		holds = func(lo, hi partition.Value) bool {
			return partition.Compare(lo, lit) == 0 && partition.Compare(hi, lit) == 0
		}
	case expr.PredIn:
		holds = func(lo, hi partition.Value) bool {
			if partition.Compare(lo, hi) != 0 {
				return false
			}
			for _, l := range lits {
				if partition.Compare(lo, l) == 0 {
					return true
				}
			}
			return false
		}
	case expr.PredNe:
		holds = func(lo, hi partition.Value) bool {
			return partition.Compare(lit, lo) < 0 || partition.Compare(lit, hi) > 0
		}
	case expr.PredLt:
		holds = func(_, hi partition.Value) bool { return partition.Compare(hi, lit) < 0 }
	case expr.PredLe:
		holds = func(_, hi partition.Value) bool { return partition.Compare(hi, lit) <= 0 }
	case expr.PredGt:
		holds = func(lo, _ partition.Value) bool { return partition.Compare(lo, lit) > 0 }
	case expr.PredGe:
		holds = func(lo, _ partition.Value) bool { return partition.Compare(lo, lit) >= 0 }
	default:
		return nil, false
	}
	return func(t partition.Tuple) bool {
		lo, hi, ok := sourceRange(b, fields, t)
		return ok && holds(lo, hi)
	}, true
}

// sourceLiteral returns literal v as a value of column f's source type (its identity partition
// value); false when f's type cannot hold v exactly.
func sourceLiteral(f arrow.Field, v any) (partition.Value, bool) {
	b, err := partition.Spec{{Column: f.Name, Transform: partition.Transform{Kind: partition.Identity}}}.Bind(arrow.NewSchema([]arrow.Field{f}, nil))
	if err != nil {
		return partition.Value{}, false
	}
	arr, err := expr.ConstantArray(memory.DefaultAllocator, f, v, 1)
	if err != nil {
		return partition.Value{}, false
	}
	defer arr.Release()
	val, err := b.FieldValue(0, arr, 0)
	return val, err == nil && !val.IsNull()
}

// sourceRange returns the least and greatest source value a row of partition t can have in the
// column of spec fields `fields` (the tightest range their values allow); false when none of
// them bounds it (a bucket, a truncated string) or the column is null there.
func sourceRange(b *partition.Bound, fields []int, t partition.Tuple) (lo, hi partition.Value, ok bool) {
	for _, i := range fields {
		if t[i].IsNull() {
			return lo, hi, false
		}
		l, h, bounded := fieldRange(b.Spec()[i].Transform, b.SourceType(i), t[i])
		if !bounded {
			continue
		}
		if !ok || partition.Compare(l, lo) > 0 {
			lo = l
		}
		if !ok || partition.Compare(h, hi) < 0 {
			hi = h
		}
		ok = true
	}
	return lo, hi, ok
}

// fieldRange returns the source values a partition value v of transform tr of a source of
// Iceberg type src stands for, as an inclusive range; false when it is no range.
func fieldRange(tr partition.Transform, src string, v partition.Value) (lo, hi partition.Value, ok bool) {
	at := func(n int64) partition.Value { return partition.Value{Type: src, Int: n} }
	timestamp := strings.HasPrefix(src, "timestamp")
	// span converts a range of days [from, to) to the source's unit.
	span := func(from, to int64) (partition.Value, partition.Value, bool) {
		if timestamp {
			return at(from * microsPerDay), at(to*microsPerDay - 1), true
		}
		return at(from), at(to - 1), true
	}
	switch tr.Kind {
	case partition.Identity:
		return v, v, true
	case partition.Day:
		return span(v.Int, v.Int+1)
	case partition.Hour:
		return at(v.Int * microsPerHour), at((v.Int+1)*microsPerHour - 1), true
	case partition.Month:
		return span(monthDays(v.Int), monthDays(v.Int+1))
	case partition.Year:
		return span(monthDays(v.Int*12), monthDays((v.Int+1)*12))
	case partition.Truncate:
		switch {
		case src == "int" || src == "long":
			return v, at(v.Int + int64(tr.Param) - 1), true
		case strings.HasPrefix(src, "decimal("):
			top := new(big.Int).Add(v.Decimal.BigInt(), big.NewInt(int64(tr.Param)-1))
			return v, partition.Value{Type: src, Decimal: decimal128.FromBigInt(top)}, true
		}
	}
	return lo, hi, false
}

const microsPerDay, microsPerHour = int64(86_400_000_000), int64(3_600_000_000)

// monthDays returns the day (since 1970-01-01) month m (since 1970-01) starts on.
func monthDays(m int64) int64 {
	y, mo := m/12, m%12
	if mo < 0 {
		y, mo = y-1, mo+12
	}
	return time.Date(1970+int(y), time.Month(mo+1), 1, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// partitionDeletes splits the fragments of m for a delete by where: the live rows of the
// fragments whose partition where covers (deleted without reading them), and the fragments that
// must still be scanned (nil: all of them). Fragments whose partition cannot match are in
// neither.
func (t *Table) partitionDeletes(ctx context.Context, m *Manifest, where *expr.Predicate) (covered *rowset.Set, scan []uint64, err error) {
	covered = &rowset.Set{}
	cover := newPartitionCover(m, where)
	pruner := NewPartitionPruner(m, where)
	if cover == nil && pruner == nil {
		return covered, nil, nil
	}
	scan = []uint64{}
	for _, f := range m.Fragments {
		switch {
		case f.LiveRows() == 0 || !pruner.MayMatch(f):
		case len(f.Partition) > 0 && cover != nil && cover(f.Partition):
			dels, err := t.readDeletions(ctx, f)
			if err != nil {
				return nil, nil, err
			}
			all := bitmapOfRange(f.PhysicalRows)
			all.AndNot(dels)
			covered.AddBitmap(f.ID, all)
		default:
			scan = append(scan, f.ID)
		}
	}
	return covered, scan, nil
}
