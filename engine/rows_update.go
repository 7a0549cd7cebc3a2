package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
)

// UpdateSpec describes an Update: set columns to literals in the rows where a predicate holds.
type UpdateSpec struct {
	// Where selects the rows to change; required.
	Where *expr.Predicate `json:"where"`
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
			return nil, fmt.Errorf("table %s: update: %w: no column %q in %s", t.name, arrowschema.ErrSchemaMismatch, name, arrowschema.FieldList(sc))
		}
		f := sc.Field(idx[0])
		if slices.Contains(m.PrimaryKey, name) {
			return nil, fmt.Errorf("table %s: update cannot set primary key column %q (upsert the new rows instead)", t.name, name)
		}
		// Check the literal now, before reading anything.
		col, err := expr.ConstantArray(memory.DefaultAllocator, f, v, 1)
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
	bound, err := u.Where.Bind(s.Schema())
	if err != nil {
		return nil, fmt.Errorf("table %s: update: %w", t.name, err)
	}
	w, err := t.NewWriterFor(sc, sc)
	if err != nil {
		return nil, err
	}
	rows := &rowset.Set{}
	fail := func(err error) (*Transaction, error) {
		w.Abort(ctx)
		return nil, err
	}
	for s.Next() {
		rec := s.RecordBatch()
		match, err := bound.Match(rec)
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
		sel, err := arrowschema.TakeRecord(t.opts.Allocator, rec, keep)
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
		c, err := expr.ConstantArray(mem, rec.Schema().Field(i), v, int(rec.NumRows()))
		if err != nil {
			return nil, err
		}
		made = append(made, c)
		cols[i] = c
	}
	return array.NewRecordBatch(rec.Schema(), cols, rec.NumRows()), nil
}
