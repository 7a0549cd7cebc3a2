package flightsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/streaming"
)

// action is one DoAction: its ListActions description and its handler, which decodes the body
// strictly into the action's wire request type and returns its wire result type.
type action struct {
	description string
	// decode decodes a body (the golden test decodes the documented examples with it).
	decode func(name string, body []byte) error
	run    func(s *Service, ctx context.Context, name string, body []byte) (any, error)
}

// newAction makes the action whose handler is run, with request type Req and result type Res.
func newAction[Req, Res any](description string, run func(*Service, context.Context, *Req) (Res, error)) action {
	return action{
		description: description,
		decode:      func(name string, body []byte) error { return decodeStrict(name+" body", body, new(Req)) },
		run: func(s *Service, ctx context.Context, name string, body []byte) (any, error) {
			req := new(Req)
			if err := decodeStrict(name+" body", body, req); err != nil {
				return nil, err
			}
			return run(s, ctx, req)
		},
	}
}

// actions is the DoAction table; ListActions lists it. Each body and result is documented in
// docs/protocol.md.
var actions = map[string]action{
	"create_table": newAction(
		`Create a table. Body: {"table", "schema": [{"name","type","nullable"}], "primary_key"?: [cols], "memwal"?: {"shards": n}}. Result: {"table","version"}.`,
		(*Service).createTable),
	"commit_epoch": newAction(
		`Commit the staged partitions of a multi-writer epoch as one transaction, exactly once. Body: {"table","query_id","epoch_id","mode"?,"stages":[tokens],"dedupe_lookback_versions"?,"merge_schema"?}. Result: an ack like DoPut's (committed|duplicate|empty).`,
		(*Service).commitEpoch),
	"epoch_status": newAction(
		`Whether an epoch is committed. Body: {"table","query_id","epoch_id"}. Result: {"committed": bool, "version", "route"?}.`,
		(*Service).epochStatus),
	"history": newAction(
		`Transactions newest first with their properties. Body: {"table","limit"?: n (default 20, max 10000)}. Result: {"format_version","table","latest_version","versions": [{"version","timestamp","operation","read_version","properties","transaction_file"}]}.`,
		(*Service).history),
	"cleanup": newAction(
		`Remove old versions and unreferenced files. Body: {"table", "older_than_seconds"?: n (default 7 days), "keep_last"?: n (default 1), "dry_run"?: bool}. Result: {"versions_removed": [..], "files_removed": [..], "stages_expired", "data_files_removed", "transaction_files_removed", "deletion_files_removed", "index_files_removed", "bytes_removed"}.`,
		(*Service).cleanup),
	"compact": newAction(
		`Compact small fragments and fragments with many deleted rows. Body: {"table", "target_rows_per_fragment"?, "max_deleted_share"?}. Result: {"read_version", "version", "groups", "fragments_removed", "fragments_added", "rows_rewritten", ...}.`,
		(*Service).compact),
	"delete": newAction(
		`Delete the rows matching a predicate, MemWAL rows included (the shards are folded first). Body: {"table", "where": predicate JSON (docs/protocol.md)}. Result: {"version", "committed", "rows_deleted"}.`,
		(*Service).delete),
	"create_index": newAction(
		`Build the primary-key index of a keyed table (upserts then look keys up through it). Body: {"table", "name"? (default "pk")}. Result: {"table", "version"}.`,
		(*Service).createIndex),
	"optimize_indices": newAction(
		`Index the fragments no index segment covers yet and merge segments. Body: {"table", "names"?: [..], "merge_all"?: bool}. Result: {"read_version", "indices": [...], "duration_ns"}.`,
		(*Service).optimizeIndices),
	"flush_memwal": newAction(
		`Flush MemWAL memtables to generations. Body: {"table", "shard"? (a shard id; default every shard)}. Result: {"shards_flushed": n}.`,
		(*Service).flushMemWAL),
	"fold_memwal_shard": newAction(
		`Fold MemWAL generations into the base table. Body: {"table", "shard"? (a shard id; default every shard), "min_generations"?}. Result: {"generations_reclaimed": n}.`,
		(*Service).foldMemWAL),
	// compact_memwal_shard is the fold's older name, kept as an alias: same body, same answer.
	"compact_memwal_shard": newAction(
		`Alias of fold_memwal_shard (its older name): fold MemWAL generations into the base table. Body: {"table", "shard"? (a shard id; default every shard), "min_generations"?}. Result: {"generations_reclaimed": n}.`,
		(*Service).foldMemWAL),
	"drop_table": newAction(
		`Delete a table and every object under it (versions, data, MemWAL shards, Iceberg metadata); unfolded MemWAL rows go with it. Body: {"table"}. Result: {"table","version"} (its newest version when dropped). A later put with "create" makes a fresh table; one without answers TABLE_NOT_FOUND.`,
		(*Service).dropTable),
	"table_stats": newAction(
		`Table statistics. Body: {"table"}. Result: {"format_version","table","version","rows","fragments","data_bytes","primary_key","streams": {query_id: {"epoch","version","timestamp"}}, "indices"?, "memwal"?, "iceberg"?: {"enabled","iceberg_version","lag_versions","lag_seconds","metadata_file","snapshots"}}.`,
		(*Service).tableStats),
	"get_table_config": newAction(
		`A table's maintenance settings (docs/operations.md lists the keys). Body: {"table"}. Result: {"format_version","table","version","settings": [{"key","value","stored"}]}.`,
		(*Service).getTableConfig),
	"set_table_config": newAction(
		`Change maintenance settings in one commit; the next maintenance run follows them. Body: {"table","set": {key: value ("" restores the default)}}. Result: as get_table_config's, at the version that committed them. An unknown key or a bad value is INVALID_REQUEST naming the key, and changes nothing.`,
		(*Service).setTableConfig),
	"publish_iceberg": newAction(
		`Bring the table's Iceberg metadata (docs/iceberg.md) up to its newest version now. Body: {"table"}. Result: {"from_version","iceberg_version","snapshots_added","metadata_file"}.`,
		(*Service).publishIceberg),
}

