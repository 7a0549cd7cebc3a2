package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// UpdateSpec describes an Update: set columns to literals in the rows where a predicate holds.
type UpdateSpec struct {
	// Where selects the rows to change; required.
	Where *Predicate `json:"where"`
	// Set maps column names to their new values: literals as in Predicate (nil sets null, which
	// the column must allow). Primary-key columns cannot be set (upsert instead).
	Set map[string]any `json:"set"`
}

// PrepareUpdate returns an uncommitted Update of version base (nil: the latest): the matching
// rows are deleted and their new values appended, as one transaction. It writes the new rows'
// data files; commit it with Table.Commit or Discard it.
//
// REQUIRES: the transaction is committed (or discarded) well within cleanup's grace period.
func (t *Table) PrepareUpdate(ctx context.Context, base *Manifest, u UpdateSpec) (*Transaction, error) {
	if u.Where == nil {
		return nil, fmt.Errorf("table %s: update needs a predicate", t.name)
	}
	if len(u.Set) == 0 {
		return nil, fmt.Errorf("table %s: update sets no column", t.name)
	}
	m, err := t.resolveBase(ctx, base)
	if err != nil {
		return nil, err
	}
	sc := m.ArrowSchema()
	if err := u.Where.Validate(sc); err != nil {
		return nil, fmt.Errorf("table %s: update: %w", t.name, err)
	}
	set := make(map[int]any, len(u.Set))
	for name, v := range u.Set {
		idx := sc.FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("table %s: update: %w: no column %q in %s", t.name, ErrSchemaMismatch, name, fieldList(sc))
		}
		f := sc.Field(idx[0])
		if slices.Contains(m.PrimaryKey, name) {
			return nil, fmt.Errorf("table %s: update cannot set primary key column %q (upsert the new rows instead)", t.name, name)
		}
		// Check the literal now, before reading anything.
		col, err := constantArray(memory.DefaultAllocator, f, v, 1)
		if err != nil {
			return nil, fmt.Errorf("table %s: update: %w", t.name, err)
		}
		col.Release()
		set[idx[0]] = v
	}

	s, err := t.ScanManifest(ctx, m, ScanOptions{WithRowAddresses: true})
	if err != nil {
		return nil, err
	}
	defer s.Release()
	ev, err := u.Where.bind(s.Schema())
	if err != nil {
		return nil, fmt.Errorf("table %s: update: %w", t.name, err)
	}
	w, err := t.NewWriterFor(sc, sc)
	if err != nil {
		return nil, err
	}
	rows := &RowSet{}
	fail := func(err error) (*Transaction, error) {
		w.Abort(ctx)
		return nil, err
	}
	for s.Next() {
		rec := s.RecordBatch()
		match, err := matchRows(ev, rec)
		if err != nil {
			return fail(fmt.Errorf("table %s: evaluate %s: %w", t.name, u.Where, err))
		}
		var keep []int32
		addrs := s.RowAddresses()
		for i, ok := range match {
			if ok {
				keep = append(keep, int32(i))
				rows.Add(addrs[i])
			}
		}
		if len(keep) == 0 {
			continue
		}
		sel, err := selectRows(ctx, t.opts.Allocator, rec, keep)
		if err != nil {
			return fail(fmt.Errorf("table %s: update: %w", t.name, err))
		}
		out, err := setColumns(t.opts.Allocator, sel, set)
		sel.Release()
		if err != nil {
			return fail(fmt.Errorf("table %s: update: %w", t.name, err))
		}
		err = w.Write(ctx, out)
		out.Release()
		if err != nil {
			return fail(err)
		}
	}
	if err := s.Err(); err != nil {
		return fail(err)
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		return fail(err)
	}
	return &Transaction{Operation: OpUpdate, ReadVersion: m.Version, Deleted: rows, Fragments: frags,
		base: m, rowsUpdated: rows.Len()}, nil
}

// Update sets columns to literals in the rows where u.Where holds, as one Update transaction
// with props. When nothing matches, nothing is committed.
func (t *Table) Update(ctx context.Context, u UpdateSpec, props map[string]string) (WriteResult, error) {
	txn, err := t.PrepareUpdate(ctx, nil, u)
	if err != nil {
		return WriteResult{}, err
	}
	txn.Properties = props
	return t.commitRowChange(ctx, txn)
}

