package flightsvc_test

// Hostile inputs beyond the wire guard's: action bodies, tickets, GetFlightInfo descriptors and
// DoPut streams a client controls, each with the status it gets (its code and ErrorInfo reason).
// After every one the server still serves, and the table "t" still holds exactly its rows.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// hostileCase is one input and the status it must get.
type hostileCase struct {
	name   string
	call   func(ctx context.Context, t *testing.T, s *testServer) error
	code   codes.Code
	reason string
}

func actionCase(name, action string, body any, code codes.Code, reason string) hostileCase {
	return hostileCase{name, func(ctx context.Context, _ *testing.T, s *testServer) error {
		_, err := s.action(ctx, action, body)
		return err
	}, code, reason}
}

func ticketCase(name string, ticket any, code codes.Code, reason string) hostileCase {
	return hostileCase{name, func(ctx context.Context, _ *testing.T, s *testServer) error {
		_, err := s.get(ctx, ticket)
		return err
	}, code, reason}
}

func infoCase(name string, desc *flight.FlightDescriptor, code codes.Code, reason string) hostileCase {
	return hostileCase{name, func(ctx context.Context, _ *testing.T, s *testServer) error {
		_, err := s.Client.GetFlightInfo(ctx, desc)
		return err
	}, code, reason}
}

// typedPutCase puts one all-null row of a column c of type dt into table "h_<name>", created.
func typedPutCase(name string, dt arrow.DataType, code codes.Code, reason string) hostileCase {
	return hostileCase{name, func(ctx context.Context, t *testing.T, s *testServer) error {
		sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: dt, Nullable: true}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(1)
		b.Field(1).AppendNull()
		rec := b.NewRecordBatch()
		defer rec.Release()
		_, err := s.put(ctx, cmdDesc(t, epochCmd("h_typed", "q", 0)), sc, rec)
		return err
	}, code, reason}
}

func rawPutCase(name string, command any, code codes.Code, reason string) hostileCase {
	return hostileCase{name, func(ctx context.Context, t *testing.T, s *testServer) error {
		_, err := s.putCmd(ctx, t, command, []int64{1})
		return err
	}, code, reason}
}

