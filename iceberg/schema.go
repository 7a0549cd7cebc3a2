package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// fieldIDKey is the Arrow field metadata key that carries a column's field id (the key pqarrow
// writes to Parquet and iceberg-go reads).
const fieldIDKey = "PARQUET:field_id"

// icebergSchema converts a table schema to the Iceberg schema with the table's field ids. The
// schema id is assigned by the metadata builder when the schema is added.
//
// Types: Iceberg v2 has no nanosecond timestamps, so they are published as microsecond ones
// (readers truncate); Arrow types Iceberg has no equivalent for (unsigned integers, for one) make
// the table unpublishable, and the error names the column.
func icebergSchema(sc *arrow.Schema) (*iceberg.Schema, error) {
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
		return nil, fmt.Errorf("table schema has no iceberg equivalent: %w", err)
	}
	return s, nil
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
