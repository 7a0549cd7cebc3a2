package flightsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/streaming"
)

// action is one DoAction handler: it takes the JSON body and returns a value encoded as the JSON
// result.
type action struct {
	description string
	run         func(s *Service, ctx context.Context, body []byte) (any, error)
}

// actions is the DoAction table; ListActions lists it. Each body and result is documented in
// docs/protocol.md.
var actions = map[string]action{
	"create_table": {
		description: `Create a table. Body: {"table", "schema": [{"name","type","nullable"}], "primary_key"?: [cols], "memwal"?: {"shards": n}}. Result: {"table","version"}.`,
		run:         (*Service).actCreateTable,
	},
	"commit_epoch": {
		description: `Commit the staged partitions of a multi-writer epoch as one transaction, exactly once. Body: {"table","query_id","epoch_id","mode","stages":[tokens]}. Result: an ack like DoPut's (committed|duplicate|empty).`,
		run:         (*Service).actCommitEpoch,
	},
	"epoch_status": {
		description: `Whether an epoch is committed. Body: {"table","query_id","epoch_id"}. Result: {"committed": bool, "version"}.`,
		run:         (*Service).actEpochStatus,
	},
	"history": {
		description: `Transactions newest first with their properties. Body: {"table","limit"?: n (default 20, max 10000)}. Result: [{"version","timestamp","operation","properties",...}].`,
		run:         (*Service).actHistory,
	},
	"cleanup": {
		description: `Remove old versions and unreferenced files. Body: {"table", "older_than_seconds"?: n (default 7 days), "keep_last"?: n (default 1), "dry_run"?: bool}. Result: {"versions_removed": [..], "files_removed": [..], "stages_expired", "data_files_removed", "transaction_files_removed", "deletion_files_removed", "bytes_removed"}.`,
		run:         (*Service).actCleanup,
	},
	"compact": {
		description: `Compact small fragments and fragments with many deleted rows. Body: {"table", "target_rows_per_fragment"?, "max_deleted_share"?}. Result: {"version", "fragments_removed", "fragments_added", "rows_rewritten", ...}.`,
		run:         (*Service).actCompact,
	},
	"delete": {
		description: `Delete the rows matching a predicate. Body: {"table", "where": predicate JSON (docs/protocol.md)}. Result: {"version", "committed", "rows_deleted"}.`,
		run:         (*Service).actDelete,
	},
	"create_index": {
		description: `Build the primary-key index of a keyed table (upserts then look keys up through it). Body: {"table", "name"? (default "pk")}. Result: {"table", "version"}.`,
		run:         (*Service).actCreateIndex,
	},
	"optimize_indices": {
		description: `Index the fragments no index segment covers yet and merge segments. Body: {"table", "names"?: [..], "merge_all"?: bool}. Result: {"read_version", "indices": [...], "duration_ns"}.`,
		run:         (*Service).actOptimizeIndices,
	},
	"flush_memwal": {
		description: `Flush MemWAL memtables to generations. Body: {"table", "shard"?}. Result: {"shards_flushed": n}.`,
		run:         (*Service).actFlushMemWAL,
	},
	"compact_memwal_shard": {
		description: `Fold MemWAL generations into the base table. Body: {"table", "shard"? (default every shard), "min_generations"?}. Result: {"generations_reclaimed": n}.`,
		run:         (*Service).actCompactMemWAL,
	},
	"table_stats": {
		description: `Table statistics. Body: {"table"}. Result: {"table","version","rows","fragments","data_bytes","streams": {query_id: {"epoch","version"}}}.`,
		run:         (*Service).actTableStats,
	},
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
		return toStatus(fmt.Errorf("%w: unknown action %q (ListActions lists the actions this server runs)", streaming.ErrInvalidRequest, a.GetType()))
	}
	res, err := act.run(s, stream.Context(), a.GetBody())
	if err != nil {
		return toStatus(err)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&flight.Result{Body: body})
}

type columnSpec struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable *bool  `json:"nullable"`
}

