package flightsvc

// The wire contract: every JSON document a client sends (DoPut commands, DoGet tickets, descriptor
// commands, action bodies) and every JSON document the server answers with (acks, action results).
// docs/protocol.md documents each of them field by field, and TestProtocolDocExamples checks its
// examples against these types and the running server.
//
// Requests are decoded strictly (decodeStrict): an unknown field is an error, and a field that is
// optional is a pointer (or a slice, or a type with its own UnmarshalJSON) so that a value given
// explicitly is never mistaken for an absent one. A handler converts the request into the domain
// call's arguments (streaming and engine types, which carry no JSON tags), checking the values the
// domain would read as "absent", and converts the domain's answer into the result type here.

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/streaming"
)

// PutCommand is the JSON command of a DoPut CMD descriptor: one epoch, or one partition of a
// multi-writer epoch.
type PutCommand struct {
	Table   string  `json:"table"`
	QueryID *string `json:"query_id,omitempty"`
	EpochID *int64  `json:"epoch_id,omitempty"`
	// Mode is append (absent), complete or update.
	Mode string `json:"mode,omitempty"`
	// Route is auto (absent), direct or memwal.
	Route string `json:"route,omitempty"`
	// Lookback is the dedupe look-back, 1..10000; absent: the server's default.
	Lookback  *int           `json:"dedupe_lookback_versions,omitempty"`
	Partition *PartitionSpec `json:"partition,omitempty"`
	Create    CreateOption   `json:"create,omitzero"`
	// Rows is the number of rows the client says the stream carries, >= 0.
	Rows *int64 `json:"rows,omitempty"`
	// MergeSchema lets the epoch change the table schema (new nullable columns, type promotions:
	// arrowschema.MergeSchema); absent or false: the stream must fit the table's schema as it is.
	MergeSchema *bool `json:"merge_schema,omitempty"`
}

// PartitionSpec is the "partition" of a DoPut command: one task attempt's share of a
// multi-writer epoch.
type PartitionSpec struct {
	// ID is required.
	ID *int64 `json:"id,omitempty"`
	// Attempt defaults to 0.
	Attempt int64 `json:"attempt"`
}

// UnmarshalJSON decodes a partition strictly.
func (p *PartitionSpec) UnmarshalJSON(b []byte) error {
	type fields PartitionSpec
	return decodeNested("partition", b, (*fields)(p))
}

// CreateOption is the "create" of a DoPut command: true, false (the same as absent or null), or
// a CreateSpec object.
type CreateOption struct {
	// Enabled: create the table from the stream's schema if it does not exist.
	Enabled bool
	Spec    CreateSpec
}

// UnmarshalJSON decodes true, false, null or a CreateSpec object.
func (o *CreateOption) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "null", "false":
		*o = CreateOption{}
		return nil
	case "true":
		*o = CreateOption{Enabled: true}
		return nil
	}
	if b = bytes.TrimSpace(b); b[0] != '{' { // json hands over one whole value: never empty
		return (&decodeError{msg: "must be true, false or an object with primary_key and memwal, got " + valueKind(b)}).in("create")
	}
	*o = CreateOption{Enabled: true}
	return o.Spec.UnmarshalJSON(b)
}

// MarshalJSON encodes true for an empty spec, the spec otherwise, false when not Enabled.
func (o CreateOption) MarshalJSON() ([]byte, error) {
	switch {
	case !o.Enabled:
		return []byte("false"), nil
	case o.Spec.PrimaryKey == nil && o.Spec.MemWAL == nil && o.Spec.DataCodec == "" && o.Spec.PartitionBy == nil && o.Spec.MaxPartitionsPerWrite == nil:
		return []byte("true"), nil
	}
	type fields CreateSpec // no methods: encode the plain struct
	return json.Marshal(fields(o.Spec))
}

// CreateSpec is the table a DoPut "create" or a create_table makes: its primary key, MemWAL
// shards and data file codec.
type CreateSpec struct {
	PrimaryKey []string    `json:"primary_key,omitempty"`
	MemWAL     *MemWALSpec `json:"memwal,omitempty"`
	// DataCodec is zstd, lz4_raw, snappy or none (engine.DataCodecs); absent is the default.
	DataCodec string `json:"data_codec,omitempty"`
	// PartitionBy is the table's partition spec (absent: unpartitioned).
	PartitionBy []PartitionField `json:"partition_by,omitempty"`
	// MaxPartitionsPerWrite is the table's limit on the partitions one write holds (absent: the
	// server's --max-partitions-per-write).
	MaxPartitionsPerWrite *int `json:"max_partitions_per_write,omitempty"`
}