// setColumns returns rec with the columns in set (index -> literal) replaced by constants.
func setColumns(mem memory.Allocator, rec arrow.RecordBatch, set map[int]any) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, rec.NumCols())
	var made []arrow.Array
	defer func() {
		for _, c := range made {
			c.Release()
		}
	}()
	for i := range cols {
		v, ok := set[i]
		if !ok {
			cols[i] = rec.Column(i)
			continue
		}
		c, err := constantArray(mem, rec.Schema().Field(i), v, int(rec.NumRows()))
		if err != nil {
			return nil, err
		}
		made = append(made, c)
		cols[i] = c
	}
	return array.NewRecordBatch(rec.Schema(), cols, rec.NumRows()), nil
}

// constantArray returns an array of n copies of literal v in column f's type.
func constantArray(mem memory.Allocator, f arrow.Field, v any, n int) (arrow.Array, error) {
	b := array.NewBuilder(mem, f.Type)
	defer b.Release()
	if v == nil {
		if !f.Nullable {
			return nil, fmt.Errorf("%w: column %q is not nullable, cannot set it to null", ErrSchemaMismatch, f.Name)
		}
		b.AppendNulls(n)
		return b.NewArray(), nil
	}
	k, err := kindOf(f)
	if err != nil {
		return nil, fmt.Errorf("cannot set column %q: its type %s takes no literal", f.Name, f.Type)
	}
	lit, err := convertLiteral(f, k, v)
	if err != nil {
		return nil, err
	}
	appendOne := func() error { return fmt.Errorf("cannot set column %q of type %s", f.Name, f.Type) }
	switch bb := b.(type) {
	case *array.Int8Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int8(lit.i), f) }
	case *array.Int16Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int16(lit.i), f) }
	case *array.Int32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, int32(lit.i), f) }
	case *array.Int64Builder:
		appendOne = func() error { bb.Append(lit.i); return nil }
	case *array.Uint8Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint8(lit.i), f) }
	case *array.Uint16Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint16(lit.i), f) }
	case *array.Uint32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, uint32(lit.i), f) }
	case *array.Uint64Builder:
		appendOne = func() error { bb.Append(lit.u); return nil }
	case *array.Float32Builder:
		appendOne = func() error { bb.Append(float32(lit.f)); return nil }
	case *array.Float64Builder:
		appendOne = func() error { bb.Append(lit.f); return nil }
	case *array.StringBuilder:
		appendOne = func() error { bb.Append(lit.s); return nil }
	case *array.LargeStringBuilder:
		appendOne = func() error { bb.Append(lit.s); return nil }
	case *array.BinaryBuilder:
		appendOne = func() error { bb.AppendString(lit.s); return nil }
	case *array.BooleanBuilder:
		appendOne = func() error { bb.Append(lit.b); return nil }
	case *array.Date32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, arrow.Date32(lit.i), f) }
	case *array.Date64Builder:
		appendOne = func() error { bb.Append(arrow.Date64(lit.i)); return nil }
	case *array.TimestampBuilder:
		appendOne = func() error { bb.Append(arrow.Timestamp(lit.i)); return nil }
	case *array.Time32Builder:
		appendOne = func() error { return appendChecked(bb.Append, lit.i, arrow.Time32(lit.i), f) }
	case *array.Time64Builder:
		appendOne = func() error { bb.Append(arrow.Time64(lit.i)); return nil }
	case *array.DurationBuilder:
		appendOne = func() error { bb.Append(arrow.Duration(lit.i)); return nil }
	}
	for range n {
		if err := appendOne(); err != nil {
			return nil, err
		}
	}
	return b.NewArray(), nil
}

// appendChecked appends narrow (wide converted to the column's type) if the conversion kept the
// value.
func appendChecked[T int8 | int16 | int32 | uint8 | uint16 | uint32 | arrow.Date32 | arrow.Time32](app func(T), wide int64, narrow T, f arrow.Field) error {
	if int64(narrow) != wide {
		return fmt.Errorf("literal %d does not fit column %q (%s)", wide, f.Name, f.Type)
	}
	app(narrow)
	return nil
}
