package flightsvc_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// genBatch builds a rowSchema batch of ids whose payload names generation gen, so that a row
// upserted again differs from the row it replaces.
func genBatch(gen int, ids ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d-g%d", id, gen))
	}
	return b.NewRecordBatch()
}

// feedRow is one row of a change feed as a client reads it.
type feedRow struct {
	row     string // the table columns, "id=..,payload=.."
	kind    string
	version int64
}

// readRows reads a ticket to the end: its rows over the table columns (every column but the
// change columns; with over, those columns in that order, a column the stream lacks as null)
// and, for a change read, their change columns.
func readRows(t *testing.T, c *flightConn, tk any, over ...string) ([]feedRow, error) {
	t.Helper()
	b, ok := tk.([]byte)
	if !ok {
		b, _ = json.Marshal(tk)
	}
	stream, err := c.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: b})
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	sc := rdr.Schema()
	kindCol, versionCol := -1, -1
	if js := sc.FieldIndices("_change_type"); len(js) == 1 {
		kindCol, versionCol = js[0], sc.FieldIndices("_commit_version")[0]
	}
	var out []feedRow
	if over == nil {
		for _, f := range sc.Fields() {
			if f.Name != "_change_type" && !strings.HasPrefix(f.Name, "_commit_") {
				over = append(over, f.Name)
			}
		}
	}
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for i := range int(rec.NumRows()) {
			r := feedRow{}
			if kindCol >= 0 {
				r.kind = rec.Column(kindCol).(*array.String).Value(i)
				r.version = rec.Column(versionCol).(*array.Int64).Value(i)
			}
			parts := make([]string, len(over))
			for k, name := range over {
				js := sc.FieldIndices(name)
				if len(js) == 0 || rec.Column(js[0]).IsNull(i) {
					parts[k] = name + "=null"
					continue
				}
				parts[k] = name + "=" + rec.Column(js[0]).ValueStr(i)
			}
			r.row = strings.Join(parts, ",")
			out = append(out, r)
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return out, nil
}

// replayFeed applies the change feed rows of versions from..to, in order, to the table as DoGet
// read it at version from-1 and checks the result against DoGet of every version on the way. It
// returns the change types of each version.
func replayFeed(t *testing.T, s *testServer, table string, from, to int64, feed []feedRow) map[int64]map[string]int {
	t.Helper()
	// The feed's table columns, in its order: DoGet of an older version reads a column added
	// since as null, as the feed does.
	var cols []string
	if len(feed) > 0 {
		for _, part := range strings.Split(feed[0].row, ",") {
			name, _, _ := strings.Cut(part, "=")
			cols = append(cols, name)
		}
	}
	model := map[string]int{}
	if from > 1 {
		rows, err := readRows(t, &s.flightConn, cmd{"table": table, "version": from - 1}, cols...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			model[r.row]++
		}
	}
	kinds := map[int64]map[string]int{}
	next := 0
	for v := from; v <= to; v++ {
		kinds[v] = map[string]int{}
		adding := false
		for ; next < len(feed) && feed[next].version == v; next++ {
			r := feed[next]
			kinds[v][r.kind]++
			switch r.kind {
			case "delete", "update_preimage":
				if adding || model[r.row] == 0 {
					t.Fatalf("version %d: %s of %s (after an insert: %v; held: %d)", v, r.kind, r.row, adding, model[r.row])
				}
				if model[r.row]--; model[r.row] == 0 {
					delete(model, r.row)
				}
			case "insert", "update_postimage":
				adding = true
				model[r.row]++
			default:
				t.Fatalf("version %d: change type %q", v, r.kind)
			}
		}
		rows, err := readRows(t, &s.flightConn, cmd{"table": table, "version": v}, cols...)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for _, r := range rows {
			want[r.row]++
		}
		if fmt.Sprint(model) != fmt.Sprint(want) {
			t.Fatalf("%s version %d: the replayed feed holds\n%v\nDoGet of the version\n%v", table, v, model, want)
		}
	}
	if next != len(feed) {
		t.Fatalf("%s: %d feed rows after version %d or out of order, from %+v", table, len(feed)-next, to, feed[next])
	}
	return kinds
}

