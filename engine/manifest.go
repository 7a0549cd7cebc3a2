package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/partition"
)

// FormatVersion is the manifest format this build writes. A manifest with a higher number was
// written by a newer flight-sink and is refused rather than misread. Format 2 names its schema's
// file (SchemaFile) instead of holding the schema; this build reads both.
const FormatVersion = 2

// Manifest is one version of a table: the complete description of what the version contains.
// Manifests are immutable once committed.
//
// NB: the field order is the JSON order. The header fields (format, version, timestamp, table
// id, transaction summary) come first so History can decode them from a short ranged read without
// parsing the fragment list.
type Manifest struct {
	FormatVersion  int    `json:"format_version"`
	Version        uint64 `json:"version"`
	TimestampNanos int64  `json:"timestamp_nanos"`
	// TableID names the table's incarnation: a random id given at Create and carried by every
	// version after it. A table dropped and created again under the same name has a new one, so
	// a writer or a ticket of the dropped table can tell (Drop). Empty for a table created
	// before the field existed.
	TableID     string             `json:"table_id,omitempty"`
	Transaction TransactionSummary `json:"transaction"`

	// Schema is the Arrow IPC encoding of the table schema. Every field of it, nested ones
	// included, carries its stable field id (FieldIDKey) once the table has committed with this
	// build (arrowschema.FieldID).
	//
	// A manifest of format 2 does not hold it: SchemaFile names the immutable file that does
	// (commit_schema_file.go), and Table.Manifest reads it from there.
	Schema []byte `json:"schema,omitempty"`
	// SchemaFile is the key, relative to the table, of the file holding Schema's bytes, named by
	// their SHA-256 (_schemas/<hex>.arrows); empty in a manifest that holds its schema.
	SchemaFile string `json:"schema_file,omitempty"`
	// SchemaID numbers the table's schemas: 0 for the schema it was created with, one more on every
	// change of it (a merge or an Overwrite with another schema). Giving ids to the fields of a
	// table whose schema has none is not a change.
	SchemaID int `json:"schema_id"`
	// LastFieldID is the highest field id ever assigned in the table; a new field gets a higher
	// one, so ids are never reused.
	LastFieldID int32    `json:"last_field_id,omitempty"`
	PrimaryKey  []string `json:"primary_key,omitempty"`
	// PartitionSpec is the table's partition spec, given at Create and kept by every version
	// after it; empty for an unpartitioned table. Every fragment of a partitioned table holds the
	// rows of one partition (Fragment.Partition).
	PartitionSpec partition.Spec    `json:"partition_spec,omitempty"`
	Config        map[string]string `json:"config,omitempty"`

	Fragments      []Fragment `json:"fragments"`
	NextFragmentID uint64     `json:"next_fragment_id"`

	// Streams holds the last committed epoch (the per-query watermark) of the streaming queries
	// that committed most recently, at most Options.StreamWatermarksInManifest of them; the other
	// queries' watermarks are in StreamsArchive (commit_streams.go). Table.StreamWatermark reads
	// both.
	Streams map[string]StreamWatermark `json:"streams,omitempty"`
	// StreamsArchive is the key, relative to the table, of the immutable object holding the
	// watermarks of the queries that left Streams; empty when none did.
	StreamsArchive string `json:"streams_archive,omitempty"`

	// MemWALMerged holds, per MemWAL shard id, the highest flushed generation whose rows are in
	// the base table (the merged-generation watermark). Generations merge in ascending order, so
	// every generation at or below it is merged; readers skip those and a compactor never merges
	// them twice.
	MemWALMerged map[string]uint64 `json:"memwal_merged,omitempty"`

	// Indices lists the table's indices, each with the segments it is made of and the fragments
	// every segment covers (index.go).
	Indices []Index `json:"indices,omitempty"`
	// IndexCatchup records, per index name and MemWAL shard, the merged generation the index is
	// proven to cover (index_catchup.go). Every index has an entry for every shard in
	// MemWALMerged, 0 included; a missing entry never reads as caught up.
	IndexCatchup map[string]map[string]uint64 `json:"index_catchup,omitempty"`

	schema *arrow.Schema // decoded Schema, set by decodeManifest / newManifest
}

// TransactionSummary is the part of a transaction that History reports, copied into the manifest
// so that reading history needs one small read per version.
type TransactionSummary struct {
	File        string            `json:"file"`
	ReadVersion uint64            `json:"read_version"`
	Operation   Operation         `json:"operation"`
	Properties  map[string]string `json:"properties,omitempty"`
}

// Fragment is a horizontal slice of the table: one or more data files holding the same rows.
// A row's address is Fragment.ID<<32 | row offset.
type Fragment struct {
	ID           uint64     `json:"id"`
	Files        []DataFile `json:"files"`
	PhysicalRows int64      `json:"physical_rows"`
	DeletionFile string     `json:"deletion_file,omitempty"`
	DeletedRows  int64      `json:"deleted_rows,omitempty"`
	// Partition is the partition tuple of every row of the fragment, one value per field of the
	// table's PartitionSpec (null values included); nil in an unpartitioned table.
	Partition partition.Tuple `json:"partition,omitempty"`
}

// LiveRows returns the fragment's rows that are not deleted.
func (f Fragment) LiveRows() int64 { return f.PhysicalRows - f.DeletedRows }

// DataBytes returns the size of the fragment's data files.
func (f Fragment) DataBytes() int64 {
	var n int64
	for _, df := range f.Files {
		n += df.SizeBytes
	}
	return n
}

