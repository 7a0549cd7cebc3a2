package engine

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/rowset"
)

// Upsert (merge-insert by primary key) writes rows keyed by the table's primary key: a row whose
// key the table holds replaces the row(s) with that key, a row with a new key is inserted, all in
// one transaction. Replaced rows are deleted (deletion files) and every written row is appended.
//
// Keys are looked up through the table's primary-key index when it has one (index_lookup.go),
// scanning the key columns of only the fragments the index does not cover, and by scanning the
// key columns of the whole version read otherwise. When the upsert lands after other commits it
// searches the fragments they added for its keys too, so that a key inserted or replaced concurrently is replaced again
// rather than duplicated (last writer wins).

// PrepareUpsert returns an uncommitted Upsert of recs against version base (nil: the latest).
// It writes recs' data files; commit the transaction with Table.Commit or Discard it.
//
// The table must have a primary key, and every key column of recs must be non-null. When recs
// hold a key more than once, the last row with that key wins.
//
// REQUIRES: the transaction is committed (or discarded) well within cleanup's grace period.
func (t *Table) PrepareUpsert(ctx context.Context, base *Manifest, recs []arrow.RecordBatch, opts ...WriterOption) (*Transaction, error) {
	return t.PrepareUpsertIn(ctx, base, recs, nil, opts...)
}

// PrepareUpsertIn is PrepareUpsert whose rows are written in merged, the table schema a schema
// merge made (MergeSchema; nil: the table's), which the transaction then commits with them.
func (t *Table) PrepareUpsertIn(ctx context.Context, base *Manifest, recs []arrow.RecordBatch, merged *arrow.Schema, opts ...WriterOption) (*Transaction, error) {
	m, err := t.resolveBase(ctx, base)
	if err != nil {
		return nil, err
	}
	if len(m.PrimaryKey) == 0 {
		return nil, fmt.Errorf("table %s: upsert needs a primary key and the table has none (append instead)", t.name)
	}
	txn := &Transaction{Operation: OpUpsert, ReadVersion: m.Version, Deleted: &rowset.Set{}, base: m,
		upsertKeys: make(map[string]struct{})}
	if len(recs) == 0 {
		return txn, nil
	}
	in := recs[0].Schema()
	target := m.ArrowSchema()
	if merged != nil {
		if err := txn.SetSchema(merged); err != nil {
			return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
		}
		target = merged
	}
	if err := arrowschema.CheckWriteSchema(target, in, m.PrimaryKey); err != nil {
		return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
	}
	// Last occurrence of each key wins: find it before writing anything.
	type pos struct{ batch, row int }
	last := make(map[string]pos)
	for bi, rec := range recs {
		if !rec.Schema().Equal(in) {
			return nil, fmt.Errorf("table %s: upsert: %w: batch schema changed within one upsert", t.name, arrowschema.ErrSchemaMismatch)
		}
		conf, err := arrowschema.ConformToTable(target, rec)
		if err != nil {
			return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
		}
		enc, err := expr.NewKeyEncoder(conf, m.PrimaryKey)
		if err != nil {
			conf.Release()
			return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			k, ok := enc.Key(i)
			if !ok {
				conf.Release()
				return nil, fmt.Errorf("table %s: upsert: %w: row %d of batch %d has a null primary key (%v)", t.name, arrowschema.ErrSchemaMismatch, i, bi, m.PrimaryKey)
			}
			last[k] = pos{bi, i}
		}
		conf.Release()
	}
	for k := range last {
		txn.upsertKeys[k] = struct{}{}
	}

	matched, found, err := t.lookupKeys(ctx, m, txn.upsertKeys)
	if err != nil {
		return nil, err
	}
	txn.Deleted = matched
	txn.rowsUpdated = int64(len(found))
	txn.rowsInserted = int64(len(last) - len(found))

	w, err := t.NewWriterFor(target, in, opts...)
	if err != nil {
		return nil, err
	}
	for bi, rec := range recs {
		var keep []int32
		dup := false
		conf, err := arrowschema.ConformToTable(target, rec)
		if err != nil {
			w.Abort(ctx)
			return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
		}
		enc, _ := expr.NewKeyEncoder(conf, m.PrimaryKey)
		for i := 0; i < int(rec.NumRows()); i++ {
			k, _ := enc.Key(i)
			if last[k] == (pos{bi, i}) {
				keep = append(keep, int32(i))
			} else {
				dup = true
			}
		}
		conf.Release()
		if len(keep) == 0 {
			continue
		}
		out := rec
		if dup {
			if out, err = arrowschema.TakeRecord(t.opts.Allocator, rec, keep); err != nil {
				w.Abort(ctx)
				return nil, fmt.Errorf("table %s: upsert: %w", t.name, err)
			}
		}
		err = w.Write(ctx, out)
		if dup {
			out.Release()
		}
		if err != nil {
			w.Abort(ctx)
			return nil, err
		}
	}
	frags, err := w.Finish(ctx)
	if err != nil {
		w.Abort(ctx)
		return nil, err
	}
	txn.Fragments = frags
	return txn, nil
}