// ListActions lists the actions this server runs.
func (s *Service) ListActions(_ *flight.Empty, stream flight.FlightService_ListActionsServer) error {
	names := make([]string, 0, len(actions))
	for n := range actions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := stream.Send(&flight.ActionType{Type: n, Description: actions[n].description}); err != nil {
			return err
		}
	}
	return nil
}

// DoAction runs one action and sends its JSON result.
func (s *Service) DoAction(a *flight.Action, stream flight.FlightService_DoActionServer) error {
	act, ok := actions[a.GetType()]
	if !ok {
		return toStatus(fmt.Errorf("%w %q (ListActions lists the actions this server runs)", errUnknownAction, a.GetType()))
	}
	res, err := act.run(s, stream.Context(), a.GetType(), a.GetBody())
	if err != nil {
		return toStatus(err)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&flight.Result{Body: body})
}

func (s *Service) createTable(ctx context.Context, req *CreateTableRequest) (CreateTableResult, error) {
	if len(req.Schema) == 0 {
		return CreateTableResult{}, invalidf("create_table needs a non-empty \"schema\"")
	}
	fields := make([]arrow.Field, len(req.Schema))
	for i, c := range req.Schema {
		if c.Name == "" {
			return CreateTableResult{}, invalidf("schema column %d has no name", i)
		}
		dt, err := parseArrowType(c.Type)
		if err != nil {
			return CreateTableResult{}, invalidf("column %q: %v", c.Name, err)
		}
		fields[i] = arrow.Field{Name: c.Name, Type: dt, Nullable: c.Nullable == nil || *c.Nullable}
	}
	spec, err := createSpec(CreateSpec{PrimaryKey: req.PrimaryKey, MemWAL: req.MemWAL, DataCodec: req.DataCodec,
		PartitionBy: req.PartitionBy, MaxPartitionsPerWrite: req.MaxPartitionsPerWrite})
	if err != nil {
		return CreateTableResult{}, err
	}
	sc := arrow.NewSchema(fields, nil)
	if err := arrowschema.CheckSchemaDepth(sc); err != nil {
		return CreateTableResult{}, err
	}
	t, err := s.sink.CreateTable(ctx, req.Table, sc, spec)
	if err != nil {
		return CreateTableResult{}, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return CreateTableResult{}, err
	}
	return CreateTableResult{Table: t.Name(), Version: m.Version, TableSchema: tableSchemaOf(m)}, nil
}

