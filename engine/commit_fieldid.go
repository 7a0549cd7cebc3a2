package engine

import (
	"fmt"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// withTableFieldIDs gives m's schema an id on every field that lacks one (a table whose schema has
// no field ids, on its next commit), re-encoding the schema. Data files are not rewritten:
// they are read by column name and stamped with the manifest's schema. It is not a schema
// change, so SchemaID stays.
func withTableFieldIDs(m *Manifest) error {
	last := max(m.LastFieldID, arrowschema.MaxFieldID(m.schema))
	sc, last, changed := arrowschema.AssignFieldIDs(m.schema, last)
	m.LastFieldID = last
	if !changed {
		return nil
	}
	b, err := arrowschema.EncodeSchema(sc)
	if err != nil {
		return fmt.Errorf("field ids: %w", err)
	}
	m.Schema, m.schema = b, sc
	return nil
}