// DataFile is one Parquet file of a fragment, relative to the table.
type DataFile struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
}

// StreamWatermark is a streaming query's last committed epoch.
type StreamWatermark struct {
	Epoch          int64  `json:"epoch"`
	Version        uint64 `json:"version"`
	TimestampNanos int64  `json:"timestamp_nanos"`
}

// ArrowSchema returns the table schema of this version.
func (m *Manifest) ArrowSchema() *arrow.Schema { return m.schema }

// Timestamp returns the commit time of this version.
func (m *Manifest) Timestamp() time.Time { return time.Unix(0, m.TimestampNanos) }

// Rows returns the number of live rows (physical rows less deleted rows).
func (m *Manifest) Rows() int64 {
	var n int64
	for _, f := range m.Fragments {
		n += f.LiveRows()
	}
	return n
}

// DataBytes returns the size of the data files of every fragment (deleted rows included: they
// are still stored).
func (m *Manifest) DataBytes() int64 {
	var n int64
	for _, f := range m.Fragments {
		n += f.DataBytes()
	}
	return n
}

// clone returns a deep-enough copy of m to derive the next version from.
func (m *Manifest) clone() *Manifest {
	c := *m
	c.Fragments = append([]Fragment(nil), m.Fragments...)
	c.Config = cloneMap(m.Config)
	c.Streams = make(map[string]StreamWatermark, len(m.Streams))
	for k, v := range m.Streams {
		c.Streams[k] = v
	}
	c.PrimaryKey = append([]string(nil), m.PrimaryKey...)
	c.PartitionSpec = append(partition.Spec(nil), m.PartitionSpec...)
	if m.MemWALMerged != nil {
		c.MemWALMerged = make(map[string]uint64, len(m.MemWALMerged))
		for k, v := range m.MemWALMerged {
			c.MemWALMerged[k] = v
		}
	}
	c.Indices = cloneIndices(m.Indices)
	c.IndexCatchup = cloneCatchup(m.IndexCatchup)
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func encodeManifest(m *Manifest) ([]byte, error) {
	return json.Marshal(m)
}

// decodeManifest parses a manifest; key names the file in errors.
func decodeManifest(key string, data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptManifest, key, err)
	}
	if m.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("%w: %s has format version %d, this build reads up to %d (upgrade flight-sink)",
			ErrUnsupportedFormat, key, m.FormatVersion, FormatVersion)
	}
	if m.FormatVersion < 1 || m.Version == 0 || (len(m.Schema) == 0 && m.SchemaFile == "") {
		return nil, fmt.Errorf("%w %s: missing format version, version or schema", ErrCorruptManifest, key)
	}
	if v, ok := parseManifestKey(key); ok && v != m.Version {
		return nil, fmt.Errorf("%w %s: file holds version %d", ErrCorruptManifest, key, m.Version)
	}
	if len(m.Schema) == 0 {
		return &m, nil // the schema is in SchemaFile: Table.Manifest reads it
	}
	sc, err := arrowschema.DecodeSchema(m.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w %s: schema: %v", ErrCorruptManifest, key, err)
	}
	m.schema = sc
	return &m, nil
}

// manifestHeader is what History needs of a manifest.
type manifestHeader struct {
	FormatVersion  int
	Version        uint64
	TimestampNanos int64
	TableID        string
	Transaction    TransactionSummary
}

// decodeManifestHeader decodes the leading header fields of a manifest from a prefix of its bytes.
// It returns io.ErrUnexpectedEOF when the prefix is too short to hold the whole header.
func decodeManifestHeader(key string, prefix []byte) (manifestHeader, error) {
	var h manifestHeader
	dec := json.NewDecoder(bytes.NewReader(prefix))
	tok, err := dec.Token()
	if err != nil {
		return h, headerErr(key, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return h, fmt.Errorf("%w %s: not a JSON object", ErrCorruptManifest, key)
	}
	seenTxn := false
	for dec.More() && !seenTxn {
		tok, err := dec.Token()
		if err != nil {
			return h, headerErr(key, err)
		}
		name, _ := tok.(string)
		var target any
		switch name {
		case "format_version":
			target = &h.FormatVersion
		case "version":
			target = &h.Version
		case "timestamp_nanos":
			target = &h.TimestampNanos
		case "table_id":
			target = &h.TableID
		case "transaction":
			target = &h.Transaction
			seenTxn = true
		default:
			var skip json.RawMessage
			target = &skip
		}
		if err := dec.Decode(target); err != nil {
			return h, headerErr(key, err)
		}
	}
	if !seenTxn {
		// The loop also ends when the prefix runs out between two fields: that is "read more".
		if _, err := dec.Token(); err != nil {
			return h, headerErr(key, err)
		}
		return h, fmt.Errorf("%w %s: no transaction summary", ErrCorruptManifest, key)
	}
	if h.FormatVersion > FormatVersion {
		return h, fmt.Errorf("%w: %s has format version %d, this build reads up to %d (upgrade flight-sink)",
			ErrUnsupportedFormat, key, h.FormatVersion, FormatVersion)
	}
	return h, nil
}

func headerErr(key string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return io.ErrUnexpectedEOF
	}
	if se, ok := err.(*json.SyntaxError); ok && se.Error() == "unexpected end of JSON input" {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w %s: %v", ErrCorruptManifest, key, err)
}