func (s *Service) commitEpoch(ctx context.Context, req *CommitEpochRequest) (Ack, error) {
	if req.EpochID == nil {
		return Ack{}, invalidf("commit_epoch needs \"epoch_id\"")
	}
	if req.Stages == nil {
		return Ack{}, invalidf("commit_epoch needs \"stages\", the tokens of the staged partitions ([] commits an empty epoch)")
	}
	lookback, err := lookbackArg(req.Lookback)
	if err != nil {
		return Ack{}, err
	}
	ack, err := s.sink.CommitStaged(ctx, streaming.CommitStagedRequest{Table: req.Table, QueryID: req.QueryID,
		EpochID: *req.EpochID, Mode: streaming.Mode(req.Mode), Stages: req.Stages, Lookback: lookback,
		MergeSchema: req.MergeSchema != nil && *req.MergeSchema, Route: streaming.Route(req.Route)})
	if err != nil {
		return Ack{}, err
	}
	if ack.Status == streaming.StatusCommitted {
		s.rates.record(ack.Table, ack.Rows, 1)
	}
	return ackResult(ack), nil
}

func (s *Service) epochStatus(ctx context.Context, req *EpochStatusRequest) (EpochStatusResult, error) {
	if req.EpochID == nil {
		return EpochStatusResult{}, invalidf("epoch_status needs \"epoch_id\"")
	}
	st, err := s.sink.EpochStatus(ctx, req.Table, req.QueryID, *req.EpochID)
	if err != nil {
		return EpochStatusResult{}, err
	}
	// Route "memwal": the epoch is held by the table's MemWAL shards, version 0.
	return EpochStatusResult{Committed: st.Committed, Version: st.Version, Route: string(st.Route)}, nil
}

func (s *Service) history(ctx context.Context, req *HistoryRequest) (HistoryResult, error) {
	limit := DefaultHistoryLimit
	if req.Limit != nil {
		limit = *req.Limit
		if limit < 1 || limit > streaming.MaxLookback {
			return HistoryResult{}, invalidf("history limit must be 1..%d (leave it out for %d), got %d", streaming.MaxLookback, DefaultHistoryLimit, limit)
		}
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return HistoryResult{}, err
	}
	h, err := t.History(ctx, limit)
	if err != nil {
		return HistoryResult{}, err
	}
	latest := uint64(0)
	if len(h) > 0 {
		latest = h[0].Version // History ends at the latest version
	}
	return HistoryResultOf(t.Name(), latest, h), nil
}

func (s *Service) dropTable(ctx context.Context, req *DropTableRequest) (DropTableResult, error) {
	if req.Table == "" {
		return DropTableResult{}, invalidf("drop_table needs \"table\"")
	}
	r, err := s.sink.DropTable(ctx, req.Table)
	if err != nil {
		return DropTableResult{}, err
	}
	return DropTableResult{FormatVersion: FormatVersion, Table: r.Table, Version: r.Version}, nil
}

func (s *Service) tableStats(ctx context.Context, req *TableStatsRequest) (TableStats, error) {
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return TableStats{}, err
	}
	// One snapshot: the version, its rows, the MemWAL rows and the shards' details agree.
	state, err := s.sink.TableState(ctx, t)
	if err != nil {
		return TableStats{}, err
	}
	st := tableStatsResult(state.Manifest, t.Name(), state, state.Shards)
	st.Iceberg = s.icebergStats(ctx, t)
	return st, nil
}

