package streaming

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// schemaForEpoch decides what the epoch r (of stream schema in) does to the table schema of
// version m (arrowschema.MergeSchema) and returns the schema its rows are written in. A stream
// that fits the table as it is (an older schema of it included: omitted nullable columns,
// narrower types) changes nothing: stored is m's schema (engine.Manifest.WriteSchema) and merged
// is nil. One that needs a change is refused without r.MergeSchema; with it, merged (and stored)
// is the new schema, and the epoch goes to the base table directly (a MemWAL shard stores rows
// in the schema it was opened with), where the change and its rows commit as one transaction.
func schemaForEpoch(t *engine.Table, m *engine.Manifest, r *EpochRequest, in *arrow.Schema) (stored, merged *arrow.Schema, err error) {
	sc, changed, err := engine.SchemaForWrite(m, in)
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: %w", t.Name(), err)
	}
	if !changed {
		return sc, nil, nil
	}
	if !r.MergeSchema {
		return nil, nil, fmt.Errorf("table %s: %w", t.Name(), arrowschema.CheckWriteSchema(m.ArrowSchema(), in, m.PrimaryKey))
	}
	return sc, sc, nil
}

// mergeStageSchemas returns the table schema the stages' schemas make of version m's when they
// change it (nil when none does). Stages written with merge_schema carry the schema their files
// are in; the commit merges them in partition order, and refuses stages whose files gave the
// same field id to different columns (partitions that added different columns).
func mergeStageSchemas(t *engine.Table, m *engine.Manifest, c *CommitStagedRequest, stages []*engine.Stage) (*arrow.Schema, error) {
	var schemas []*arrow.Schema
	for _, st := range stages {
		sc, err := st.ArrowSchema()
		if err != nil {
			return nil, fmt.Errorf("table %s: stage %s: %w", t.Name(), st.Token, err)
		}
		if sc != nil {
			schemas = append(schemas, sc)
		}
	}
	if len(schemas) == 0 {
		return nil, nil
	}
	merged, changed, err := engine.MergeWrittenSchemas(m, schemas)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.Name(), err)
	}
	if !changed {
		return nil, nil
	}
	if !c.MergeSchema {
		return nil, fmt.Errorf("table %s: %w: the stages change the table schema; commit them with \"merge_schema\": true", t.Name(), arrowschema.ErrSchemaMismatch)
	}
	return merged, nil
}