// readFeedEndpoints reads a change range through GetFlightInfo: its endpoints' tickets, in order.
func readFeedEndpoints(t *testing.T, s *testServer, command cmd) ([]feedRow, *flight.FlightInfo) {
	t.Helper()
	info, err := s.Client.GetFlightInfo(testCtx(t), cmdDesc(t, command))
	if err != nil {
		t.Fatalf("GetFlightInfo %v: %v", command, err)
	}
	var rows []feedRow
	for _, ep := range info.Endpoint {
		part, err := readRows(t, &s.flightConn, ep.Ticket.Ticket)
		if err != nil {
			t.Fatalf("endpoint %s: %v", ep.Ticket.Ticket, err)
		}
		rows = append(rows, part...)
	}
	return rows, info
}

// TestChangeFeedOverFlight: a keyed MemWAL table and a keyless one through epochs (to the shards
// and direct), folds with keys repeated in one fold, deletes, compaction, an overwrite
// (complete mode) and cleanup: the change feed DoGet returns, replayed onto the table as it
// was, gives DoGet of every version; GetFlightInfo's endpoints read the same rows in the same
// order; a range reaching a cleaned-up version is NotFound (CHANGES_UNAVAILABLE) naming the
// oldest readable version, and the feed from there still replays.
func TestChangeFeedOverFlight(t *testing.T) {
	s := startServer(t, flightsvc.Config{EndpointBytes: 1}) // an endpoint per changed version
	ctx := testCtx(t)
	put := func(c cmd, gen int, ids ...[]int64) {
		t.Helper()
		var bs []arrow.RecordBatch
		for _, b := range ids {
			bs = append(bs, genBatch(gen, b...))
		}
		a, err := s.put(ctx, cmdDesc(t, c), rowSchema, bs...)
		for _, b := range bs {
			b.Release()
		}
		if err != nil || (a.Status != "committed" && a.Status != "empty") {
			t.Fatalf("put %v: %+v, %v", c, a, err)
		}
	}
	fold := func(table string) {
		t.Helper()
		s.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
		s.mustAction(t, "fold_memwal_shard", cmd{"table": table}, nil)
	}
	for _, keyed := range []bool{true, false} {
		table, create := "log", cmd{"memwal": cmd{"shards": 2}}
		mode := "append"
		if keyed {
			table, create, mode = "kv", cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}, "update"
		}
		epoch := int64(0)
		ep := func(extra cmd) cmd {
			c := cmd{"table": table, "query_id": "q", "epoch_id": epoch, "mode": mode, "create": create}
			for k, v := range extra {
				c[k] = v
			}
			epoch++
			return c
		}
		put(ep(nil), 0, idRange(0, 20))
		put(ep(nil), 1, idRange(10, 20)) // keys 10..19 again, in the same fold
		fold(table)
		put(ep(cmd{"route": "direct"}), 2, idRange(25, 10)) // 25..29 exist, 30..34 new
		direct := int64(s.version(t, table))
		put(ep(nil), 3, idRange(0, 5))
		put(ep(nil), 4, idRange(0, 3), idRange(2, 2)) // 0..3 again, 2 twice in one epoch
		fold(table)
		folded := int64(s.version(t, table))
		s.mustAction(t, "delete", cmd{"table": table, "where": cmd{"op": "<", "column": "id", "value": 2}}, nil)
		s.mustAction(t, "compact", cmd{"table": table}, nil)
		compacted := int64(s.version(t, table))
		put(ep(cmd{"mode": "complete"}), 5, idRange(100, 8))
		put(ep(nil), 6, idRange(104, 8))
		fold(table)
		latest := int64(s.version(t, table))

		feed, err := readRows(t, &s.flightConn, cmd{"table": table, "changes": cmd{"from_version": 1}})
		if err != nil {
			t.Fatal(err)
		}
		kinds := replayFeed(t, s, table, 1, latest, feed)
		if len(kinds[compacted]) != 0 {
			t.Errorf("%s: the compaction (version %d) emitted %v", table, compacted, kinds[compacted])
		}
		if keyed {
			// The second fold (a version per shard): keys 0..4 existed, one pre-image and one
			// post-image each, whatever the upserts of 0..3 in it; none is new.
			second := map[string]int{}
			for v := direct + 1; v <= folded; v++ {
				for k, n := range kinds[v] {
					second[k] += n
				}
			}
			if fmt.Sprint(second) != fmt.Sprint(map[string]int{"update_postimage": 5, "update_preimage": 5}) {
				t.Errorf("kv: the second fold (versions %d..%d) emitted %v", direct+1, folded, second)
			}
		}
		byEndpoints, info := readFeedEndpoints(t, s, cmd{"table": table, "changes": cmd{"from_version": 1}})
		if len(info.Endpoint) < 5 || !slices.Equal(feed, byEndpoints) {
			t.Fatalf("%s: %d endpoints read %d rows; one DoGet read %d (or another order)", table, len(info.Endpoint), len(byEndpoints), len(feed))
		}
		if info.TotalRecords != int64(len(feed)) {
			t.Errorf("%s: total_records %d, the feed has %d rows", table, info.TotalRecords, len(feed))
		}
		// A range in the middle, and one with a filter and columns.
		mid, err := readRows(t, &s.flightConn, cmd{"table": table, "changes": cmd{"from_version": 4, "to_version": compacted}})
		if err != nil {
			t.Fatal(err)
		}
		replayFeed(t, s, table, 4, compacted, mid)
		some, err := readRows(t, &s.flightConn, cmd{"table": table, "columns": []string{"id"},
			"changes": cmd{"from_version": 1}, "filter": cmd{"op": ">=", "column": "id", "value": 100}})
		if err != nil {
			t.Fatal(err)
		}
		var wantSome int
		for _, r := range feed {
			var id int64
			if _, err := fmt.Sscanf(r.row, "id=%d", &id); err != nil {
				t.Fatalf("feed row %q: %v", r.row, err)
			}
			if id >= 100 {
				wantSome++
			}
		}
		if len(some) != wantSome || wantSome == 0 || strings.Contains(some[0].row, "payload") {
			t.Errorf("%s: the filtered feed read %d rows (%+v), want %d of id only", table, len(some), some[:min(1, len(some))], wantSome)
		}
	}

	t.Run("cleanup", func(t *testing.T) {
		latest := int64(s.version(t, "kv"))
		time.Sleep(1100 * time.Millisecond) // every version but the latest superseded for over a second
		s.mustAction(t, "cleanup", cmd{"table": "kv", "older_than_seconds": 1, "keep_last": 3}, nil)
		oldest := latest - 1 // versions latest-2..latest are kept; latest-2's changes need latest-3
		_, err := readRows(t, &s.flightConn, cmd{"table": "kv", "changes": cmd{"from_version": 1}})
		wantReason(t, err, codes.NotFound, "CHANGES_UNAVAILABLE")
		if info := statusErrorInfo(err); info.GetMetadata()["oldest_version"] != fmt.Sprint(oldest) ||
			!strings.Contains(err.Error(), fmt.Sprintf("is %d", oldest)) {
			t.Fatalf("CHANGES_UNAVAILABLE %v (metadata %v) does not name the oldest readable version %d", err, info.GetMetadata(), oldest)
		}
		_, err = s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "kv", "changes": cmd{"from_version": oldest - 1}}))
		wantReason(t, err, codes.NotFound, "CHANGES_UNAVAILABLE")
		feed, err := readRows(t, &s.flightConn, cmd{"table": "kv", "changes": cmd{"from_version": oldest}})
		if err != nil {
			t.Fatal(err)
		}
		replayFeed(t, s, "kv", oldest, latest, feed)
	})
}