// PartitionField is one field of a partition_by: a top-level source column and Iceberg's
// transform ("identity", the default, "year", "month", "day", "hour", "bucket[N]", "truncate[W]").
type PartitionField struct {
	Column    string `json:"column"`
	Transform string `json:"transform,omitempty"`
}

// UnmarshalJSON decodes a partition field strictly.
func (p *PartitionField) UnmarshalJSON(b []byte) error {
	type fields PartitionField
	return decodeNested("partition_by", b, (*fields)(p))
}

// partitionSpec converts a partition_by to the domain's spec; a field that names no column or an
// unknown transform is a *partition.SpecError naming the column.
func partitionSpec(fields []PartitionField) (partition.Spec, error) {
	if fields == nil {
		return nil, nil
	}
	spec := make(partition.Spec, len(fields))
	for i, f := range fields {
		pf, err := partition.NewField(f.Column, f.Transform)
		if err != nil {
			return nil, err
		}
		spec[i] = pf
	}
	return spec, nil
}

// PartitionFields is a spec's wire form (table_stats, inspect, /status.json); nil for none.
func PartitionFields(spec partition.Spec) []PartitionField {
	if len(spec) == 0 {
		return nil
	}
	out := make([]PartitionField, len(spec))
	for i, f := range spec {
		out[i] = PartitionField{Column: f.Column, Transform: f.Transform.String()}
	}
	return out
}

// UnmarshalJSON decodes a create spec strictly.
func (c *CreateSpec) UnmarshalJSON(b []byte) error {
	type fields CreateSpec
	return decodeNested("create", b, (*fields)(c))
}

// MemWALSpec is the "memwal" of a create spec or a create_table.
type MemWALSpec struct {
	// Shards is required, 1..1024.
	Shards *int `json:"shards,omitempty"`
}

// UnmarshalJSON decodes a MemWAL spec strictly.
func (m *MemWALSpec) UnmarshalJSON(b []byte) error {
	type fields MemWALSpec
	return decodeNested("memwal", b, (*fields)(m))
}

// createSpec converts a create spec (of a DoPut "create" or a create_table) into the domain's.
func createSpec(c CreateSpec) (streaming.CreateSpec, error) {
	mw := c.MemWAL
	spec := streaming.CreateSpec{PrimaryKey: c.PrimaryKey, DataCodec: c.DataCodec}
	pb, err := partitionSpec(c.PartitionBy)
	if err != nil {
		return spec, err
	}
	spec.PartitionBy = pb
	if n := c.MaxPartitionsPerWrite; n != nil {
		if *n < 1 {
			return spec, invalidf("max_partitions_per_write must be positive, got %d", *n)
		}
		spec.MaxPartitionsPerWrite = *n
	}
	if mw != nil {
		if mw.Shards == nil {
			return spec, invalidf("memwal needs \"shards\" (1..%d)", memwal.MaxShards)
		}
		spec.MemWAL = &struct{ Shards int }{Shards: *mw.Shards}
	}
	return spec, nil
}

// Ack is the JSON app_metadata of a DoPut's PutResult, and the result of commit_epoch. It is sent
// only once what it reports is durable.
type Ack struct {
	// Status is committed, duplicate, empty or staged.
	Status  string `json:"status"`
	Table   string `json:"table"`
	QueryID string `json:"query_id,omitempty"`
	EpochID *int64 `json:"epoch_id,omitempty"`
	// Version is the version holding the epoch; absent when no version holds it (empty, staged,
	// the memwal route).
	Version uint64 `json:"version,omitempty"`
	Rows    int64  `json:"rows"`
	// Stage is the token of a staged partition, for commit_epoch.
	Stage string `json:"stage,omitempty"`
	// Route is where the epoch landed: direct or memwal.
	Route string `json:"route,omitempty"`
	// Warning, on a duplicate, says that the replay differs from the epoch that was committed.
	Warning string `json:"warning,omitempty"`
}

func ackResult(a streaming.Ack) Ack {
	return Ack{Status: string(a.Status), Table: a.Table, QueryID: a.QueryID, EpochID: a.EpochID,
		Version: a.Version, Rows: a.Rows, Stage: a.Stage, Route: string(a.Route), Warning: a.Warning}
}