// Upsert merges recs into the table by primary key as one Upsert transaction with props (a
// streaming "update" epoch stamps its identity there).
func (t *Table) Upsert(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) (WriteResult, error) {
	txn, err := t.PrepareUpsert(ctx, nil, recs)
	if err != nil {
		return WriteResult{}, err
	}
	txn.Properties = props
	return t.commitRowChange(ctx, txn)
}

// upsertKeys returns the encoded keys an Upsert writes: from memory when it was prepared in this
// process, else from its data files.
func (t *Table) upsertKeys(ctx context.Context, txn *Transaction, m *Manifest) (map[string]struct{}, error) {
	if txn.upsertKeys != nil {
		return txn.upsertKeys, nil
	}
	keys := make(map[string]struct{})
	s, err := t.scanFragments(ctx, m, txn.Fragments, ScanOptions{Columns: m.PrimaryKey})
	if err != nil {
		return nil, err
	}
	defer s.Release()
	for s.Next() {
		enc, err := expr.NewKeyEncoder(s.RecordBatch(), m.PrimaryKey)
		if err != nil {
			return nil, err
		}
		for i := 0; i < int(s.RecordBatch().NumRows()); i++ {
			if k, ok := enc.Key(i); ok {
				keys[k] = struct{}{}
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	txn.upsertKeys = keys
	return keys, nil
}

// findKeys returns the addresses of the live rows of frags (fragments of m) whose primary key is
// in keys, by scanning their key columns.
func (t *Table) findKeys(ctx context.Context, m *Manifest, frags []Fragment, keys map[string]struct{}) (*rowset.Set, error) {
	rows := &rowset.Set{}
	if err := t.scanKeys(ctx, m, frags, keys, rows, make(map[string]struct{})); err != nil {
		return nil, err
	}
	return rows, nil
}

// scanKeys scans the key columns of frags (fragments of m) and adds to rows the address of every
// live row whose primary key is in keys, and to seen the keys it found.
func (t *Table) scanKeys(ctx context.Context, m *Manifest, frags []Fragment, keys map[string]struct{}, rows *rowset.Set, seen map[string]struct{}) error {
	if len(keys) == 0 || len(frags) == 0 {
		return nil
	}
	s, err := t.scanFragments(ctx, m, frags, ScanOptions{Columns: m.PrimaryKey, WithRowAddresses: true})
	if err != nil {
		return err
	}
	defer s.Release()
	for s.Next() {
		rec := s.RecordBatch()
		enc, err := expr.NewKeyEncoder(rec, m.PrimaryKey)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		addrs := s.RowAddresses()
		for i := 0; i < int(rec.NumRows()); i++ {
			k, ok := enc.Key(i)
			if !ok {
				continue
			}
			if _, hit := keys[k]; hit {
				rows.Add(addrs[i])
				seen[k] = struct{}{}
			}
		}
	}
	return s.Err()
}