// TestChangeFeedRequests: what a change feed ticket or descriptor refuses, with its reason.
func TestChangeFeedRequests(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	ctx := testCtx(t)
	s.putEpoch(t, "events", "q", 0, []int64{1, 2})
	for _, c := range []struct {
		name   string
		ticket string
		code   codes.Code
		reason string
	}{
		{"from 0", `{"table":"events","changes":{"from_version":0}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative from", `{"table":"events","changes":{"from_version":-1}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"no from", `{"table":"events","changes":{"to_version":2}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"from after to", `{"table":"events","changes":{"from_version":2,"to_version":1}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"unknown field", `{"table":"events","changes":{"from_version":1,"to":2}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"with a version", `{"table":"events","version":1,"changes":{"from_version":1}}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"not an object", `{"table":"events","changes":1}`, codes.InvalidArgument, "INVALID_REQUEST"},
		{"to past the latest", `{"table":"events","changes":{"from_version":1,"to_version":9}}`, codes.NotFound, "VERSION_NOT_FOUND"},
		{"unknown table", `{"table":"nope","changes":{"from_version":1}}`, codes.NotFound, "TABLE_NOT_FOUND"},
		{"unknown column", `{"table":"events","columns":["nope"],"changes":{"from_version":1}}`, codes.InvalidArgument, "SCHEMA_MISMATCH"},
		{"bad filter", `{"table":"events","filter":{"op":"=","column":"id","value":"abc"},"changes":{"from_version":1}}`, codes.InvalidArgument, "INVALID_PREDICATE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.get(ctx, []byte(c.ticket))
			wantReason(t, err, c.code, c.reason)
			if c.name != "with a version" {
				_, err = s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(c.ticket)})
				wantReason(t, err, c.code, c.reason)
			}
		})
	}
	// Past the latest version with no end: no rows yet, the change schema, no endpoint.
	res, err := s.get(ctx, cmd{"table": "events", "changes": cmd{"from_version": 3}})
	if err != nil || res.Rows != 0 || res.Schema.NumFields() != 5 {
		t.Fatalf("changes from past the latest: %+v, %v", res, err)
	}
	info, err := s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "events", "changes": cmd{"from_version": 3}}))
	if err != nil || len(info.Endpoint) != 0 || info.TotalRecords != 0 {
		t.Fatalf("GetFlightInfo of changes from past the latest: %v, %v", info, err)
	}
	sr, err := s.Client.GetSchema(ctx, cmdDesc(t, cmd{"table": "events", "columns": []string{"id"}, "changes": cmd{"from_version": 1}}))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := flight.DeserializeSchema(sr.GetSchema(), memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	want := "id:int64 _change_type:utf8 _commit_version:int64 _commit_timestamp:timestamp[us, tz=UTC]"
	var got []string
	for _, f := range sc.Fields() {
		got = append(got, f.Name+":"+f.Type.String())
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("change schema %v, want %s", got, want)
	}
}