func hostileCases() []hostileCase {
	nots := func(n int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"op":"not","args":[`, n) + `{"op":"=","column":"id","value":1}` + strings.Repeat(`]}`, n))
	}
	manyIn := func(n int) json.RawMessage {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = "1"
		}
		return json.RawMessage(`{"op":"in","column":"id","values":[` + strings.Join(vals, ",") + `]}`)
	}
	cmdD := func(b string) *flight.FlightDescriptor {
		return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(b)}
	}
	const bad, notFound = codes.InvalidArgument, codes.NotFound
	return []hostileCase{
		// Actions.
		actionCase("unknown action", "frobnicate", cmd{"table": "t"}, bad, "UNKNOWN_ACTION"),
		actionCase("drop_table body not JSON", "drop_table", []byte("{"), bad, "INVALID_REQUEST"),
		actionCase("drop_table without table", "drop_table", cmd{}, bad, "INVALID_REQUEST"),
		actionCase("drop_table of ../x", "drop_table", cmd{"table": "../x"}, bad, "INVALID_TABLE_NAME"),
		actionCase("drop_table with an unknown field", "drop_table", cmd{"table": "t", "force": true}, bad, "INVALID_REQUEST"),
		actionCase("drop_table of a missing table", "drop_table", cmd{"table": "nope"}, notFound, "TABLE_NOT_FOUND"),
		actionCase("table_stats of an empty name", "table_stats", cmd{"table": ""}, bad, "INVALID_TABLE_NAME"),
		actionCase("history limit -1", "history", cmd{"table": "t", "limit": -1}, bad, "INVALID_REQUEST"),
		actionCase("history limit 10001", "history", cmd{"table": "t", "limit": 10001}, bad, "INVALID_REQUEST"),
		actionCase("delete without where", "delete", cmd{"table": "t"}, bad, "INVALID_REQUEST"),
		actionCase("delete op xor", "delete", cmd{"table": "t", "where": cmd{"op": "xor"}}, bad, "INVALID_PREDICATE"),
		actionCase("delete string for int64", "delete", cmd{"table": "t", "where": cmd{"op": "=", "column": "id", "value": "abc"}}, bad, "INVALID_PREDICATE"),
		actionCase("delete empty in", "delete", cmd{"table": "t", "where": cmd{"op": "in", "column": "id", "values": []any{}}}, bad, "INVALID_PREDICATE"),
		actionCase("delete unknown column", "delete", cmd{"table": "t", "where": cmd{"op": "is_null", "column": "nope"}}, bad, "SCHEMA_MISMATCH"),
		actionCase("delete 101 levels deep", "delete", cmd{"table": "t", "where": nots(100)}, bad, "INVALID_PREDICATE"),
		actionCase("delete in of 10,000 values", "delete", cmd{"table": "t", "where": manyIn(10_000)}, bad, "INVALID_PREDICATE"),
		actionCase("delete predicate of 2 MiB", "delete", cmd{"table": "t", "where": cmd{"op": "=", "column": "payload", "value": strings.Repeat("a", 2<<20)}}, bad, "INVALID_PREDICATE"),
		actionCase("delete where not of two args", "delete", cmd{"table": "t", "where": cmd{"op": "not", "args": []any{cmd{"op": "is_null", "column": "id"}, cmd{"op": "is_null", "column": "id"}}}}, bad, "INVALID_PREDICATE"),
		actionCase("cleanup older_than_seconds 0", "cleanup", cmd{"table": "t", "older_than_seconds": 0}, bad, "INVALID_REQUEST"),
		actionCase("cleanup keep_last 0", "cleanup", cmd{"table": "t", "keep_last": 0}, bad, "INVALID_REQUEST"),
		actionCase("compact max_deleted_share 2", "compact", cmd{"table": "t", "max_deleted_share": 2}, bad, "INVALID_REQUEST"),
		actionCase("flush_memwal of a direct table", "flush_memwal", cmd{"table": "t"}, codes.FailedPrecondition, "UNSUPPORTED"),
		actionCase("fold_memwal_shard of an unknown shard", "fold_memwal_shard", cmd{"table": "t", "shard": "nope"}, codes.FailedPrecondition, "UNSUPPORTED"),
		actionCase("epoch_status epoch -1", "epoch_status", cmd{"table": "t", "query_id": "q", "epoch_id": -1}, bad, "INVALID_REQUEST"),
		actionCase("commit_epoch of an unknown stage", "commit_epoch", cmd{"table": "t", "query_id": "s", "epoch_id": 0, "stages": []string{"not-a-token"}}, bad, "INVALID_REQUEST"),
		actionCase("create_table decimal128(39, 2)", "create_table", cmd{"table": "h_c1", "schema": []cmd{{"name": "d", "type": "decimal128(39, 2)"}}}, bad, "INVALID_REQUEST"),
		actionCase("create_table without columns", "create_table", cmd{"table": "h_c2", "schema": []cmd{}}, bad, "INVALID_REQUEST"),
		actionCase("create_table duplicate columns", "create_table", cmd{"table": "h_c3", "schema": []cmd{{"name": "a", "type": "int64"}, {"name": "a", "type": "int64"}}}, bad, "SCHEMA_MISMATCH"),
		actionCase("create_table 0 MemWAL shards", "create_table", cmd{"table": "h_c4", "schema": []cmd{{"name": "a", "type": "int64"}}, "memwal": cmd{"shards": 0}}, bad, "INVALID_REQUEST"),
		actionCase("create_table 1025 MemWAL shards", "create_table", cmd{"table": "h_c5", "schema": []cmd{{"name": "a", "type": "int64"}}, "memwal": cmd{"shards": 1025}}, bad, "INVALID_REQUEST"),
		actionCase("create_table key not a column", "create_table", cmd{"table": "h_c6", "schema": []cmd{{"name": "a", "type": "int64"}}, "primary_key": []string{"b"}}, bad, "SCHEMA_MISMATCH"),
		// DoGet tickets.
		ticketCase("ticket not JSON", []byte("{"), bad, "INVALID_REQUEST"),
		ticketCase("ticket version 0", cmd{"table": "t", "version": 0}, bad, "INVALID_REQUEST"),
		ticketCase("ticket version 999", cmd{"table": "t", "version": 999}, notFound, "VERSION_NOT_FOUND"),
		ticketCase("ticket no columns", cmd{"table": "t", "columns": []string{}}, bad, "INVALID_REQUEST"),
		ticketCase("ticket a column twice", cmd{"table": "t", "columns": []string{"id", "id"}}, bad, "SCHEMA_MISMATCH"),
		ticketCase("ticket unknown fragment", cmd{"table": "t", "fragments": []uint64{12345}}, bad, "FRAGMENT_NOT_FOUND"),
		ticketCase("ticket unknown snapshot", cmd{"table": "t", "snapshot": "nope"}, notFound, "READ_SNAPSHOT_NOT_FOUND"),
		ticketCase("ticket filter 4,990 deep", cmd{"table": "t", "filter": nots(4990)}, bad, "INVALID_PREDICATE"),
		ticketCase("ticket unknown field", cmd{"table": "t", "colums": []string{"id"}}, bad, "INVALID_REQUEST"),
		ticketCase("ticket of a missing table", cmd{"table": "nope"}, notFound, "TABLE_NOT_FOUND"),
		// GetFlightInfo descriptors.
		infoCase("PATH of two elements", &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"t", "x"}}, bad, "INVALID_REQUEST"),
		infoCase("CMD not JSON", cmdD("{"), bad, "INVALID_REQUEST"),
		infoCase("CMD filter 4,990 deep", cmdD(`{"table": "t", "filter": `+string(nots(4990))+`}`), bad, "INVALID_PREDICATE"),
		infoCase("CMD unknown column", cmdD(`{"table": "t", "columns": ["nope"]}`), bad, "SCHEMA_MISMATCH"),
		infoCase("CMD missing table", cmdD(`{"table": "nope"}`), notFound, "TABLE_NOT_FOUND"),
		infoCase("CMD with a ticket's fragments", cmdD(`{"table": "t", "fragments": [1]}`), bad, "INVALID_REQUEST"),
		infoCase("CMD with a ticket's snapshot", cmdD(`{"table": "t", "snapshot": "x"}`), bad, "INVALID_REQUEST"),
		infoCase("CMD version -1", cmdD(`{"table": "t", "version": -1}`), bad, "INVALID_REQUEST"),
		// DoPut streams.
		typedPutCase("decimal128(39, 0) column", &arrow.Decimal128Type{Precision: 39}, bad, "UNSUPPORTED_TYPE"),
		typedPutCase("list of decimal128 scale -1", arrow.ListOf(&arrow.Decimal128Type{Precision: 5, Scale: -1}), bad, "UNSUPPORTED_TYPE"),
		typedPutCase("map to decimal256(77)", arrow.MapOf(arrow.BinaryTypes.String, &arrow.Decimal256Type{Precision: 77}), bad, "UNSUPPORTED_TYPE"),
		typedPutCase("struct of decimal32(10)", arrow.StructOf(arrow.Field{Name: "x", Type: &arrow.Decimal32Type{Precision: 10}, Nullable: true}), bad, "UNSUPPORTED_TYPE"),
		typedPutCase("dense union", arrow.DenseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []arrow.UnionTypeCode{0}), bad, "UNSUPPORTED_TYPE"),
		typedPutCase("duration", arrow.FixedWidthTypes.Duration_ms, bad, "UNSUPPORTED_TYPE"),
		typedPutCase("empty struct", arrow.StructOf(), bad, "UNSUPPORTED_TYPE"),
		typedPutCase("interval month_day_nano", arrow.FixedWidthTypes.MonthDayNanoInterval, bad, "UNSUPPORTED_TYPE"),
		rawPutCase("put command not JSON", []byte("{"), bad, "INVALID_REQUEST"),
		rawPutCase("put epoch -1", cmd{"table": "t", "query_id": "q", "epoch_id": -1}, bad, "INVALID_REQUEST"),
		rawPutCase("put mode merge", cmd{"table": "t", "query_id": "q", "epoch_id": 9, "mode": "merge"}, bad, "INVALID_REQUEST"),
		rawPutCase("put query_id of 10,000 bytes", cmd{"table": "t", "query_id": strings.Repeat("q", 10_000), "epoch_id": 9}, bad, "INVALID_REQUEST"),
		rawPutCase("put route memwal to a direct table", cmd{"table": "t", "query_id": "q", "epoch_id": 9, "route": "memwal"}, codes.FailedPrecondition, "UNSUPPORTED"),
		rawPutCase("put create 0 shards", cmd{"table": "h_p1", "query_id": "q", "epoch_id": 0, "create": cmd{"memwal": cmd{"shards": 0}}}, bad, "INVALID_REQUEST"),
	}
}

// TestHostileInputs sends every hostile case over a real connection: each gets its code and
// reason, and afterwards the server still serves and table "t" holds exactly its rows.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "q", 0, []int64{1, 2, 3})
	for _, tc := range hostileCases() {
		err := tc.call(testCtx(t), t, s)
		t.Logf("| %s | %v | %s |", tc.name, codeOf(err), reasonOf(err))
		if codeOf(err) != tc.code || reasonOf(err) != tc.reason {
			t.Errorf("%s: got %v %s (%v), want %v %s", tc.name, codeOf(err), reasonOf(err), err, tc.code, tc.reason)
		}
	}
	s.wantIDs(t, "t", []int64{1, 2, 3})
}