func (s *Service) actCreateTable(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table      string       `json:"table"`
		Schema     []columnSpec `json:"schema"`
		PrimaryKey []string     `json:"primary_key"`
		MemWAL     *struct {
			Shards int `json:"shards"`
		} `json:"memwal"`
	}
	if err := decodeJSON("create_table body", body, &req); err != nil {
		return nil, err
	}
	if len(req.Schema) == 0 {
		return nil, fmt.Errorf("%w: create_table needs a non-empty \"schema\"", streaming.ErrInvalidRequest)
	}
	fields := make([]arrow.Field, len(req.Schema))
	for i, c := range req.Schema {
		if c.Name == "" {
			return nil, fmt.Errorf("%w: schema column %d has no name", streaming.ErrInvalidRequest, i)
		}
		dt, err := parseArrowType(c.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: column %q: %v", streaming.ErrInvalidRequest, c.Name, err)
		}
		fields[i] = arrow.Field{Name: c.Name, Type: dt, Nullable: c.Nullable == nil || *c.Nullable}
	}
	spec := streaming.CreateSpec{PrimaryKey: req.PrimaryKey}
	if req.MemWAL != nil {
		spec.MemWAL = &struct {
			Shards int `json:"shards"`
		}{Shards: req.MemWAL.Shards}
	}
	sc := arrow.NewSchema(fields, nil)
	if err := engine.CheckSchemaDepth(sc); err != nil {
		return nil, err
	}
	t, err := s.sink.CreateTable(ctx, req.Table, sc, spec)
	if err != nil {
		return nil, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"table": t.Name(), "version": m.Version}, nil
}

func (s *Service) actCommitEpoch(ctx context.Context, body []byte) (any, error) {
	var req streaming.CommitStagedRequest
	if err := decodeJSON("commit_epoch body", body, &req); err != nil {
		return nil, err
	}
	return s.sink.CommitStaged(ctx, req)
}

func (s *Service) actEpochStatus(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table   string `json:"table"`
		QueryID string `json:"query_id"`
		EpochID *int64 `json:"epoch_id"`
	}
	if err := decodeJSON("epoch_status body", body, &req); err != nil {
		return nil, err
	}
	if req.EpochID == nil {
		return nil, fmt.Errorf("%w: epoch_status needs \"epoch_id\"", streaming.ErrInvalidRequest)
	}
	st, err := s.sink.EpochStatus(ctx, req.Table, req.QueryID, *req.EpochID)
	if err != nil {
		return nil, err
	}
	res := map[string]any{"committed": st.Committed, "version": st.Version}
	if st.Route != "" {
		res["route"] = st.Route // "memwal": the epoch is held by the table's MemWAL shards, version 0
	}
	return res, nil
}

