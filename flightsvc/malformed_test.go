package flightsvc_test

// Bad requests: each gets the gRPC code a client can act on, commits nothing, and leaves the
// server serving.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// putRaw streams rowSchema batches under a raw command.
func (c *flightConn) putRaw(ctx context.Context, t testing.TB, command string, ids ...int64) error {
	b := batch(ids...)
	defer b.Release()
	_, err := c.put(ctx, cmdDesc(t, []byte(command)), rowSchema, b)
	return err
}

// putSchema streams one batch of an arbitrary schema, built by fill, under command.
func (c *flightConn) putSchema(ctx context.Context, t testing.TB, command any, sc *arrow.Schema, fill func(*array.RecordBuilder)) error {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	fill(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	_, err := c.put(ctx, cmdDesc(t, command), sc, rec)
	return err
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "good", 0, idRange(0, 5)), "committed", 2)
	s.mustAction(t, "create_table", cmd{"table": "pk", "primary_key": []string{"id"},
		"schema": []cmd{{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}, nil)
	s.mustAction(t, "create_table", cmd{"table": "mw", "memwal": cmd{"shards": 1},
		"schema": []cmd{{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}, nil)

	with := func(kv ...any) cmd {
		c := cmd{"table": "t", "query_id": "q", "epoch_id": 1}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(c, kv[i].(string))
			} else {
				c[kv[i].(string)] = kv[i+1]
			}
		}
		return c
	}
	put := func(c any) func(context.Context) error {
		return func(ctx context.Context) error { _, err := s.putCmd(ctx, t, c, idRange(100, 3)); return err }
	}
	raw := func(command string) func(context.Context) error {
		return func(ctx context.Context) error { return s.putRaw(ctx, t, command, 100, 101) }
	}
	act := func(typ string, body any) func(context.Context) error {
		return func(ctx context.Context) error { _, err := s.action(ctx, typ, body); return err }
	}
	get := func(tk any) func(context.Context) error {
		return func(ctx context.Context) error { _, err := s.get(ctx, tk); return err }
	}
	typed := func(c any, fields ...arrow.Field) func(context.Context) error {
		sc := arrow.NewSchema(fields, nil)
		return func(ctx context.Context) error {
			return s.putSchema(ctx, t, c, sc, func(b *array.RecordBuilder) {
				for i, f := range fields {
					switch f.Type.ID() {
					case arrow.INT64:
						b.Field(i).(*array.Int64Builder).Append(7)
					case arrow.INT32:
						b.Field(i).(*array.Int32Builder).Append(7)
					case arrow.STRING:
						b.Field(i).(*array.StringBuilder).Append("x")
					}
				}
			})
		}
	}
	idInt64 := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	payload := arrow.Field{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true}

	cases := []struct {
		name   string
		do     func(context.Context) error
		code   codes.Code
		substr string
	}{
		// The command.
		{"bad JSON command", raw(`{"table": "t", "query_id": "q", "epoch_id": `), codes.InvalidArgument, "JSON"},
		{"command is not an object", raw(`[1, 2, 3]`), codes.InvalidArgument, "JSON"},
		{"trailing data after command", raw(`{"table": "t", "query_id": "q", "epoch_id": 1} {}`), codes.InvalidArgument, "trailing"},
		{"empty command", raw(``), codes.InvalidArgument, ""},
		{"missing table", put(with("table", nil)), codes.InvalidArgument, "table"},
		{"missing query_id", put(with("query_id", nil)), codes.InvalidArgument, "query_id"},
		{"blank query_id", put(with("query_id", "   ")), codes.InvalidArgument, "query_id"},
		{"negative epoch_id", put(with("epoch_id", -1)), codes.InvalidArgument, "epoch_id"},
		{"missing epoch_id", put(with("epoch_id", nil)), codes.InvalidArgument, "epoch_id"},
		{"epoch_id as a string", put(with("epoch_id", "1")), codes.InvalidArgument, "epoch_id"},
		{"fractional epoch_id", raw(`{"table": "t", "query_id": "q", "epoch_id": 1.5}`), codes.InvalidArgument, "epoch_id"},
		{"bad mode", put(with("mode", "upsert")), codes.InvalidArgument, "mode"},
		{"bad route", put(with("route", "sideways")), codes.InvalidArgument, "route"},
		{"look-back -1", put(with("dedupe_lookback_versions", -1)), codes.InvalidArgument, "dedupe_lookback_versions"},
		{"look-back 10001", put(with("dedupe_lookback_versions", 10001)), codes.InvalidArgument, "dedupe_lookback_versions"},
		{"negative partition", put(with("partition", cmd{"id": -1, "attempt": 0})), codes.InvalidArgument, "partition"},
		// Strict decoding: an unknown field is never ignored, a value given is never read as absent.
		{"look-back given as 0", put(with("dedupe_lookback_versions", 0)), codes.InvalidArgument, "dedupe_lookback_versions must be 1..10000"},
		{"misspelt merge_schema", put(with("merge_shema", true)), codes.InvalidArgument, `unknown field "merge_shema" in DoPut command`},
		{"truncate option", put(with("truncate", true)), codes.InvalidArgument, `unknown field "truncate" in DoPut command`},
		{"write_mode option", put(with("write_mode", "overwrite")), codes.InvalidArgument, `unknown field "write_mode" in DoPut command`},
		{"unknown field in partition", put(with("partition", cmd{"id": 0, "atempt": 1})), codes.InvalidArgument, `unknown field "atempt" in DoPut command field "partition"`},
		{"partition without id", put(with("partition", cmd{"attempt": 0})), codes.InvalidArgument, `"partition" needs "id"`},
		{"partition is not an object", put(with("partition", 3)), codes.InvalidArgument, `field "partition" must be a JSON object`},
		{"unknown field in create", put(with("table", "fresh", "create", cmd{"primary_keys": []string{"id"}})), codes.InvalidArgument, `unknown field "primary_keys" in DoPut command field "create"`},
		{"unknown field in create.memwal", put(with("table", "fresh", "create", cmd{"memwal": cmd{"shard": 2}})), codes.InvalidArgument, `unknown field "shard" in DoPut command field "create.memwal"`},
		{"create.memwal without shards", put(with("table", "fresh", "create", cmd{"memwal": cmd{}})), codes.InvalidArgument, `memwal needs "shards"`},
		{"negative rows", put(with("rows", -1)), codes.InvalidArgument, "rows"},
		{"epoch_id past int64", raw(`{"table": "t", "query_id": "q", "epoch_id": 9223372036854775808}`), codes.InvalidArgument, `field "epoch_id" must be an integer`},
		{"trailing brace after command", raw(`{"table": "t", "query_id": "q", "epoch_id": 1}}`), codes.InvalidArgument, "trailing"},
		{"null command", raw(`null`), codes.InvalidArgument, "must be a JSON object"},
		{"create is not a spec", put(with("create", 5)), codes.InvalidArgument, "create"},
		{"create with 0 memwal shards", put(with("table", "fresh", "create", cmd{"memwal": cmd{"shards": 0}})), codes.InvalidArgument, "shards"},
		{"create with unknown primary key", put(with("table", "fresh", "create", cmd{"primary_key": []string{"nope"}})), codes.InvalidArgument, "primary key"},
		// The table name.
		{"path traversal ../etc", put(with("table", "../etc", "create", true)), codes.InvalidArgument, "table name"},
		{"nested name a/b", put(with("table", "a/b", "create", true)), codes.InvalidArgument, "table name"},
		{"hidden name .x", put(with("table", ".x", "create", true)), codes.InvalidArgument, "table name"},
		{"unknown table without create", put(with("table", "fresh")), codes.NotFound, "create"},
		// The data.
		{"schema mismatch: wrong type", typed(with(), arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}, payload), codes.InvalidArgument, "id"},
		// (A narrower type is an older schema of the table and lands, widened: schema_evolve_test.go.)
		{"schema mismatch: int32 for utf8", typed(with(), idInt64, arrow.Field{Name: "payload", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), codes.InvalidArgument, "payload"},
		{"schema mismatch: extra column", typed(with(), idInt64, payload, arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int64}), codes.InvalidArgument, "extra"},
		{"schema mismatch: missing column", typed(with(), payload), codes.InvalidArgument, "id"},
		// Valid requests this server or table cannot serve.
		{"memwal route", put(with("route", "memwal")), codes.FailedPrecondition, "memwal"},
		{"complete mode on route memwal", put(with("table", "mw", "mode", "complete", "route", "memwal")), codes.FailedPrecondition, "complete"},
		{"update mode on a primary-key table as staged partitions", put(with("table", "pk", "mode", "update", "partition", cmd{"id": 0, "attempt": 0})), codes.FailedPrecondition, "primary key"},
		// PATH descriptors.
		{"PATH of two elements", func(ctx context.Context) error {
			b := batch(1)
			defer b.Release()
			_, err := s.put(ctx, pathDesc("t", "x"), rowSchema, b)
			return err
		}, codes.InvalidArgument, "PATH"},
		{"PATH traversal", func(ctx context.Context) error {
			b := batch(1)
			defer b.Release()
			_, err := s.put(ctx, pathDesc("../t"), rowSchema, b)
			return err
		}, codes.InvalidArgument, ""},
		{"PATH of unknown table", func(ctx context.Context) error {
			b := batch(1)
			defer b.Release()
			_, err := s.put(ctx, pathDesc("fresh"), rowSchema, b)
			return err
		}, codes.NotFound, ""},
		{"descriptor type UNKNOWN", func(ctx context.Context) error {
			b := batch(1)
			defer b.Release()
			_, err := s.put(ctx, &flight.FlightDescriptor{Type: flight.DescriptorUNKNOWN, Cmd: []byte(`{"table":"t"}`)}, rowSchema, b)
			return err
		}, codes.InvalidArgument, "descriptor"},
		// Broken streams.
		{"no descriptor", func(ctx context.Context) error {
			b := batch(1)
			defer b.Release()
			_, err := s.put(ctx, nil, rowSchema, b)
			return err
		}, codes.InvalidArgument, "descriptor"},
		{"stream ends before the schema", func(ctx context.Context) error {
			stream, err := s.Client.DoPut(ctx)
			if err != nil {
				return err
			}
			_ = stream.CloseSend()
			_, err = recvAck(stream)
			return err
		}, codes.InvalidArgument, "schema"},
		{"first message is not a schema", func(ctx context.Context) error {
			stream, err := s.Client.DoPut(ctx)
			if err != nil {
				return err
			}
			_ = stream.Send(&flight.FlightData{FlightDescriptor: cmdDesc(t, with()), DataHeader: []byte("not a flatbuffer message"), DataBody: []byte("x")})
			_ = stream.CloseSend()
			_, err = recvAck(stream)
			return err
		}, codes.InvalidArgument, ""},
		{"garbage IPC after two good batches", func(ctx context.Context) error {
			return putThenBreak(ctx, t, &s.flightConn, with(), func(stream flight.FlightService_DoPutClient) {
				_ = stream.Send(&flight.FlightData{DataHeader: []byte("\x10\x00\x00\x00garbage-header-bytes"), DataBody: []byte("body")})
			})
		}, codes.InvalidArgument, ""},
		{"IPC schema message again mid-stream", func(ctx context.Context) error {
			return putThenBreak(ctx, t, &s.flightConn, with(), func(stream flight.FlightService_DoPutClient) {
				// A second writer on the same stream starts with a schema message.
				w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
				b := batch(900)
				defer b.Release()
				_ = w.Write(b)
			})
		}, codes.InvalidArgument, ""},
		// Actions.
		{"unknown action", act("drop_everything", cmd{"table": "t"}), codes.InvalidArgument, "unknown action"},
		{"empty action type", act("", cmd{}), codes.InvalidArgument, "unknown action"},
		{"action body is not JSON", act("epoch_status", []byte("{not json")), codes.InvalidArgument, "JSON"},
		{"epoch_status without epoch_id", act("epoch_status", cmd{"table": "t", "query_id": "q"}), codes.InvalidArgument, "epoch_id"},
		{"epoch_status without query_id", act("epoch_status", cmd{"table": "t", "epoch_id": 0}), codes.InvalidArgument, "query_id"},
		{"history limit too large", act("history", cmd{"table": "t", "limit": 10001}), codes.InvalidArgument, "limit"},
		{"history limit given as 0", act("history", cmd{"table": "t", "limit": 0}), codes.InvalidArgument, "limit must be 1..10000"},
		{"history limit as a string", act("history", cmd{"table": "t", "limit": "5"}), codes.InvalidArgument, `history body field "limit" must be an integer, got string`},
		{"cleanup keep_last given as 0", act("cleanup", cmd{"table": "t", "keep_last": 0}), codes.InvalidArgument, "keep_last must be >= 1"},
		{"cleanup older_than_seconds given as 0", act("cleanup", cmd{"table": "t", "older_than_seconds": 0}), codes.InvalidArgument, "older_than_seconds must be 1.."},
		{"compact target_rows_per_fragment given as 0", act("compact", cmd{"table": "t", "target_rows_per_fragment": 0}), codes.InvalidArgument, "target_rows_per_fragment"},
		{"compact max_deleted_share given as 0", act("compact", cmd{"table": "t", "max_deleted_share": 0}), codes.InvalidArgument, "max_deleted_share"},
		{"compact max_deleted_share 1.5", act("compact", cmd{"table": "t", "max_deleted_share": 1.5}), codes.InvalidArgument, "max_deleted_share"},
		{"create_index with an empty name", act("create_index", cmd{"table": "pk", "name": ""}), codes.InvalidArgument, "name"},
		{"optimize_indices with no names", act("optimize_indices", cmd{"table": "t", "names": []string{}}), codes.InvalidArgument, "names"},
		{"flush_memwal with an empty shard", act("flush_memwal", cmd{"table": "mw", "shard": ""}), codes.InvalidArgument, "shard"},
		{"flush_memwal with a shard number", act("flush_memwal", cmd{"table": "mw", "shard": 0}), codes.InvalidArgument, `flush_memwal body field "shard" must be a string`},
		{"flush_memwal with min_generations", act("flush_memwal", cmd{"table": "mw", "min_generations": 2}), codes.InvalidArgument, `unknown field "min_generations" in flush_memwal body`},
		{"fold_memwal_shard min_generations given as 0", act("fold_memwal_shard", cmd{"table": "mw", "min_generations": 0}), codes.InvalidArgument, "min_generations must be >= 1"},
		{"compact_memwal_shard min_generations given as 0", act("compact_memwal_shard", cmd{"table": "mw", "min_generations": 0}), codes.InvalidArgument, "min_generations must be >= 1"},
		{"commit_epoch without stages", act("commit_epoch", cmd{"table": "t", "query_id": "q", "epoch_id": 1, "mode": "complete"}), codes.InvalidArgument, `"stages"`},
		{"commit_epoch without epoch_id", act("commit_epoch", cmd{"table": "t", "query_id": "q", "stages": []string{}}), codes.InvalidArgument, "epoch_id"},
		{"commit_epoch look-back given as 0", act("commit_epoch", cmd{"table": "t", "query_id": "q", "epoch_id": 1, "stages": []string{}, "dedupe_lookback_versions": 0}), codes.InvalidArgument, "dedupe_lookback_versions must be 1..10000"},
		{"create_table column with an unknown field", act("create_table", cmd{"table": "fresh", "schema": []cmd{{"name": "id", "type": "int64", "nulable": false}}}), codes.InvalidArgument, `unknown field "nulable" in create_table body field "schema"`},
		{"create_table memwal without shards", act("create_table", cmd{"table": "fresh", "memwal": cmd{}, "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.InvalidArgument, `memwal needs "shards"`},
		{"delete predicate with an unknown field", act("delete", cmd{"table": "t", "where": cmd{"op": "=", "colum": "id", "value": 1}}), codes.InvalidArgument, "colum"},
		{"delete predicate with an unknown field nested", act("delete", cmd{"table": "t", "where": cmd{"op": "not", "args": []cmd{{"op": "is_null", "column": "id", "vlaue": 1}}}}), codes.InvalidArgument, "vlaue"},
		{"delete with a null where", act("delete", cmd{"table": "t", "where": nil}), codes.InvalidArgument, "where"},
		{"table_stats of unknown table", act("table_stats", cmd{"table": "fresh"}), codes.NotFound, ""},
		{"create_table of existing table", act("create_table", cmd{"table": "t", "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.AlreadyExists, ""},
		{"create_table with unknown type", act("create_table", cmd{"table": "fresh", "schema": []cmd{{"name": "id", "type": "int65"}}}), codes.InvalidArgument, "int65"},
		{"create_table without schema", act("create_table", cmd{"table": "fresh"}), codes.InvalidArgument, "schema"},
		{"create_table with unknown primary key", act("create_table", cmd{"table": "fresh", "primary_key": []string{"nope"}, "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.InvalidArgument, "nope"},
		{"create_table with -1 memwal shards", act("create_table", cmd{"table": "fresh", "memwal": cmd{"shards": -1}, "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.InvalidArgument, "shards"},
		{"create_table with 5000 memwal shards", act("create_table", cmd{"table": "fresh", "memwal": cmd{"shards": 5000}, "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.InvalidArgument, "shards"},
		{"create_table with a primary key named twice", act("create_table", cmd{"table": "fresh", "primary_key": []string{"id", "id"}, "schema": []cmd{{"name": "id", "type": "int64", "nullable": false}}}), codes.InvalidArgument, "twice"},
		{"cleanup older_than_seconds past a Duration", act("cleanup", cmd{"table": "t", "older_than_seconds": uint64(18446744074)}), codes.InvalidArgument, "older_than_seconds"},
		{"cleanup older_than_seconds just past 100 years", act("cleanup", cmd{"table": "t", "older_than_seconds": 100*365*24*3600 + 1}), codes.InvalidArgument, "older_than_seconds"},
		{"cleanup negative keep_last", act("cleanup", cmd{"table": "t", "keep_last": -1}), codes.InvalidArgument, "keep_last"},
		{"delete with a string for an int64", act("delete", cmd{"table": "t", "where": cmd{"op": "=", "column": "id", "value": "seven"}}), codes.InvalidArgument, "id"},
		{"delete with op like", act("delete", cmd{"table": "t", "where": cmd{"op": "like", "column": "payload", "value": "a%"}}), codes.InvalidArgument, "like"},
		{"delete with an empty in", act("delete", cmd{"table": "t", "where": cmd{"op": "in", "column": "id", "values": []int{}}}), codes.InvalidArgument, "in"},
		{"delete with an unknown column", act("delete", cmd{"table": "t", "where": cmd{"op": "=", "column": "nope", "value": 1}}), codes.InvalidArgument, "nope"},
		{"delete with a predicate that is not an object", act("delete", cmd{"table": "t", "where": []int{1}}), codes.InvalidArgument, "predicate"},
		{"create_table with bad name", act("create_table", cmd{"table": "../x", "schema": []cmd{{"name": "id", "type": "int64"}}}), codes.InvalidArgument, ""},
		// Reads.
		{"ticket is not JSON", get([]byte("t")), codes.InvalidArgument, "ticket"},
		{"ticket of unknown table", get(cmd{"table": "fresh"}), codes.NotFound, ""},
		{"ticket of unknown version", get(cmd{"table": "t", "version": 99}), codes.NotFound, ""},
		{"ticket with unknown column", get(cmd{"table": "t", "columns": []string{"nope"}}), codes.InvalidArgument, "nope"},
		{"ticket with bad table name", get(cmd{"table": "../../etc"}), codes.InvalidArgument, ""},
		{"ticket with an unknown field", get(cmd{"table": "t", "fliter": cmd{"op": "=", "column": "id", "value": 1}}), codes.InvalidArgument, `unknown field "fliter" in ticket`},
		{"ticket filter on an unknown column", get(cmd{"table": "t", "filter": cmd{"op": "=", "column": "nope", "value": 1}}), codes.InvalidArgument, "nope"},
		{"ticket filter with a literal of the wrong type", get(cmd{"table": "t", "filter": cmd{"op": "=", "column": "id", "value": "x"}}), codes.InvalidArgument, `column "id"`},
		{"ticket filter with an unknown field", get(cmd{"table": "t", "filter": cmd{"op": "=", "colum": "id", "value": 1}}), codes.InvalidArgument, "colum"},
		{"ticket filter is not a predicate", get(cmd{"table": "t", "filter": 3}), codes.InvalidArgument, "filter"},
		{"ticket with an unknown fragment", get(cmd{"table": "t", "version": 1, "fragments": []int{12345}}), codes.InvalidArgument, "12345"},
		{"ticket memwal without snapshot", get(cmd{"table": "t", "memwal": true}), codes.InvalidArgument, "snapshot"},
		{"ticket with an unknown snapshot", get(cmd{"table": "t", "snapshot": "0b7e7c1c-3f39-4a31-9a55-9f5b1b1c0d11"}), codes.NotFound, "GetFlightInfo"},
		{"ticket with version 0", get(cmd{"table": "t", "version": 0}), codes.InvalidArgument, "version"},
		{"ticket with no columns", get(cmd{"table": "t", "columns": []string{}}), codes.InvalidArgument, "columns"},
		{"ticket with a negative version", get(cmd{"table": "t", "version": -1}), codes.InvalidArgument, `ticket field "version" must be a non-negative integer`},
		{"descriptor command with an unknown field", func(ctx context.Context) error {
			_, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(`{"table": "t", "colums": ["id"]}`)})
			return err
		}, codes.InvalidArgument, `unknown field "colums" in descriptor command`},
		{"descriptor command with a bad filter", func(ctx context.Context) error {
			_, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(`{"table": "t", "filter": {"op": "<", "column": "nope", "value": 1}}`)})
			return err
		}, codes.InvalidArgument, "nope"},
		{"GetFlightInfo of unknown table", func(ctx context.Context) error {
			_, err := s.Client.GetFlightInfo(ctx, pathDesc("fresh"))
			return err
		}, codes.NotFound, ""},
		{"GetSchema with a bad descriptor", func(ctx context.Context) error {
			_, err := s.Client.GetSchema(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte("{")})
			return err
		}, codes.InvalidArgument, ""},
	}
	if len(cases) < 12 {
		t.Fatal("the table must keep at least 12 cases")
	}
	tables := func() int {
		stream, err := s.Client.ListFlights(testCtx(t), &flight.Criteria{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			if _, err := stream.Recv(); err == io.EOF {
				return n
			} else if err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	nTables := tables()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, beforePK := s.version(t, "t"), s.version(t, "pk")
			err := tc.do(testCtx(t))
			t.Log(err)
			wantCode(t, err, tc.code)
			if tc.substr != "" {
				wantCode(t, err, tc.code, tc.substr)
			}
			if v, vpk := s.version(t, "t"), s.version(t, "pk"); v != before || vpk != beforePK {
				t.Fatalf("versions moved: t %d -> %d, pk %d -> %d", before, v, beforePK, vpk)
			}
			if n := tables(); n != nTables {
				t.Fatalf("%d tables, want %d", n, nTables)
			}
		})
	}
	// Still serving, and nothing of the above landed.
	wantAck(t, s.putEpoch(t, "t", "good", 1, idRange(5, 5)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 10))
}

// TestUnknownFieldInEveryAction: every action ListActions lists refuses a body with a field it
// does not have, naming the field and the action, before it does anything.
func TestUnknownFieldInEveryAction(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 5)), "committed", 2)
	stream, err := s.Client.ListActions(testCtx(t), &flight.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		a, err := stream.Recv()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		names = append(names, a.Type)
	}
	if len(names) < 12 {
		t.Fatalf("ListActions lists %d actions: %v", len(names), names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			// Decoding comes first: the unknown field is refused before any other field is missed.
			body := cmd{"table": "t", "bogus_option": true}
			_, err := s.action(testCtx(t), name, body)
			wantCode(t, err, codes.InvalidArgument, fmt.Sprintf(`unknown field "bogus_option" in %s body`, name))
			if v := s.version(t, "t"); v != 2 {
				t.Fatalf("%s with an unknown field moved the table to version %d", name, v)
			}
		})
	}
}

// putThenBreak starts a good epoch (schema and two batches), lets breakIt send something that
// breaks the stream, then sends a third good batch and closes. It returns the call's error.
func putThenBreak(ctx context.Context, t testing.TB, c *flightConn, command cmd, breakIt func(flight.FlightService_DoPutClient)) error {
	stream, err := c.Client.DoPut(ctx)
	if err != nil {
		return err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, command))
	for _, ids := range [][]int64{idRange(100, 3), idRange(103, 3)} {
		b := batch(ids...)
		_ = w.Write(b)
		b.Release()
	}
	breakIt(stream)
	b := batch(idRange(106, 3)...)
	_ = w.Write(b)
	b.Release()
	w.Close()
	_ = stream.CloseSend()
	a, err := recvAck(stream)
	if err == nil {
		t.Logf("broken stream acknowledged: %+v", a)
	}
	return err
}

// TestMetadataOnlyMessageMidEpoch: a FlightData carrying only app_metadata (pyarrow's
// write_metadata) in the middle of an epoch must not stop the reader there; the epoch commits
// with all its rows, not the ones read before the message.
func TestMetadataOnlyMessageMidEpoch(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	stream, err := s.Client.DoPut(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// One before the schema too, and the writer's own WriteMetadata between batches.
	if err := stream.Send(&flight.FlightData{AppMetadata: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, epochCmd("t", "q", 0)))
	for i := int64(0); i < 4; i++ {
		b := batch(idRange(i*10, 10)...)
		if err := w.WriteWithAppMetadata(b, []byte("batch-meta")); err != nil {
			t.Fatal(err)
		}
		b.Release()
		switch i {
		case 1:
			if err := stream.Send(&flight.FlightData{AppMetadata: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := w.WriteMetadata([]byte(`{"progress": 0.75}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	_ = stream.CloseSend()
	a, err := recvAck(stream)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", 2)
	if a.Rows != 40 {
		t.Fatalf("ack %+v, want 40 rows", a)
	}
	s.wantIDs(t, "t", idRange(0, 40))
}

// TestOversizeMessage: a message over Config.MaxMessageBytes is ResourceExhausted and commits
// nothing; the server serves on.
func TestOversizeMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxMessageBytes: 1 << 20})
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 5)), "committed", 2)

	b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
	pad := strings.Repeat("p", 1<<10)
	for i := int64(0); i < 4096; i++ { // 4 MiB in one batch, one message
		b.Field(0).(*array.Int64Builder).Append(1000 + i)
		b.Field(1).(*array.StringBuilder).Append(pad)
	}
	big := b.NewRecordBatch()
	b.Release()
	defer big.Release()
	small := batch(idRange(900, 3)...)
	defer small.Release()
	_, err := s.put(testCtx(t), cmdDesc(t, epochCmd("t", "q", 1)), rowSchema, small, big)
	wantCode(t, err, codes.ResourceExhausted)
	if v := s.version(t, "t"); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
	// Under the limit, the same epoch goes through.
	wantAck(t, s.putEpoch(t, "t", "q", 1, idRange(5, 5)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 10))
}

// TestCancelMidStream: a client that goes away in the middle of an epoch (no CloseSend) commits
// nothing, and the server serves on.
func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 5)), "committed", 2)

	for _, mode := range []string{"append", "complete"} {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := s.Client.DoPut(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
		c := epochCmd("t", "q", 1)
		c["mode"] = mode
		w.SetFlightDescriptor(cmdDesc(t, c))
		for i := int64(0); i < 5; i++ {
			b := batch(idRange(100+i*10, 10)...)
			if err := w.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Release()
		}
		time.Sleep(100 * time.Millisecond) // let the server read what was sent
		cancel()
		if _, err := stream.Recv(); err == nil {
			t.Fatalf("%s: cancelled stream acknowledged", mode)
		}
		// Give a (wrong) server time to commit what it read.
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if v := s.version(t, "t"); v != 2 {
				t.Fatalf("%s: cancelled epoch committed: version %d", mode, v)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.wantIDs(t, "t", idRange(0, 5))
	wantAck(t, s.putEpoch(t, "t", "q", 1, idRange(5, 5)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 10))
}

// corruptingStream passes a DoPut stream's messages through mutate before sending them.
type corruptingStream struct {
	flight.FlightService_DoPutClient
	n      int
	mutate func(i int, fd *flight.FlightData)
}

func (c *corruptingStream) Send(fd *flight.FlightData) error {
	fd.DataBody = bytes.Clone(fd.DataBody) // the writer reuses its buffer
	fd.DataHeader = bytes.Clone(fd.DataHeader)
	c.mutate(c.n, fd)
	c.n++
	return c.FlightService_DoPutClient.Send(fd)
}

// TestCorruptBatchBody: record batches whose IPC header parses but whose buffers are corrupt
// (truncated body, string offsets out of range or decreasing) are the client's bad input:
// InvalidArgument, nothing committed, the server serves on. They must be caught by validating
// the batch, not by a panic somewhere in the write path (which the recovery interceptor turns
// into Internal).
func TestCorruptBatchBody(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 5)), "committed", 2)

	for _, tc := range []struct {
		name   string
		mutate func(fd *flight.FlightData)
	}{
		{"truncated body", func(fd *flight.FlightData) { fd.DataBody = fd.DataBody[:len(fd.DataBody)/2] }},
		{"empty body", func(fd *flight.FlightData) { fd.DataBody = nil }},
		{"all bytes 0xff (negative offsets)", func(fd *flight.FlightData) {
			for i := range fd.DataBody {
				fd.DataBody[i] = 0xff
			}
		}},
		{"offsets past the data", func(fd *flight.FlightData) {
			for i := len(fd.DataBody) / 3; i < len(fd.DataBody); i++ {
				fd.DataBody[i] = 0x7f
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := s.Client.DoPut(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			cs := &corruptingStream{FlightService_DoPutClient: stream, mutate: func(i int, fd *flight.FlightData) {
				if i == 2 { // 0: schema, 1: a good batch, 2: the corrupt one
					tc.mutate(fd)
				}
			}}
			w := flight.NewRecordWriter(cs, ipc.WithSchema(rowSchema))
			w.SetFlightDescriptor(cmdDesc(t, epochCmd("t", "q", 1)))
			for _, ids := range [][]int64{idRange(100, 50), idRange(150, 50), idRange(200, 50)} {
				b := batch(ids...)
				_ = w.Write(b)
				b.Release()
			}
			w.Close()
			_ = stream.CloseSend()
			_, err = recvAck(stream)
			t.Log(err)
			wantCode(t, err, codes.InvalidArgument)
			if v := s.version(t, "t"); v != 2 {
				t.Fatalf("version %d, want 2", v)
			}
		})
	}
	wantAck(t, s.putEpoch(t, "t", "q", 1, idRange(5, 5)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 10))
}

// TestCreateRejectsUnusableSchemas: a stream (with "create") or a create_table whose schema can
// never be written - duplicate column names, no columns, an unnamed column - is InvalidArgument
// and creates nothing. Creating the table and then failing the write would leave a table behind
// (a bad request must not commit anything) that every later write to it fails on.
func TestCreateRejectsUnusableSchemas(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	i64 := arrow.PrimitiveTypes.Int64
	for _, tc := range []struct {
		name   string
		fields []arrow.Field
	}{
		{"duplicate column names", []arrow.Field{{Name: "id", Type: i64}, {Name: "id", Type: i64}}},
		{"no columns", nil},
		{"unnamed column", []arrow.Field{{Name: "", Type: i64}}},
	} {
		t.Run("DoPut create/"+tc.name, func(t *testing.T) {
			table := "put-" + strings.ReplaceAll(tc.name, " ", "-")
			sc := arrow.NewSchema(tc.fields, nil)
			err := s.putSchema(testCtx(t), t, epochCmd(table, "q", 0), sc, func(b *array.RecordBuilder) {
				for i := range tc.fields {
					b.Field(i).(*array.Int64Builder).Append(int64(i))
				}
			})
			wantCode(t, err, codes.InvalidArgument)
			_, err = s.action(testCtx(t), "table_stats", cmd{"table": table})
			wantCode(t, err, codes.NotFound)
		})
		t.Run("create_table/"+tc.name, func(t *testing.T) {
			table := "act-" + strings.ReplaceAll(tc.name, " ", "-")
			cols := []cmd{}
			for _, f := range tc.fields {
				cols = append(cols, cmd{"name": f.Name, "type": "int64"})
			}
			_, err := s.action(testCtx(t), "create_table", cmd{"table": table, "schema": cols})
			wantCode(t, err, codes.InvalidArgument)
			_, err = s.action(testCtx(t), "table_stats", cmd{"table": table})
			wantCode(t, err, codes.NotFound)
		})
	}
}
