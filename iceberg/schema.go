package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// fieldIDKey is the Arrow field metadata key that carries a column's field id (the key pqarrow
// writes to Parquet and iceberg-go reads).
const fieldIDKey = "PARQUET:field_id"

// icebergSchema converts a table schema to the Iceberg schema with the table's field ids. The
// schema id is assigned by the metadata builder when the schema is added.
//
// Types: every type the type policy stores has an Iceberg type (arrowschema.IcebergType); a
// column of a table written before that policy may not, and is an error wrapping
// ErrUnpublishable that names the column.
//
// The primary key columns pk, when every one is a required primitive column, are the schema's
// identifier fields (identifier-field-ids), so that engines know the table's key.
func icebergSchema(sc *arrow.Schema, pk ...string) (*iceberg.Schema, error) {
	for _, f := range sc.Fields() {
		// A type the policy no longer stores as it is (uint32, timestamp[ns], ...) would publish
		// as an Iceberg type its data files do not hold.
		st, err := arrowschema.StoredType(f.Name, f.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnpublishable, err)
		}
		if !arrow.TypeEqual(st, f.Type) {
			return nil, fmt.Errorf("%w: column %q has type %s, which has no iceberg type (tables store it as %s now)", ErrUnpublishable, f.Name, f.Type, st)
		}
	}
	var (
		s   *iceberg.Schema
		err error
	)
	if hasFieldIDs(sc) {
		s, err = table.ArrowSchemaToIceberg(sc, true, nil)
	} else {
		s, err = table.ArrowSchemaToIcebergWithFreshIDs(sc, true)
	}
	if err != nil {
		for _, f := range sc.Fields() {
			one := arrow.NewSchema([]arrow.Field{f}, nil)
			if _, ferr := table.ArrowSchemaToIcebergWithFreshIDs(one, true); ferr != nil {
				return nil, fmt.Errorf("%w: column %q has type %s, which has no iceberg type: %v", ErrUnpublishable, f.Name, f.Type, ferr)
			}
		}
		return nil, fmt.Errorf("%w: the schema has no iceberg equivalent: %v", ErrUnpublishable, err)
	}
	if len(pk) == 0 {
		return s, nil
	}
	ids := make([]int, 0, len(pk))
	for _, k := range pk {
		f, ok := s.FindFieldByName(k)
		if !ok || !f.Required {
			return s, nil // not an identifier Iceberg accepts: published without
		}
		if _, prim := f.Type.(iceberg.PrimitiveType); !prim {
			return s, nil
		}
		ids = append(ids, f.ID)
	}
	return iceberg.NewSchemaWithIdentifiers(s.ID, ids, s.Fields()...), nil
}

// hasFieldIDs reports whether every top-level column carries a field id.
func hasFieldIDs(sc *arrow.Schema) bool {
	for _, f := range sc.Fields() {
		if !f.HasMetadata() || f.Metadata.FindKey(fieldIDKey) < 0 {
			return false
		}
	}
	return sc.NumFields() > 0
}

// nameMapping returns the schema.name-mapping.default property for s: it lets readers resolve
// the columns of data files written without Parquet field ids by name.
func nameMapping(s *iceberg.Schema) (string, error) {
	b, err := jsonMarshal(s.NameMapping())
	if err != nil {
		return "", fmt.Errorf("encode name mapping: %w", err)
	}
	return string(b), nil
}

// emptyReader is a record reader of sc's Arrow schema with no batches.
func emptyReader(sc *iceberg.Schema) (array.RecordReader, error) {
	asc, err := table.SchemaToArrowSchema(sc, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("arrow schema of iceberg schema %d: %w", sc.ID, err)
	}
	return array.NewRecordReader(asc, nil)
}