// Ticket is the JSON of a DoGet ticket: a whole table, or one endpoint of a GetFlightInfo.
type Ticket struct {
	Table string `json:"table"`
	// Version is the version to read, >= 1; absent: the latest.
	Version *uint64 `json:"version,omitempty"`
	// Columns are the columns to read, in this order, at least one; absent: every column.
	Columns []string `json:"columns,omitempty"`
	// Filter is a predicate (the JSON of delete's "where"): only rows for which it is true are
	// returned; absent: every row.
	Filter json.RawMessage `json:"filter,omitempty"`
	// Fragments restricts the base rows to these fragment ids of the version (an endpoint's
	// group; empty: none); absent: every fragment.
	Fragments *[]uint64 `json:"fragments,omitempty"`
	// Snapshot is the MemWAL read snapshot of the GetFlightInfo that made the ticket: base rows
	// its MemWAL rows supersede are left out.
	Snapshot string `json:"snapshot,omitempty"`
	// MemWAL reads the snapshot's MemWAL rows (Snapshot required).
	MemWAL bool `json:"memwal,omitempty"`
	// TableID is the table incarnation the ticket was made for (engine.Manifest.TableID): once
	// the table is dropped, even if created anew, the ticket is TABLE_NOT_FOUND; absent: any.
	TableID string `json:"table_id,omitempty"`
	// Changes reads the table's change feed over a range of versions instead of a version's rows
	// (docs/protocol.md, Change feed); not with version, fragments, snapshot or memwal.
	Changes *ChangeRange `json:"changes,omitempty"`
}

// ChangeRange is the "changes" of a ticket or a descriptor command: the changes of versions
// from_version..to_version, inclusive.
type ChangeRange struct {
	// FromVersion is the first version, >= 1; required.
	FromVersion *int64 `json:"from_version"`
	// ToVersion is the last version, >= from_version; absent: the latest (with from_version past
	// the latest: no rows).
	ToVersion *int64 `json:"to_version,omitempty"`
	// SchemaVersion is the version whose schema the rows are read in; absent: to_version (the
	// latest when that is absent). GetFlightInfo sets it in the tickets it makes, so that every
	// endpoint of one range returns one schema.
	SchemaVersion *int64 `json:"schema_version,omitempty"`
}

// UnmarshalJSON decodes a change range strictly.
func (c *ChangeRange) UnmarshalJSON(b []byte) error {
	type fields ChangeRange
	return decodeNested("changes", b, (*fields)(c))
}

// DescriptorCommand is the JSON command of a CMD descriptor given to GetFlightInfo or GetSchema.
type DescriptorCommand struct {
	Table string `json:"table"`
	// Version is the version to describe, >= 1; absent: the latest.
	Version *uint64 `json:"version,omitempty"`
	// Columns and Filter are copied into every endpoint's ticket (see Ticket).
	Columns []string        `json:"columns,omitempty"`
	Filter  json.RawMessage `json:"filter,omitempty"`
	// Direct asks GetFlightInfo for the data files' locations too: every base fragment a client
	// can read by itself gets an endpoint of its own with the file's location and a DirectRead
	// as app_metadata (docs/protocol.md, Direct reads).
	Direct bool `json:"direct,omitempty"`
	// Changes describes the change feed of a range of versions (see Ticket): one endpoint per
	// run of versions; not with version or direct.
	Changes *ChangeRange `json:"changes,omitempty"`
}

// DirectRead is the app_metadata of a GetFlightInfo endpoint that carries its data file's
// location: what a client applies to the Parquet file there to get exactly the rows and schema
// of the endpoint's DoGet.
type DirectRead struct {
	// Format of the file: "parquet".
	Format string `json:"format"`
	// Fragment is the fragment id the endpoint's ticket reads.
	Fragment uint64 `json:"fragment"`
	// Rows is the number of rows the endpoint returns: the file's rows less Deleted.
	Rows int64 `json:"rows"`
	// FileRows is the number of rows in the file.
	FileRows int64 `json:"file_rows"`
	// Columns holds, for each field of the FlightInfo schema in order, its position in the
	// table's schema: the file's top-level column at that position holds it (columns are only
	// ever appended to a table, so a file has a prefix of them); a position at or past the
	// file's column count reads as nulls.
	Columns []int `json:"columns"`
	// Deleted lists the file's deleted rows as sorted, disjoint [start, end) runs of row
	// positions (0-based); empty: none.
	Deleted [][2]int64 `json:"deleted"`
	// Expires is when a presigned location stops working (RFC 3339); absent: it does not expire.
	Expires string `json:"expires,omitempty"`
}

// tableVersion is what a ticket or a descriptor names: a table and a version (0: the latest),
// and for a GetFlightInfo the columns and filter its tickets carry.
type tableVersion struct {
	table   string
	version uint64
	columns []string
	filter  json.RawMessage
	direct  bool
	changes *changeRequest // a change feed read (version unused)
}

// versionArg converts an optional version to the domain's (0: the latest).
func versionArg(v *uint64) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if *v == 0 {
		return 0, invalidf("\"version\" must be >= 1 (versions start at 1; leave it out for the latest), got 0")
	}
	return *v, nil
}