func (s *Service) actHistory(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table string `json:"table"`
		Limit int    `json:"limit"`
	}
	if err := decodeJSON("history body", body, &req); err != nil {
		return nil, err
	}
	if req.Limit == 0 {
		req.Limit = 20
	}
	if req.Limit < 1 || req.Limit > streaming.MaxLookback {
		return nil, fmt.Errorf("%w: history limit must be 1..%d, got %d", streaming.ErrInvalidRequest, streaming.MaxLookback, req.Limit)
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	h, err := t.History(ctx, req.Limit)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (s *Service) actTableStats(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table string `json:"table"`
	}
	if err := decodeJSON("table_stats body", body, &req); err != nil {
		return nil, err
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	m, err := t.Latest(ctx)
	if err != nil {
		return nil, err
	}
	stats := map[string]any{
		"table": t.Name(), "version": m.Version, "rows": m.Rows(), "fragments": len(m.Fragments),
		"data_bytes": m.DataBytes(), "primary_key": m.PrimaryKey, "streams": m.Streams,
	}
	if len(m.Indices) > 0 {
		idx := make([]map[string]any, 0, len(m.Indices))
		for _, ix := range m.Indices {
			idx = append(idx, map[string]any{"name": ix.Name, "columns": ix.Columns, "segments": len(ix.Segments),
				"unindexed_fragments": len(ix.UnindexedFragments(m))})
		}
		stats["indices"] = idx
	}
	shards, err := s.sink.MemWALStats(ctx, t, m)
	if err != nil {
		return nil, err
	}
	if shards != nil {
		stats["memwal"] = map[string]any{"shards": shards, "merged_generations": m.MemWALMerged}
	}
	return stats, nil
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

func (s *Service) actCleanup(ctx context.Context, body []byte) (any, error) {
	var req streaming.CleanupRequest
	if err := decodeJSON("cleanup body", body, &req); err != nil {
		return nil, err
	}
	return s.sink.Cleanup(ctx, req)
}

func (s *Service) actCompact(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table           string  `json:"table"`
		TargetRows      int64   `json:"target_rows_per_fragment"`
		MaxDeletedShare float64 `json:"max_deleted_share"`
	}
	if err := decodeJSON("compact body", body, &req); err != nil {
		return nil, err
	}
	if req.TargetRows < 0 || req.MaxDeletedShare < 0 || req.MaxDeletedShare > 1 {
		return nil, fmt.Errorf("%w: compact target_rows_per_fragment must be >= 0 and max_deleted_share in 0..1", streaming.ErrInvalidRequest)
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	return t.Compact(ctx, engine.CompactOptions{TargetRowsPerFragment: req.TargetRows, MaxDeletedShare: req.MaxDeletedShare})
}

func (s *Service) actDelete(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table string          `json:"table"`
		Where json.RawMessage `json:"where"`
	}
	if err := decodeJSON("delete body", body, &req); err != nil {
		return nil, err
	}
	if len(req.Where) == 0 {
		return nil, fmt.Errorf("%w: delete needs \"where\" (a predicate; to empty a table, send a complete-mode epoch with no rows)", streaming.ErrInvalidRequest)
	}
	pred, err := engine.ParsePredicate(req.Where)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", streaming.ErrInvalidRequest, err)
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	res, err := t.Delete(ctx, pred, nil)
	if err != nil {
		return nil, err
	}
	return map[string]any{"version": res.Manifest.Version, "committed": res.Committed, "rows_deleted": res.RowsDeleted}, nil
}

func (s *Service) actFlushMemWAL(ctx context.Context, body []byte) (any, error) {
	var req streaming.MemWALRequest
	if err := decodeJSON("flush_memwal body", body, &req); err != nil {
		return nil, err
	}
	n, err := s.sink.FlushMemWAL(ctx, req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"shards_flushed": n}, nil
}

func (s *Service) actCompactMemWAL(ctx context.Context, body []byte) (any, error) {
	var req streaming.MemWALRequest
	if err := decodeJSON("compact_memwal_shard body", body, &req); err != nil {
		return nil, err
	}
	if req.MinGenerations < 0 {
		return nil, fmt.Errorf("%w: min_generations must be >= 0", streaming.ErrInvalidRequest)
	}
	n, err := s.sink.CompactMemWAL(ctx, req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"generations_reclaimed": n}, nil
}

func (s *Service) actCreateIndex(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table string `json:"table"`
		Name  string `json:"name"`
	}
	if err := decodeJSON("create_index body", body, &req); err != nil {
		return nil, err
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	m, err := t.CreateIndex(ctx, engine.IndexSpec{Name: req.Name})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", streaming.ErrInvalidRequest, err)
	}
	return map[string]any{"table": t.Name(), "version": m.Version}, nil
}

func (s *Service) actOptimizeIndices(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Table    string   `json:"table"`
		Names    []string `json:"names"`
		MergeAll bool     `json:"merge_all"`
	}
	if err := decodeJSON("optimize_indices body", body, &req); err != nil {
		return nil, err
	}
	t, err := s.sink.Table(ctx, req.Table)
	if err != nil {
		return nil, err
	}
	return t.OptimizeIndices(ctx, engine.OptimizeIndexOptions{Names: req.Names, MergeAll: req.MergeAll})
}