// parseArrowType reads the Arrow type names users write in create_table: the names arrow's
// DataType.String gives (int64, utf8, timestamp[us, tz=UTC], ...) plus common aliases.
func parseArrowType(name string) (arrow.DataType, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	simple := map[string]arrow.DataType{
		"bool": arrow.FixedWidthTypes.Boolean, "boolean": arrow.FixedWidthTypes.Boolean,
		"int8": arrow.PrimitiveTypes.Int8, "int16": arrow.PrimitiveTypes.Int16,
		"int32": arrow.PrimitiveTypes.Int32, "int64": arrow.PrimitiveTypes.Int64,
		"uint8": arrow.PrimitiveTypes.Uint8, "uint16": arrow.PrimitiveTypes.Uint16,
		"uint32": arrow.PrimitiveTypes.Uint32, "uint64": arrow.PrimitiveTypes.Uint64,
		"float16": arrow.FixedWidthTypes.Float16, "float32": arrow.PrimitiveTypes.Float32,
		"float": arrow.PrimitiveTypes.Float32, "float64": arrow.PrimitiveTypes.Float64,
		"double": arrow.PrimitiveTypes.Float64, "utf8": arrow.BinaryTypes.String,
		"string": arrow.BinaryTypes.String, "large_utf8": arrow.BinaryTypes.LargeString,
		"large_string": arrow.BinaryTypes.LargeString, "binary": arrow.BinaryTypes.Binary,
		"large_binary": arrow.BinaryTypes.LargeBinary, "date32": arrow.FixedWidthTypes.Date32,
		"date64": arrow.FixedWidthTypes.Date64,
	}
	if dt, ok := simple[n]; ok {
		return dt, nil
	}
	if strings.HasPrefix(n, "timestamp[") && strings.HasSuffix(n, "]") {
		inner := strings.TrimSuffix(strings.TrimPrefix(n, "timestamp["), "]")
		unit, tz, _ := strings.Cut(inner, ",")
		tz = strings.TrimSpace(tz)
		if tz != "" {
			if !strings.HasPrefix(tz, "tz=") {
				return nil, fmt.Errorf("bad timestamp type %q (want timestamp[us] or timestamp[us, tz=UTC])", name)
			}
			tz = strings.TrimSpace(strings.TrimPrefix(tz, "tz="))
			if strings.EqualFold(tz, "utc") {
				tz = "UTC"
			}
		}
		units := map[string]arrow.TimeUnit{"s": arrow.Second, "ms": arrow.Millisecond, "us": arrow.Microsecond, "ns": arrow.Nanosecond}
		u, ok := units[strings.TrimSpace(unit)]
		if !ok {
			return nil, fmt.Errorf("bad timestamp unit in %q (use s, ms, us or ns)", name)
		}
		return &arrow.TimestampType{Unit: u, TimeZone: tz}, nil
	}
	return nil, fmt.Errorf("unknown Arrow type %q (use names like int64, float64, bool, utf8, binary, date32, timestamp[us, tz=UTC])", name)
}

func (s *Service) cleanup(ctx context.Context, req *CleanupRequest) (CleanupResult, error) {
	c := streaming.CleanupRequest{Table: req.Table, DryRun: req.DryRun}
	if v := req.OlderThanSeconds; v != nil {
		// 0 means "the default" to the sink; on the wire an explicit 0 is out of range. The upper
		// bound is the sink's (streaming.MaxCleanupAgeSeconds).
		if *v < 1 {
			return CleanupResult{}, invalidf("cleanup older_than_seconds must be 1..%d (leave it out for 7 days), got %d", streaming.MaxCleanupAgeSeconds, *v)
		}
		c.OlderThanSeconds = *v
	}
	if v := req.KeepLast; v != nil {
		if *v < 1 {
			return CleanupResult{}, invalidf("cleanup keep_last must be >= 1 (the latest version is always kept; leave it out for 1), got %d", *v)
		}
		c.KeepLast = *v
	}
	rep, err := s.sink.Cleanup(ctx, c)
	if err != nil {
		return CleanupResult{}, err
	}
	return cleanupResult(rep), nil
}

func (s *Service) compact(ctx context.Context, req *CompactRequest) (CompactResult, error) {
	var opts engine.CompactOptions
	if v := req.TargetRows; v != nil {
		if *v < 1 {
			return CompactResult{}, invalidf("compact target_rows_per_fragment must be >= 1 (leave it out for the default), got %d", *v)
		}
		opts.TargetRowsPerFragment = *v
	}
	if v := req.MaxDeletedShare; v != nil {
		if !(*v > 0 && *v <= 1) {
			return CompactResult{}, invalidf("compact max_deleted_share must be in (0, 1] (leave it out for the default), got %v", *v)
		}
		opts.MaxDeletedShare = *v
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return CompactResult{}, err
	}
	rep, err := t.Compact(ctx, opts)
	if err != nil {
		return CompactResult{}, err
	}
	if rep.Version > 0 {
		s.sink.AfterCommit(ctx, t)
	}
	return CompactResultOf(rep), nil
}

func (s *Service) delete(ctx context.Context, req *DeleteRequest) (DeleteResult, error) {
	if len(req.Where) == 0 || string(req.Where) == "null" {
		return DeleteResult{}, invalidf("delete needs \"where\" (a predicate; to empty a table, send a complete-mode epoch with no rows)")
	}
	pred, err := expr.ParsePredicate(req.Where)
	if err != nil {
		return DeleteResult{}, fmt.Errorf("%w: delete \"where\": %w", streaming.ErrInvalidRequest, err)
	}
	res, err := s.sink.Delete(ctx, req.Table, pred)
	if err != nil {
		return DeleteResult{}, err
	}
	if res.Committed {
		if t, err := s.sink.Table(ctx, req.Table); err == nil {
			s.sink.AfterCommit(ctx, t)
		}
	}
	return DeleteResult{Version: res.Manifest.Version, Committed: res.Committed, RowsDeleted: res.RowsDeleted}, nil
}