// CreateTableRequest is the body of create_table.
type CreateTableRequest struct {
	Table string `json:"table"`
	// Schema is required, at least one column.
	Schema     []ColumnSpec `json:"schema"`
	PrimaryKey []string     `json:"primary_key,omitempty"`
	MemWAL     *MemWALSpec  `json:"memwal,omitempty"`
	// DataCodec, PartitionBy and MaxPartitionsPerWrite are as in CreateSpec.
	DataCodec             string           `json:"data_codec,omitempty"`
	PartitionBy           []PartitionField `json:"partition_by,omitempty"`
	MaxPartitionsPerWrite *int             `json:"max_partitions_per_write,omitempty"`
}

// ColumnSpec is one column of a create_table schema.
type ColumnSpec struct {
	Name string `json:"name"`
	// Type is an Arrow type name (parseArrowType).
	Type string `json:"type"`
	// Nullable defaults to true.
	Nullable *bool `json:"nullable,omitempty"`
}

// UnmarshalJSON decodes a column strictly.
func (c *ColumnSpec) UnmarshalJSON(b []byte) error {
	type fields ColumnSpec
	return decodeNested("schema", b, (*fields)(c))
}

// CreateTableResult is the result of create_table: the table, its first version and its schema as
// stored, with the field ids the table gave its columns.
type CreateTableResult struct {
	Table   string `json:"table"`
	Version uint64 `json:"version"`
	TableSchema
}

// TableSchema is a table's schema as create_table and table_stats report it.
type TableSchema struct {
	Schema []SchemaField `json:"schema"`
	// SchemaID counts the table's schema changes (0: the schema it was created with).
	SchemaID int `json:"schema_id"`
	// LastFieldID is the highest field id the table ever assigned; ids are never reused.
	LastFieldID int32 `json:"last_field_id"`
}

// SchemaField is one column of a table schema with its stable field id (arrowschema.FieldIDKey).
type SchemaField struct {
	// ID is the field id; 0 for a table whose schema has no field ids (its next commit gives them).
	ID       int32  `json:"id"`
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
	// Fields are the nested fields of a struct, list or map column (a list's element, a map's key
	// and value), with their own ids.
	Fields []SchemaField `json:"fields,omitempty"`
}

func tableSchemaOf(m *engine.Manifest) TableSchema {
	return TableSchema{Schema: schemaFields(m.ArrowSchema().Fields()), SchemaID: m.SchemaID, LastFieldID: m.LastFieldID}
}

func schemaFields(fs []arrow.Field) []SchemaField {
	out := make([]SchemaField, len(fs))
	for i, f := range fs {
		id, _ := arrowschema.FieldID(f)
		out[i] = SchemaField{ID: id, Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable}
		if nt, ok := f.Type.(arrow.NestedType); ok {
			children := nt.Fields()
			if mt, ok := f.Type.(*arrow.MapType); ok {
				children = []arrow.Field{mt.KeyField(), mt.ItemField()}
			}
			out[i].Fields = schemaFields(children)
		}
	}
	return out
}

// TableVersion is the result of create_index: the table and its new version.
type TableVersion struct {
	Table   string `json:"table"`
	Version uint64 `json:"version"`
}

