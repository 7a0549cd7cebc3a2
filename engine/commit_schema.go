package engine

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// A schema merge commits with the rows written in it (Transaction.Schema on an Append, Upsert or
// Overwrite): one manifest holds both, so a reader, or a crash, sees the table at one schema or
// the other, never the new schema without its rows or rows without their schema.
//
// The transaction's schema was merged against the version it read, and its data files carry the
// field ids that merge assigned (above that version's last_field_id). At commit it is merged
// again onto the latest version (mergeTxnSchema), which only differs when a concurrent commit
// changed the schema. It lands when the re-merge is allowed and gives every field the id the
// transaction's files carry; otherwise it is a *ConflictError (the sink's retry merges afresh):
//   - both added the same column in the same type from the same version: the ids agree, it lands;
//   - both added different columns from the same version: the same id for two fields, conflict;
//   - incompatible changes (x int64 here, x utf8 there): the re-merge is refused, conflict.
//
// A transaction without a schema that read an older schema (a concurrent writer still on it)
// rebases as the conflict matrix says: its files are in an older schema of the table, which
// reads through the latest (ConformBatch).

// SchemaForWrite returns the table schema a write of schema in makes of version m's, ready for
// NewWriterFor: m's own (WriteSchema) when in fits it (changed false), or the merged schema with
// field ids for its new fields, counted from m.LastFieldID, also ready for
// Transaction.SetSchema. Refusals are MergeSchema's.
func SchemaForWrite(m *Manifest, in *arrow.Schema) (sc *arrow.Schema, changed bool, err error) {
	merged, changed, err := arrowschema.MergeSchema(m.ArrowSchema(), in, m.PrimaryKey)
	if err != nil {
		return m.ArrowSchema(), false, err
	}
	if !changed {
		return m.WriteSchema(), false, nil
	}
	merged, _, _ = arrowschema.AssignFieldIDs(merged, max(m.LastFieldID, arrowschema.MaxFieldID(m.ArrowSchema())))
	return merged, true, nil
}

// WriteSchema returns the schema data files of m's table are written in: m's schema, with field
// ids on every field. A table whose schema has no field ids gets them on its next commit
// (withTableFieldIDs); its files carry the same ids already, as the assignment is deterministic.
func (m *Manifest) WriteSchema() *arrow.Schema {
	sc, _, _ := arrowschema.AssignFieldIDs(m.ArrowSchema(), max(m.LastFieldID, arrowschema.MaxFieldID(m.ArrowSchema())))
	return sc
}

// mergeTxnSchema makes next (a copy of the latest version) carry txn's merged schema, as the
// comment above says.
func (t *Table) mergeTxnSchema(next *Manifest, txn *Transaction) error {
	sc := txn.schema
	if sc == nil {
		var err error
		if sc, err = arrowschema.DecodeSchema(txn.Schema); err != nil {
			return fmt.Errorf("table %s: %s schema: %w", t.name, txn.Operation, err)
		}
		txn.schema = sc
	}
	conflict := func(why string) error {
		return &ConflictError{Table: t.name, Operation: txn.Operation, ReadVersion: txn.ReadVersion,
			TheirOp: "schema change", TheirVersion: next.Version - 1, Reason: why}
	}
	merged, changed, err := arrowschema.MergeSchema(next.schema, sc, next.PrimaryKey)
	if err != nil {
		return conflict(fmt.Sprintf("the table schema changed concurrently and this write's schema no longer merges with it (%v); retry against the new version", err))
	}
	if !changed {
		merged = next.schema
	}
	// A partitioned table keeps its spec: its source columns stay, with types its transforms take.
	if err := next.PartitionSpec.CheckSchemaChange(merged); err != nil {
		return fmt.Errorf("table %s: %w: %w", t.name, arrowschema.ErrSchemaChangeRefused, err)
	}
	merged, last, _ := arrowschema.AssignFieldIDs(merged, max(next.LastFieldID, arrowschema.MaxFieldID(next.schema)))
	if path, ok := fieldIDsAgree(merged.Fields(), sc.Fields(), ""); !ok {
		return conflict(fmt.Sprintf("the table schema changed concurrently: field %q has another field id than this write's data files carry; retry against the new version", path))
	}
	if !changed {
		return nil
	}
	b, err := arrowschema.EncodeSchema(merged)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.name, err)
	}
	next.Schema, next.schema, next.LastFieldID = b, merged, last
	next.SchemaID++
	return nil
}

// fieldIDsAgree reports whether every field of written (by name, nested too) has the same field id
// in table, and otherwise the path of one that does not.
func fieldIDsAgree(table, written []arrow.Field, prefix string) (string, bool) {
	byName := make(map[string]arrow.Field, len(table))
	for _, f := range table {
		byName[f.Name] = f
	}
	for i, w := range written {
		tf, ok := byName[w.Name]
		if !ok {
			return prefix + w.Name, false
		}
		wid, _ := arrowschema.FieldID(w)
		tid, _ := arrowschema.FieldID(tf)
		if wid != tid {
			return prefix + w.Name, false
		}
		wc, _ := arrowschema.NestedFields(w.Type)
		tc, _ := arrowschema.NestedFields(tf.Type)
		if wc == nil {
			continue
		}
		if _, isStruct := w.Type.(*arrow.StructType); !isStruct {
			// positional children: compare under the table's names
			if len(wc) != len(tc) {
				return prefix + w.Name, false
			}
			for j := range wc {
				wc[j].Name = tc[j].Name
			}
		}
		if p, ok := fieldIDsAgree(tc, wc, prefix+written[i].Name+"."); !ok {
			return p, false
		}
	}
	return "", true
}

// MergeWrittenSchemas merges schemas, the table schemas several writes of one commit (the stages
// of a multi-writer epoch) were written in, each one SchemaForWrite of version m, into one: m's
// schema with every one's new columns and promotions. It returns m's schema and false when none
// changes it. Writes that gave one field id to different fields (partitions that added different
// columns) are refused: their files' Parquet field ids would disagree with the table's.
func MergeWrittenSchemas(m *Manifest, schemas []*arrow.Schema) (*arrow.Schema, bool, error) {
	cur := m.ArrowSchema()
	last := max(m.LastFieldID, arrowschema.MaxFieldID(cur))
	any := false
	for _, sc := range schemas {
		merged, changed, err := arrowschema.MergeSchema(cur, sc, m.PrimaryKey)
		if err != nil {
			return nil, false, err
		}
		if !changed {
			continue
		}
		merged, last, _ = arrowschema.AssignFieldIDs(merged, last)
		if path, ok := fieldIDsAgree(merged.Fields(), sc.Fields(), ""); !ok {
			return nil, false, fmt.Errorf("%w: the writes of this commit gave field %q different field ids (partitions that added different columns); send every partition in one schema", arrowschema.ErrSchemaChangeRefused, path)
		}
		cur, any = merged, true
	}
	return cur, any, nil
}