func (s *Service) flushMemWAL(ctx context.Context, req *FlushMemWALRequest) (FlushMemWALResult, error) {
	shard, err := shardArg(req.Shard)
	if err != nil {
		return FlushMemWALResult{}, err
	}
	n, err := s.sink.FlushMemWAL(ctx, streaming.MemWALRequest{Table: req.Table, Shard: shard})
	if err != nil {
		return FlushMemWALResult{}, err
	}
	return FlushMemWALResult{ShardsFlushed: n}, nil
}

func (s *Service) foldMemWAL(ctx context.Context, req *FoldMemWALRequest) (FoldMemWALResult, error) {
	shard, err := shardArg(req.Shard)
	if err != nil {
		return FoldMemWALResult{}, err
	}
	r := streaming.MemWALRequest{Table: req.Table, Shard: shard}
	if v := req.MinGenerations; v != nil {
		if *v < 1 {
			return FoldMemWALResult{}, invalidf("min_generations must be >= 1 (leave it out for 1), got %d", *v)
		}
		r.MinGenerations = *v
	}
	n, err := s.sink.FoldMemWAL(ctx, r)
	if err != nil {
		return FoldMemWALResult{}, err
	}
	return FoldMemWALResult{GenerationsReclaimed: n}, nil
}

func (s *Service) createIndex(ctx context.Context, req *CreateIndexRequest) (TableVersion, error) {
	var spec engine.IndexSpec
	if req.Name != nil {
		if *req.Name == "" {
			return TableVersion{}, invalidf("create_index \"name\" must not be empty (leave it out for \"pk\")")
		}
		spec.Name = *req.Name
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return TableVersion{}, err
	}
	m, err := t.CreateIndex(ctx, spec)
	if err != nil {
		return TableVersion{}, fmt.Errorf("%w: %v", streaming.ErrInvalidRequest, err)
	}
	s.sink.AfterCommit(ctx, t)
	return TableVersion{Table: t.Name(), Version: m.Version}, nil
}

func (s *Service) optimizeIndices(ctx context.Context, req *OptimizeIndicesRequest) (OptimizeIndicesResult, error) {
	if req.Names != nil && len(req.Names) == 0 {
		return OptimizeIndicesResult{}, invalidf("optimize_indices \"names\" must list at least one index (leave it out for every index)")
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return OptimizeIndicesResult{}, err
	}
	rep, err := t.OptimizeIndices(ctx, engine.OptimizeIndexOptions{Names: req.Names, MergeAll: req.MergeAll})
	if err != nil {
		return OptimizeIndicesResult{}, err
	}
	s.sink.AfterCommit(ctx, t)
	return optimizeIndicesResult(rep), nil
}

func (s *Service) getTableConfig(ctx context.Context, req *GetTableConfigRequest) (TableConfig, error) {
	t, m, err := s.manifestFor(ctx, tableVersion{table: req.Table})
	if err != nil {
		return TableConfig{}, err
	}
	return TableConfigOf(t.Name(), m)
}

func (s *Service) setTableConfig(ctx context.Context, req *SetTableConfigRequest) (TableConfig, error) {
	if len(req.Set) == 0 {
		return TableConfig{}, invalidf("set_table_config needs \"set\": {key: value, ...} (keys: %s)", strings.Join(engine.MaintenanceKeys(), ", "))
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return TableConfig{}, err
	}
	m, err := t.SetMaintenance(ctx, req.Set, nil)
	if errors.Is(err, engine.ErrInvalidConfig) {
		return TableConfig{}, fmt.Errorf("%w: %w", streaming.ErrInvalidRequest, err)
	}
	if err != nil {
		return TableConfig{}, err
	}
	keys := make([]string, 0, len(req.Set))
	for k := range req.Set {
		keys = append(keys, k+"="+req.Set[k])
	}
	sort.Strings(keys)
	requestLogger(ctx, s.logger).Info("table maintenance settings changed", "table", t.Name(), "version", m.Version, "set", keys)
	s.sink.AfterCommit(ctx, t)
	return TableConfigOf(t.Name(), m)
}