// CommitEpochRequest is the body of commit_epoch.
type CommitEpochRequest struct {
	Table   string `json:"table"`
	QueryID string `json:"query_id"`
	EpochID *int64 `json:"epoch_id,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// Stages is required; an empty list commits an empty epoch.
	Stages   []string `json:"stages"`
	Lookback *int     `json:"dedupe_lookback_versions,omitempty"`
	// MergeSchema lets the stages' schemas change the table schema (merged in one commit).
	MergeSchema *bool `json:"merge_schema,omitempty"`
	// Route is auto (absent), direct or memwal: where the epoch lands, as for one DoPut.
	Route string `json:"route,omitempty"`
}

// EpochStatusRequest is the body of epoch_status.
type EpochStatusRequest struct {
	Table   string `json:"table"`
	QueryID string `json:"query_id"`
	EpochID *int64 `json:"epoch_id,omitempty"`
}

// EpochStatusResult is the result of epoch_status.
type EpochStatusResult struct {
	Committed bool   `json:"committed"`
	Version   uint64 `json:"version"`
	// Route is "memwal" when the table's MemWAL shards hold the epoch (Version is then 0).
	Route string `json:"route,omitempty"`
}

// HistoryRequest is the body of history.
type HistoryRequest struct {
	Table string `json:"table"`
	// Limit is 1..10000; absent: 20.
	Limit *int `json:"limit,omitempty"`
}

// DefaultHistoryLimit is the history limit of a request that sets none.
const DefaultHistoryLimit = 20

// HistoryResult is a table's history: the result of history and cmd's history --json output.
type HistoryResult struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	// LatestVersion is the table's newest version when the history was read.
	LatestVersion uint64 `json:"latest_version"`
	// Versions are newest first.
	Versions []HistoryEntry `json:"versions"`
}

// HistoryEntry is one version of a HistoryResult.
type HistoryEntry struct {
	Version uint64 `json:"version"`
	// Timestamp is the commit time, RFC 3339 with nanoseconds, UTC.
	Timestamp       time.Time         `json:"timestamp,omitzero"`
	Operation       string            `json:"operation,omitempty"`
	ReadVersion     uint64            `json:"read_version"`
	Properties      map[string]string `json:"properties,omitempty"`
	TransactionFile string            `json:"transaction_file,omitempty"`
	// Missing marks a version whose manifest cleanup removed; it has no other field then.
	Missing bool `json:"missing,omitempty"`
}

// HistoryResultOf makes table's history from entries newest first, read at latest.
func HistoryResultOf(table string, latest uint64, h []engine.HistoryEntry) HistoryResult {
	out := HistoryResult{FormatVersion: FormatVersion, Table: table, LatestVersion: latest, Versions: make([]HistoryEntry, len(h))}
	for i, e := range h {
		out.Versions[i] = HistoryEntry{Version: e.Version, Missing: e.Missing}
		if !e.Missing {
			out.Versions[i] = HistoryEntry{Version: e.Version, Timestamp: e.Timestamp.UTC(), Operation: string(e.Operation),
				ReadVersion: e.ReadVersion, Properties: e.Properties, TransactionFile: e.TransactionFile}
		}
	}
	return out
}

// CleanupRequest is the body of cleanup.
type CleanupRequest struct {
	Table string `json:"table"`
	// OlderThanSeconds is 1..3153600000 (100 years); absent: 7 days.
	OlderThanSeconds *int64 `json:"older_than_seconds,omitempty"`
	// KeepLast is >= 1; absent: 1. The latest version is always kept.
	KeepLast *int `json:"keep_last,omitempty"`
	DryRun   bool `json:"dry_run,omitempty"`
}

// RemovedFiles counts the files a cleanup removed (or, dry, would remove) by kind. cmd's cleanup
// --json output shares it.
type RemovedFiles struct {
	DataFilesRemoved        int   `json:"data_files_removed"`
	DeletionFilesRemoved    int   `json:"deletion_files_removed"`
	TransactionFilesRemoved int   `json:"transaction_files_removed"`
	IndexFilesRemoved       int   `json:"index_files_removed"`
	BytesRemoved            int64 `json:"bytes_removed"`
	DryRun                  bool  `json:"dry_run,omitempty"`
}

// RemovedFilesOf converts the engine's count of removed files.
func RemovedFilesOf(r engine.OrphanReport) RemovedFiles {
	return RemovedFiles{DataFilesRemoved: r.DataFilesRemoved, DeletionFilesRemoved: r.DeletionFilesRemoved,
		TransactionFilesRemoved: r.TransactionFilesRemoved, IndexFilesRemoved: r.IndexFilesRemoved,
		BytesRemoved: r.BytesRemoved, DryRun: r.DryRun}
}

// CleanupResult is the result of cleanup.
type CleanupResult struct {
	FormatVersion int `json:"format_version"`
	RemovedFiles
	// VersionsRemoved lists the versions whose manifests were removed, ascending.
	VersionsRemoved []uint64 `json:"versions_removed"`
	// FilesRemoved lists every other removed file, relative to the table.
	FilesRemoved  []string `json:"files_removed"`
	StagesExpired int      `json:"stages_expired"`
}

func cleanupResult(r streaming.CleanupReport) CleanupResult {
	return CleanupResult{FormatVersion: FormatVersion, RemovedFiles: RemovedFilesOf(r.OrphanReport), VersionsRemoved: r.VersionsRemoved,
		FilesRemoved: r.FilesRemoved, StagesExpired: r.StagesExpired}
}

// CompactRequest is the body of compact.
type CompactRequest struct {
	Table string `json:"table"`
	// TargetRows is >= 1; absent: 1,048,576.
	TargetRows *int64 `json:"target_rows_per_fragment,omitempty"`
	// MaxDeletedShare is in (0, 1]; absent: 0.1.
	MaxDeletedShare *float64 `json:"max_deleted_share,omitempty"`
}

// CompactResult is the result of compact. cmd's compact --json output shares it.
type CompactResult struct {
	FormatVersion int    `json:"format_version"`
	ReadVersion   uint64 `json:"read_version"`
	// Version is the version the rewrite committed; absent when there was nothing to compact.
	Version          uint64 `json:"version,omitempty"`
	Groups           int    `json:"groups"`
	FragmentsRemoved int    `json:"fragments_removed"`
	FragmentsAdded   int    `json:"fragments_added"`
	RowsRewritten    int64  `json:"rows_rewritten"`
	// DeletedRowsDropped counts deleted rows the rewrite removed from the data for good.
	DeletedRowsDropped int64 `json:"deleted_rows_dropped"`
	BytesRead          int64 `json:"bytes_read"`
	BytesWritten       int64 `json:"bytes_written"`
	DurationNanos      int64 `json:"duration_ns"`
}

// CompactResultOf converts the engine's compaction report.
func CompactResultOf(r engine.CompactReport) CompactResult {
	return CompactResult{FormatVersion: FormatVersion, ReadVersion: r.ReadVersion, Version: r.Version, Groups: r.Groups,
		FragmentsRemoved: r.FragmentsRemoved, FragmentsAdded: r.FragmentsAdded, RowsRewritten: r.RowsRewritten,
		DeletedRowsDropped: r.DeletedRowsDropped, BytesRead: r.BytesRead, BytesWritten: r.BytesWritten,
		DurationNanos: int64(r.Duration)}
}

// DeleteRequest is the body of delete.
type DeleteRequest struct {
	Table string `json:"table"`
	// Where is required: the predicate JSON of expr.ParsePredicate.
	Where json.RawMessage `json:"where,omitempty"`
}

// DeleteResult is the result of delete.
type DeleteResult struct {
	Version     uint64 `json:"version"`
	Committed   bool   `json:"committed"`
	RowsDeleted int64  `json:"rows_deleted"`
}

// CreateIndexRequest is the body of create_index.
type CreateIndexRequest struct {
	Table string `json:"table"`
	// Name is not empty; absent: "pk".
	Name *string `json:"name,omitempty"`
}

// OptimizeIndicesRequest is the body of optimize_indices.
type OptimizeIndicesRequest struct {
	Table string `json:"table"`
	// Names lists at least one index; absent: every index.
	Names    []string `json:"names,omitempty"`
	MergeAll bool     `json:"merge_all,omitempty"`
}

// OptimizeIndicesResult is the result of optimize_indices.
type OptimizeIndicesResult struct {
	ReadVersion   uint64                `json:"read_version"`
	Indices       []IndexOptimizeResult `json:"indices"`
	DurationNanos int64                 `json:"duration_ns"`
}

// IndexOptimizeResult says what optimize_indices did to one index.
type IndexOptimizeResult struct {
	Name string `json:"name"`
	// Version is the version committed; absent when the index needed nothing.
	Version            uint64 `json:"version,omitempty"`
	FragmentsIndexed   int    `json:"fragments_indexed"`
	SegmentsMerged     int    `json:"segments_merged"`
	EntriesWritten     int64  `json:"entries_written"`
	SegmentsAfter      int    `json:"segments_after"`
	UnindexedFragments int    `json:"unindexed_fragments_after"`
}

func optimizeIndicesResult(r engine.OptimizeIndexReport) OptimizeIndicesResult {
	out := OptimizeIndicesResult{ReadVersion: r.ReadVersion, DurationNanos: int64(r.Duration)}
	if r.Indices != nil {
		out.Indices = make([]IndexOptimizeResult, len(r.Indices))
	}
	for i, ix := range r.Indices {
		out.Indices[i] = IndexOptimizeResult{Name: ix.Name, Version: ix.Version, FragmentsIndexed: ix.FragmentsIndexed,
			SegmentsMerged: ix.SegmentsMerged, EntriesWritten: ix.EntriesWritten, SegmentsAfter: ix.SegmentsAfter,
			UnindexedFragments: ix.UnindexedFragments}
	}
	return out
}

// FlushMemWALRequest is the body of flush_memwal.
type FlushMemWALRequest struct {
	Table string `json:"table"`
	// Shard is a shard id (table_stats lists them); absent: every shard.
	Shard *string `json:"shard,omitempty"`
}

// FlushMemWALResult is the result of flush_memwal.
type FlushMemWALResult struct {
	ShardsFlushed int `json:"shards_flushed"`
}

// FoldMemWALRequest is the body of fold_memwal_shard (and of its alias compact_memwal_shard).
type FoldMemWALRequest struct {
	Table string `json:"table"`
	// Shard is a shard id (table_stats lists them); absent: every shard.
	Shard *string `json:"shard,omitempty"`
	// MinGenerations is >= 1: a shard is folded only with at least this many generations
	// waiting; absent: 1.
	MinGenerations *int `json:"min_generations,omitempty"`
}

// FoldMemWALResult is the result of fold_memwal_shard (and of its alias compact_memwal_shard).
type FoldMemWALResult struct {
	GenerationsReclaimed int `json:"generations_reclaimed"`
}

// shardArg converts an optional shard id to the domain's ("": every shard).
func shardArg(shard *string) (string, error) {
	if shard == nil {
		return "", nil
	}
	if *shard == "" {
		return "", invalidf("\"shard\" must be a shard id (table_stats lists them; leave it out for every shard), got \"\"")
	}
	return *shard, nil
}

// DropTableRequest is the body of drop_table.
type DropTableRequest struct {
	Table string `json:"table"`
}

// DropTableResult is the result of drop_table: the table's newest version when it was dropped.
type DropTableResult struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	Version       uint64 `json:"version"`
}

// TableStatsRequest is the body of table_stats.
type TableStatsRequest struct {
	Table string `json:"table"`
}

// TableStats is the result of table_stats.
type TableStats struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	Version       uint64 `json:"version"`
	// Rows is BaseRows + MemWALRows: the rows a read of the table returns now.
	Rows int64 `json:"rows"`
	// BaseRows are the version's live rows, less those MemWAL rows supersede; MemWALRows the
	// acknowledged rows its MemWAL shards hold that it does not (not folded yet), with a primary
	// key one per key.
	BaseRows   int64    `json:"base_rows"`
	MemWALRows int64    `json:"memwal_rows"`
	Fragments  int      `json:"fragments"`
	DataBytes  int64    `json:"data_bytes"`
	PrimaryKey []string `json:"primary_key"`
	// PartitionBy is the table's partition spec, as create_table takes it (absent: unpartitioned).
	PartitionBy []PartitionField `json:"partition_by,omitempty"`
	// Streams maps each streaming query to its watermark: its last committed epoch, from the
	// base version or from MemWAL shard state, whichever is newer.
	Streams Streams `json:"streams"`
	// Indices is present for a table with indices.
	Indices []IndexStats `json:"indices,omitempty"`
	// MemWAL is present for a table with MemWAL shards.
	MemWAL *MemWALStats `json:"memwal,omitempty"`
	// Iceberg says how far the table's Iceberg metadata lags (absent when it cannot be read).
	Iceberg *IcebergStats `json:"iceberg,omitempty"`
	TableSchema
}

// Streams maps each streaming query id to its watermark, in table_stats and cmd's inspect --json.
type Streams map[string]StreamWatermark

// StreamWatermark is a streaming query's last committed epoch.
type StreamWatermark struct {
	Epoch int64 `json:"epoch"`
	// Version is the base version that committed it (0 while it is only in MemWAL shards).
	Version uint64 `json:"version"`
	// Timestamp is its commit (or MemWAL flush) time, RFC 3339 with nanoseconds, UTC; absent
	// while the epoch is only in a WAL.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// InMemWAL: the epoch is held by MemWAL shards, not folded into a base version yet.
	InMemWAL bool `json:"in_memwal,omitempty"`
}

// StreamsOf converts a table's stream states (memwal.TableState.Streams); never nil.
func StreamsOf(states map[string]memwal.StreamState) Streams {
	out := make(Streams, len(states))
	for q, w := range states {
		wm := StreamWatermark{Epoch: w.Epoch, Version: w.Version, InMemWAL: w.InMemWAL}
		if w.TimestampNanos != 0 {
			wm.Timestamp = time.Unix(0, w.TimestampNanos).UTC()
		}
		out[q] = wm
	}
	return out
}

// IndexStats describes one index in table_stats.
type IndexStats struct {
	Name               string   `json:"name"`
	Columns            []string `json:"columns"`
	Segments           int      `json:"segments"`
	UnindexedFragments int      `json:"unindexed_fragments"`
}

// MemWALStats describes a table's MemWAL shards in table_stats.
type MemWALStats struct {
	Shards []ShardStats `json:"shards"`
	// MergedGenerations maps each shard to the highest generation folded into the table.
	MergedGenerations map[string]uint64 `json:"merged_generations"`
}

// ShardStats describes one MemWAL shard in table_stats.
type ShardStats struct {
	Shard           string `json:"shard"`
	WriterEpoch     uint64 `json:"writer_epoch"`
	ManifestVersion uint64 `json:"manifest_version"`
	// Generations are flushed and not yet folded into the table.
	Generations    int   `json:"generations"`
	GenerationRows int64 `json:"generation_rows"`
	// MemtableRows are acknowledged and not yet in a generation.
	MemtableRows                int64  `json:"memtable_rows"`
	SealedMemtables             int    `json:"sealed_memtables"`
	UnflushedBytes              int64  `json:"unflushed_bytes"`
	NextWALPosition             uint64 `json:"next_wal_position"`
	ReplayAfterWALEntryPosition uint64 `json:"replay_after_wal_entry_position"`
	NextGeneration              uint64 `json:"next_generation"`
	Failed                      string `json:"failed,omitempty"`
	// Quarantined are generations a fold set aside because their data cannot be appended to the
	// table: acknowledged rows, kept in the generation's files, that the table does not hold.
	Quarantined []QuarantinedGeneration `json:"quarantined,omitempty"`
}

// QuarantinedGeneration describes one quarantined MemWAL generation in table_stats.
type QuarantinedGeneration struct {
	Generation uint64 `json:"generation"`
	Rows       int64  `json:"rows"`
	// Dir is the generation's directory under the table (Arrow IPC or Parquet files).
	Dir string `json:"dir"`
	// Epochs are the streaming epochs it holds, per query.
	Epochs             []EpochSpan `json:"epochs,omitempty"`
	Error              string      `json:"error"`
	QuarantinedAtNanos int64       `json:"quarantined_at_nanos"`
}

// EpochSpan is the lowest and highest epoch of one query in a MemWAL generation.
type EpochSpan struct {
	QueryID string `json:"query_id"`
	First   int64  `json:"first"`
	Last    int64  `json:"last"`
}

func tableStatsResult(m *engine.Manifest, table string, state memwal.TableState, shards []memwal.ShardStats) TableStats {
	st := TableStats{FormatVersion: FormatVersion, Table: table, Version: m.Version, Rows: state.Rows(), BaseRows: state.BaseRows, MemWALRows: state.MemWALRows,
		Fragments: len(m.Fragments), DataBytes: m.DataBytes(), PrimaryKey: m.PrimaryKey, PartitionBy: PartitionFields(m.PartitionSpec), TableSchema: tableSchemaOf(m)}
	st.Streams = StreamsOf(state.Streams)
	for _, ix := range m.Indices {
		st.Indices = append(st.Indices, IndexStats{Name: ix.Name, Columns: ix.Columns, Segments: len(ix.Segments),
			UnindexedFragments: len(ix.UnindexedFragments(m))})
	}
	if shards != nil {
		mw := &MemWALStats{Shards: make([]ShardStats, len(shards)), MergedGenerations: m.MemWALMerged}
		for i, s := range shards {
			mw.Shards[i] = ShardStats{Shard: s.Shard, WriterEpoch: s.WriterEpoch, ManifestVersion: s.ManifestVersion,
				Generations: s.Generations, GenerationRows: s.GenerationRows, MemtableRows: s.MemtableRows,
				SealedMemtables: s.SealedMemtables, UnflushedBytes: s.UnflushedBytes, NextWALPosition: s.NextWALPosition,
				ReplayAfterWALEntryPosition: s.ReplayAfterWALEntryPosition, NextGeneration: s.NextGeneration, Failed: s.Failed}
			for _, q := range s.Quarantined {
				wq := QuarantinedGeneration{Generation: q.Generation, Rows: q.Rows, Dir: memwal.GenerationDir(s.Shard, q.Dir),
					Error: q.Error, QuarantinedAtNanos: q.QuarantinedAtNanos}
				for _, e := range q.Epochs {
					wq.Epochs = append(wq.Epochs, EpochSpan{QueryID: e.QueryID, First: e.First, Last: e.Last})
				}
				mw.Shards[i].Quarantined = append(mw.Shards[i].Quarantined, wq)
			}
		}
		st.MemWAL = mw
	}
	return st
}

// FormatVersion is the format_version of the JSON documents the actions answer and cmd's --json
// outputs share (TableConfig, HistoryResult, TableStats, ...). It changes only when a field
// changes meaning or goes away; new fields may appear at any time.
const FormatVersion = 1

// GetTableConfigRequest is the body of get_table_config.
type GetTableConfigRequest struct {
	Table string `json:"table"`
}

// SetTableConfigRequest is the body of set_table_config.
type SetTableConfigRequest struct {
	Table string `json:"table"`
	// Set maps maintenance keys (engine.MaintenanceKeys) to their new values; "" restores a
	// key's default.
	Set map[string]string `json:"set"`
}

// TableConfig is a table's maintenance configuration: the result of get_table_config and
// set_table_config, and cmd's config --json output.
type TableConfig struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	// Version is the table version the settings are read from (set_table_config: the version
	// that committed them).
	Version  uint64                      `json:"version"`
	Settings []engine.MaintenanceSetting `json:"settings"`
}

// TableConfigOf describes the maintenance configuration of table version m.
func TableConfigOf(table string, m *engine.Manifest) (TableConfig, error) {
	settings, err := engine.MaintenanceSettings(m)
	if err != nil {
		return TableConfig{}, err
	}
	return TableConfig{FormatVersion: FormatVersion, Table: table, Version: m.Version, Settings: settings}, nil
}
