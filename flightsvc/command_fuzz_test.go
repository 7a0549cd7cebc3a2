package flightsvc

// Fuzz targets for the JSON a client controls before anything is written: the DoPut command and
// the DoGet ticket. Any bytes must give a request or an InvalidArgument-class error, never a
// panic, and a parsed request must survive being sent again.
//
// `go test` runs the seeds (f.Add and testdata/fuzz/<Name>/) as ordinary tests; `make fuzz` runs
// each target for a fixed time.

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/streaming"
)

// encodePutCommand is what a client sends for req: the inverse of parsePutCommand.
func encodePutCommand(t *testing.T, req streaming.EpochRequest) []byte {
	c := PutCommand{Table: req.Table, QueryID: &req.QueryID, EpochID: &req.EpochID, Mode: string(req.Mode),
		Route: string(req.Route), Rows: req.ExpectRows}
	if req.Lookback != 0 {
		c.Lookback = &req.Lookback
	}
	if p := req.Partition; p != nil {
		c.Partition = &PartitionSpec{ID: &p.ID, Attempt: p.Attempt}
	}
	if req.RunID != "" {
		c.RunID = &req.RunID
	}
	if cr := req.Create; cr != nil {
		c.Create = CreateOption{Enabled: true, Spec: CreateSpec{PrimaryKey: cr.PrimaryKey, DataCodec: cr.DataCodec}}
		if cr.MemWAL != nil {
			c.Create.Spec.MemWAL = &MemWALSpec{Shards: &cr.MemWAL.Shards}
		}
		for _, f := range cr.PartitionBy {
			c.Create.Spec.PartitionBy = append(c.Create.Spec.PartitionBy, PartitionField{Column: f.Column, Transform: f.Transform.String()})
		}
		if cr.MaxPartitionsPerWrite > 0 {
			c.Create.Spec.MaxPartitionsPerWrite = &cr.MaxPartitionsPerWrite
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("encode %+v: %v", req, err)
	}
	return b
}

func FuzzParsePutCommand(f *testing.F) {
	for _, s := range []string{
		`{"table": "events", "query_id": "q-123", "epoch_id": 42, "mode": "append"}`,
		`{"table":"t","query_id":" q ","epoch_id":0,"mode":"complete","route":"direct","dedupe_lookback_versions":10}`,
		`{"table":"t","query_id":"q","epoch_id":3,"partition":{"id":3,"attempt":1}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":true}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":{"primary_key":["id"],"memwal":{"shards":2}}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":false,"write_mode":"overwrite"}`,
		`{"table":"t","epoch_id":1}`,
		`{"table":"t","query_id":"q"}`,
		`{"table":"t","query_id":"q","epoch_id":1.5}`,
		`{"table":"t","query_id":"q","epoch_id":9223372036854775808}`,
		`{"table":"t","query_id":"q","epoch_id":1} {}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":{"memwal":{"shards":-1}}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":"yes"}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":{"partition_by":[{"column":"ts","transform":"day"},{"column":"id","transform":"bucket[16]"}],"max_partitions_per_write":10}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":{"partition_by":[{"column":"ts","transform":"bucket[99999999999999999999]"}]}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"create":{"partition_by":"day(ts)"}}`,
		`{"table":"t","query_id":"q","epoch_id":1,"run_id":"r-1"}`,
		`{"table":"t","query_id":"q","epoch_id":1,"run_id":"   "}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parsePutCommand(body)
		if err != nil {
			// Both are InvalidArgument in the error table (a bad partition spec with its own reason).
			if !errors.Is(err, streaming.ErrInvalidRequest) && !errors.Is(err, partition.ErrInvalidSpec) {
				t.Fatalf("error %q is not an invalid request (InvalidArgument)", err)
			}
			return
		}
		// Validation must not panic either, and fails only as an invalid request.
		norm := req
		if err := norm.Normalize(); err != nil && !errors.Is(err, streaming.ErrInvalidRequest) {
			t.Fatalf("Normalize error %q is not an invalid request", err)
		}
		// Sent again, the command means the same thing.
		again, err := parsePutCommand(encodePutCommand(t, req))
		if err != nil {
			t.Fatalf("re-encoded command %s does not parse: %v", encodePutCommand(t, req), err)
		}
		// An empty primary-key list and none mean the same (no key); JSON encoding drops it.
		for _, r := range []*streaming.EpochRequest{&req, &again} {
			if r.Create != nil && len(r.Create.PrimaryKey) == 0 {
				r.Create.PrimaryKey = nil
			}
		}
		if !reflect.DeepEqual(req, again) {
			t.Fatalf("command changed in a round trip:\n%+v\n%+v", req, again)
		}
	})
}

func FuzzDecodeTicket(f *testing.F) {
	for _, s := range []string{
		`{"table": "events"}`,
		`{"table": "events", "version": 17, "columns": ["id", "ts"]}`,
		`{"table": "events", "version": -1}`,
		`{"table": "events", "version": 1e3}`,
		`{"table": "events", "columns": "id"}`,
		`{"table": 5}`,
		`{"table": "events", "changes": {"from_version": 1}}`,
		`{"table": "events", "changes": {"from_version": 3, "to_version": 2}, "columns": ["id"], "filter": {"op": "is_null", "column": "id"}}`,
		`{"table": "events", "changes": {"from_version": -1, "to_version": 18446744073709551616}}`,
		`{"table": "events", "changes": {"from_version": 1}, "version": 2}`,
		`{"table": "events", "changes": {}}`,
		`{} trailing`,
		`"events"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tk Ticket
		if err := decodeStrict("ticket", b, &tk); err != nil {
			if !errors.Is(err, streaming.ErrInvalidRequest) {
				t.Fatalf("error %q is not an invalid request (InvalidArgument)", err)
			}
			return
		}
		// The server hands out tickets it encodes itself (GetFlightInfo pins the version): they
		// must decode to what was encoded.
		enc, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		var again Ticket
		if err := decodeStrict("ticket", enc, &again); err != nil {
			t.Fatalf("re-encoded ticket %s does not decode: %v", enc, err)
		}
		if len(tk.Columns) == 0 {
			tk.Columns = nil // omitempty drops an empty list
		}
		for _, f := range []*json.RawMessage{&tk.Filter, &again.Filter} {
			var c bytes.Buffer // a filter is kept as raw JSON, re-encoded without its white space
			if len(*f) > 0 && json.Compact(&c, *f) == nil {
				*f = c.Bytes()
			}
		}
		if !reflect.DeepEqual(tk, again) {
			t.Fatalf("ticket changed in a round trip: %+v -> %s -> %+v", tk, enc, again)
		}
	})
}
