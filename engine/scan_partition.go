package engine

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/partition"
)

// Partition pruning: a filter on a partition source column excludes the fragments whose
// partition tuple proves that no row of theirs can match, before any of their files is opened
// (statistics pruning, scan_filter.go, comes after, on the fragments kept).
//
// Each comparison of the filter is turned into a condition on the partition values of every spec
// field whose source is the compared column: the literal is transformed as a row's value is
// (partition.Bound.FieldValue), and
//   - "=" and "in" keep a fragment whose value equals a transformed literal (every transform);
//   - "<", "<=", ">", ">=" keep one whose value is on the right side of the transformed literal,
//     inclusive (order-preserving transforms: identity, year, month, day, hour, truncate; a
//     bucket proves nothing about order);
//   - "!=" excludes a fragment only for identity, when its value is the literal;
//   - a null partition value holds only rows whose source is null: a comparison is never true
//     there, "is_not_null" neither; a non-null value excludes "is_null".
//
// "and" excludes what any argument excludes, "or" what every argument excludes; "not" and a
// literal the column's type cannot hold exactly exclude nothing. Pruning is conservative: a
// fragment is excluded only when the filter is false or unknown for each of its rows.

// PartitionPruner decides from a fragment's partition tuple whether a filter can match any of
// its rows. It is immutable and safe for concurrent use.
type PartitionPruner struct {
	cond partCond
}

// partCond is a filter compiled against the spec: it reports whether a fragment of tuple t may
// hold a matching row.
type partCond func(t partition.Tuple) bool

func mayAlways(partition.Tuple) bool { return true }

// NewPartitionPruner compiles pred against the partition spec of version m. It returns nil (no
// pruning) when m's table is unpartitioned, pred is nil, or pred constrains no partition source
// column.
func NewPartitionPruner(m *Manifest, pred *expr.Predicate) *PartitionPruner {
	if pred == nil || len(m.PartitionSpec) == 0 || m.ArrowSchema() == nil {
		return nil
	}
	b, err := m.PartitionSpec.Bind(m.ArrowSchema())
	if err != nil {
		return nil
	}
	cond, used := compilePartCond(b, m.ArrowSchema(), pred)
	if !used {
		return nil
	}
	return &PartitionPruner{cond: cond}
}

// MayMatch reports whether fragment f may hold a row the filter matches: false only when its
// partition tuple proves none does. A fragment without a tuple of the spec is always kept.
func (p *PartitionPruner) MayMatch(f Fragment) bool {
	if p == nil || len(f.Partition) == 0 {
		return true
	}
	return p.cond(f.Partition)
}

// compilePartCond compiles pred; used reports whether any part of it can exclude a fragment.
func compilePartCond(b *partition.Bound, sc *arrow.Schema, pred *expr.Predicate) (partCond, bool) {
	switch pred.Op {
	case expr.PredAnd:
		var conds []partCond
		for _, a := range pred.Args {
			if c, used := compilePartCond(b, sc, a); used {
				conds = append(conds, c)
			}
		}
		if len(conds) == 0 {
			return mayAlways, false
		}
		return allOf(conds), true
	case expr.PredOr:
		conds := make([]partCond, 0, len(pred.Args))
		for _, a := range pred.Args {
			c, used := compilePartCond(b, sc, a)
			if !used {
				return mayAlways, false // an argument that may match anything
			}
			conds = append(conds, c)
		}
		return anyOf(conds), len(conds) > 0
	case expr.PredNot:
		return mayAlways, false
	}
	// A comparison: one condition per spec field of the column, all of which must hold.
	js := sc.FieldIndices(pred.Column)
	if len(js) != 1 {
		return mayAlways, false
	}
	var conds []partCond
	for i := range b.Len() {
		if b.Column(i) != js[0] {
			continue
		}
		if c, ok := fieldCond(b, i, sc.Field(js[0]), pred); ok {
			conds = append(conds, c)
		}
	}
	if len(conds) == 0 {
		return mayAlways, false
	}
	return allOf(conds), true
}

// allOf is the condition on a partition tuple that holds where every one of conds does (the
// pruner's partCond and the delete's partitionCover combine their arguments alike).
func allOf[F ~func(partition.Tuple) bool](conds []F) F {
	return func(t partition.Tuple) bool {
		for _, c := range conds {
			if !c(t) {
				return false
			}
		}
		return true
	}
}