// TestChangeFeedSchemaChange: a change range across a schema change reads every version in the
// schema of its last one (rows before the new column read it as null), and every endpoint of
// its GetFlightInfo returns that one schema, the FlightInfo's.
func TestChangeFeedSchemaChange(t *testing.T) {
	s := startServer(t, flightsvc.Config{EndpointBytes: 1})
	s.putEpoch(t, "ev", "q", 0, []int64{1, 2})
	if a, err := s.putExt(t, cmd{"table": "ev", "query_id": "q", "epoch_id": 1, "merge_schema": true}, 3, 4); err != nil || a.Status != "committed" {
		t.Fatalf("merge_schema epoch: %+v, %v", a, err)
	}
	latest := int64(s.version(t, "ev"))
	feed, err := readRows(t, &s.flightConn, cmd{"table": "ev", "changes": cmd{"from_version": 1}})
	if err != nil {
		t.Fatal(err)
	}
	replayFeed(t, s, "ev", 1, latest, feed)
	if len(feed) != 4 || !strings.Contains(feed[0].row, "extra=null") || strings.Contains(feed[3].row, "extra=null") {
		t.Fatalf("feed across the schema change: %+v", feed)
	}
	info, err := s.Client.GetFlightInfo(testCtx(t), cmdDesc(t, cmd{"table": "ev", "changes": cmd{"from_version": 1}}))
	if err != nil {
		t.Fatal(err)
	}
	want, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoint) < 2 {
		t.Fatalf("%d endpoints, want one per changed version", len(info.Endpoint))
	}
	for _, ep := range info.Endpoint {
		res, err := s.get(testCtx(t), ep.Ticket.Ticket)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Schema.Equal(want) {
			t.Fatalf("endpoint %s returns schema %s, the FlightInfo's is %s", ep.Ticket.Ticket, res.Schema, want)
		}
	}
}