// anyOf is the condition on a partition tuple that holds where one of conds does.
func anyOf[F ~func(partition.Tuple) bool](conds []F) F {
	return func(t partition.Tuple) bool {
		for _, c := range conds {
			if c(t) {
				return true
			}
		}
		return false
	}
}

// fieldCond is comparison pred's condition on the values of spec field i (whose source column is
// f); false when it can exclude nothing.
func fieldCond(b *partition.Bound, i int, f arrow.Field, pred *expr.Predicate) (partCond, bool) {
	tr := b.Spec()[i].Transform
	switch pred.Op {
	case expr.PredIsNull:
		return func(t partition.Tuple) bool { return t[i].IsNull() }, true
	case expr.PredIsNotNull:
		return func(t partition.Tuple) bool { return !t[i].IsNull() }, true
	case expr.PredIn:
		var lits []partition.Value
		for _, v := range pred.Values {
			if v == nil {
				continue // "x in (.., null)" is never true through the null
			}
			lit, ok := transformLiteral(b, i, f, v)
			if !ok {
				return nil, false
			}
			lits = append(lits, lit)
		}
		return func(t partition.Tuple) bool {
			for _, l := range lits {
				if !t[i].IsNull() && partition.Compare(t[i], l) == 0 {
					return true
				}
			}
			return false
		}, true
	}
	lit, ok := transformLiteral(b, i, f, pred.Value)
	if !ok {
		return nil, false
	}
	// want says which signs of Compare(value, literal) a fragment may have.
	var want func(c int) bool
	switch pred.Op {
	case expr.PredEq:
		want = func(c int) bool { return c == 0 }
	case expr.PredNe:
		if tr.Kind != partition.Identity {
			return nil, false
		}
		want = func(c int) bool { return c != 0 }
	case expr.PredLt, expr.PredLe, expr.PredGt, expr.PredGe:
		if !tr.Monotonic() {
			return nil, false
		}
		return rangeCond(b, i, f, pred, lit), true
	default:
		return nil, false
	}
	return func(t partition.Tuple) bool {
		return !t[i].IsNull() && want(partition.Compare(t[i], lit))
	}, true
}

// rangeCond is the condition of comparison pred ("<", "<=", ">", ">=") on an order-preserving
// field i: where the partition value stands for a range of source values (fieldRange) the range
// is compared with the literal itself, so "ts < '2024-01-16'" excludes the partition day 2024-01-16;
// elsewhere (a truncated string) the partition value is compared with the transformed literal
// lit, inclusively.
func rangeCond(b *partition.Bound, i int, f arrow.Field, pred *expr.Predicate, lit partition.Value) partCond {
	src, exact := sourceLiteral(f, pred.Value)
	tr, srcType := b.Spec()[i].Transform, b.SourceType(i)
	return func(t partition.Tuple) bool {
		if t[i].IsNull() {
			return false
		}
		if lo, hi, ok := fieldRange(tr, srcType, t[i]); ok && exact {
			switch pred.Op {
			case expr.PredLt:
				return partition.Compare(lo, src) < 0
			case expr.PredLe:
				return partition.Compare(lo, src) <= 0
			case expr.PredGt:
				return partition.Compare(hi, src) > 0
			default:
				return partition.Compare(hi, src) >= 0
			}
		}
		c := partition.Compare(t[i], lit)
		if pred.Op == expr.PredLt || pred.Op == expr.PredLe {
			return c <= 0
		}
		return c >= 0
	}
}

// transformLiteral returns spec field i's partition value of literal v of column f; false when
// the column's type cannot hold v exactly (no pruning by it).
func transformLiteral(b *partition.Bound, i int, f arrow.Field, v any) (partition.Value, bool) {
	if v == nil {
		return partition.Value{}, false
	}
	arr, err := expr.ConstantArray(memory.DefaultAllocator, f, v, 1)
	if err != nil {
		return partition.Value{}, false
	}
	defer arr.Release()
	val, err := b.FieldValue(i, arr, 0)
	if err != nil || val.IsNull() {
		return partition.Value{}, false
	}
	return val, true
}
