package flightsvc_test

// The golden test of docs/protocol.md: its marked examples are the wire contract's examples.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/flight-sink/flight-sink/flightsvc"
)

const protocolDoc = "../docs/protocol.md"

// docExample is one JSON example of docs/protocol.md: the ```json block right after a marker
// line `<!-- wire: request|result NAME [LABEL] -->`. NAME is an action, or doput (a DoPut command
// and its ack), doget (a ticket) or flightinfo (a descriptor command); LABEL tells apart several
// examples of one NAME, and pairs a request with its result.
type docExample struct {
	kind, name, label string
	body              []byte
}

func (e docExample) key() string { return strings.TrimSpace(e.name + " " + e.label) }

var (
	docMarker    = regexp.MustCompile(`(?m)^[ \t]*<!-- wire:`)
	docExampleRE = regexp.MustCompile("(?m)^[ \t]*<!-- wire: (request|result) ([a-z_]+)(?: ([a-z_]+))? -->[ \t]*\n[ \t]*```json[ \t]*\n((?s:.*?))\n[ \t]*```")
)

// readDocExamples returns the examples of docs/protocol.md by kind and key.
func readDocExamples(t testing.TB) map[string]map[string]docExample {
	t.Helper()
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]docExample{"request": {}, "result": {}}
	matches := docExampleRE.FindAllSubmatch(doc, -1)
	if n := len(docMarker.FindAll(doc, -1)); n != len(matches) {
		t.Fatalf("%s has %d wire markers but %d of them are followed by a ```json block", protocolDoc, n, len(matches))
	}
	for _, m := range matches {
		e := docExample{kind: string(m[1]), name: string(m[2]), label: string(m[3]), body: m[4]}
		if !json.Valid(e.body) {
			t.Errorf("%s: the %s example of %s is not valid JSON:\n%s", protocolDoc, e.kind, e.key(), e.body)
		}
		if _, dup := out[e.kind][e.key()]; dup {
			t.Errorf("%s: two %s examples of %s", protocolDoc, e.kind, e.key())
		}
		out[e.kind][e.key()] = e
	}
	return out
}

// TestProtocolDocExamples: every request example of docs/protocol.md decodes strictly into its
// wire type, every action the server runs has a request and a result example, and a real server
// given each request example answers with every field its result example shows.
func TestProtocolDocExamples(t *testing.T) {
	t.Parallel()
	ex := readDocExamples(t)
	for key, e := range ex["request"] {
		if err := flightsvc.DecodeRequest(e.name, e.body); err != nil {
			t.Errorf("request example of %s does not decode: %v\n%s", key, err, e.body)
		}
	}
	for key := range ex["result"] {
		if _, ok := ex["request"][key]; !ok {
			t.Errorf("result example of %s has no request example", key)
		}
	}
	for _, name := range flightsvc.ActionNames() {
		if _, ok := ex["request"][name]; !ok {
			t.Errorf("action %s has no request example in %s", name, protocolDoc)
		}
		if _, ok := ex["result"][name]; !ok {
			t.Errorf("action %s has no result example in %s", name, protocolDoc)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	s := startServer(t, flightsvc.Config{})
	ctx := testCtx(t)
	nextID := int64(0)
	// doPut sends the command with as many rows as its "rows" says (3 without it) and returns the
	// ack as the server encoded it.
	doPut := func(body []byte) ([]byte, error) {
		var c struct {
			Rows *int64 `json:"rows"`
		}
		_ = json.Unmarshal(body, &c)
		n := int64(3)
		if c.Rows != nil {
			n = *c.Rows
		}
		rec := batch(idRange(nextID, n)...)
		defer rec.Release()
		nextID += n
		stream, err := s.Client.DoPut(ctx)
		if err != nil {
			return nil, err
		}
		w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
		w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
		_ = w.Write(rec)
		w.Close()
		_ = stream.CloseSend()
		res, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return res.GetAppMetadata(), nil
	}
	action := func(name string) func([]byte) ([]byte, error) {
		return func(body []byte) ([]byte, error) { return s.action(ctx, name, body) }
	}
	// set replaces one field of a request example with a value only the server knows (a stage
	// token, a shard id).
	set := func(body []byte, field string, v any) []byte {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		m[field] = v
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var stage string
	// The steps in the order a table's life runs; each sends one request example.
	steps := []struct {
		key string
		run func(body []byte) ([]byte, error)
	}{
		{"create_table", action("create_table")},
		{"doput", doPut},
		{"doput staged", func(body []byte) ([]byte, error) {
			res, err := doPut(body)
			var a struct{ Stage string }
			_ = json.Unmarshal(res, &a)
			stage = a.Stage
			return res, err
		}},
		{"commit_epoch", func(body []byte) ([]byte, error) {
			return action("commit_epoch")(set(body, "stages", []string{stage}))
		}},
		{"epoch_status", action("epoch_status")},
		{"history", action("history")},
		{"create_index", action("create_index")},
		{"delete", action("delete")},
		{"compact", action("compact")},
		{"optimize_indices", action("optimize_indices")},
		{"table_stats", action("table_stats")},
		{"publish_iceberg", action("publish_iceberg")},
		{"cleanup", action("cleanup")},
		{"set_table_config", action("set_table_config")},
		{"get_table_config", action("get_table_config")},
		{"doget", func(body []byte) ([]byte, error) {
			_, err := s.get(ctx, body)
			return nil, err
		}},
		{"doget filter", func(body []byte) ([]byte, error) {
			_, err := s.get(ctx, body)
			return nil, err
		}},
		{"flightinfo", func(body []byte) ([]byte, error) {
			_, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
			return nil, err
		}},
		{"doget endpoint", func(body []byte) ([]byte, error) {
			// The documented shape, with the fragment ids GetFlightInfo gives for version 2.
			info, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(`{"table": "events", "version": 2}`)})
			if err != nil {
				return nil, err
			}
			var tk flightsvc.Ticket
			if err := json.Unmarshal(info.Endpoint[0].Ticket.Ticket, &tk); err != nil || tk.Fragments == nil {
				t.Fatalf("endpoint ticket %s: %v", info.Endpoint[0].Ticket.Ticket, err)
			}
			_, err = s.get(ctx, set(body, "fragments", *tk.Fragments))
			return nil, err
		}},
		{"flightinfo filter", func(body []byte) ([]byte, error) {
			_, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
			return nil, err
		}},
		{"doget changes", func(body []byte) ([]byte, error) {
			_, err := s.get(ctx, body)
			return nil, err
		}},
		{"flightinfo changes", func(body []byte) ([]byte, error) {
			_, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
			return nil, err
		}},
		{"doget changes_endpoint", func(body []byte) ([]byte, error) {
			_, err := s.get(ctx, body)
			return nil, err
		}},
		{"flightinfo direct", func(body []byte) ([]byte, error) {
			// The app_metadata of the first endpoint with a location.
			info, err := s.Client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
			if err != nil {
				return nil, err
			}
			for _, ep := range info.Endpoint {
				if len(ep.Location) > 0 {
					return ep.AppMetadata, nil
				}
			}
			return nil, fmt.Errorf("no endpoint of %s has a location", body)
		}},
		{"doput memwal", doPut},
		{"epoch_status memwal", action("epoch_status")},
		{"flush_memwal", func(body []byte) ([]byte, error) {
			var st struct {
				MemWAL struct{ Shards []struct{ Shard string } }
			}
			s.mustAction(t, "table_stats", cmd{"table": "clicks"}, &st)
			if len(st.MemWAL.Shards) == 0 {
				t.Fatalf("table_stats of clicks lists no shards")
			}
			return action("flush_memwal")(set(body, "shard", st.MemWAL.Shards[0].Shard))
		}},
		{"fold_memwal_shard", action("fold_memwal_shard")},
		{"compact_memwal_shard", action("compact_memwal_shard")},
		{"table_stats memwal", action("table_stats")},
		{"drop_table", action("drop_table")},
	}
	ran := map[string]bool{}
	for _, st := range steps {
		req, ok := ex["request"][st.key]
		if !ok {
			t.Fatalf("%s has no request example of %s", protocolDoc, st.key)
		}
		ran[st.key] = true
		got, err := st.run(req.body)
		if err != nil {
			t.Fatalf("%s with the documented request %s: %v", st.key, req.body, err)
		}
		t.Logf("%s: %s", st.key, got)
		if res, ok := ex["result"][st.key]; ok {
			var doc, srv any
			if err := json.Unmarshal(res.body, &doc); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &srv); err != nil {
				t.Fatalf("%s: the server's result %q is not JSON: %v", st.key, got, err)
			}
			for _, miss := range missingFields(st.key, doc, srv) {
				t.Errorf("%s, documented in %s, is not in the server's answer %s", miss, protocolDoc, got)
			}
		}
	}
	for key := range ex["request"] {
		if !ran[key] {
			t.Errorf("the request example of %s is not run by this test: add it to the steps", key)
		}
	}
}

// missingFields lists the fields of the documented JSON doc that the server's srv lacks, as paths
// under at. An object key written <like this> stands for every key of the server's object; a
// documented list's first element describes the server's first element.
func missingFields(at string, doc, srv any) []string {
	var out []string
	switch d := doc.(type) {
	case map[string]any:
		g, ok := srv.(map[string]any)
		if !ok {
			if srv != nil {
				out = append(out, fmt.Sprintf("%s (an object, the server sent %T)", at, srv))
			}
			return out
		}
		for _, k := range slices.Sorted(maps.Keys(d)) {
			if strings.HasPrefix(k, "<") && strings.HasSuffix(k, ">") {
				for gk, gv := range g {
					out = append(out, missingFields(at+"."+gk, d[k], gv)...)
				}
				continue
			}
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("field %s.%s", at, k))
				continue
			}
			out = append(out, missingFields(at+"."+k, d[k], gv)...)
		}
	case []any:
		if len(d) == 0 {
			return out
		}
		if _, objects := d[0].(map[string]any); !objects {
			return out // a list of values: no fields
		}
		switch g, _ := srv.([]any); {
		case len(g) > 0:
			out = append(out, missingFields(at+"[0]", d[0], g[0])...)
		case srv != nil:
			out = append(out, fmt.Sprintf("%s[0] (the server sent an empty list)", at))
		}
	}
	return out
}

// TestMissingFields checks the golden test's own comparison.
func TestMissingFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, srv string
		want     []string
	}{
		{`{"a": 1, "b": 2}`, `{"a": 1, "b": 3, "c": 4}`, nil},
		{`{"a": 1, "b": 2}`, `{"a": 1}`, []string{"field r.b"}},
		{`{"m": {"<id>": {"x": 1}}}`, `{"m": {"k1": {"x": 2}, "k2": {}}}`, []string{"field r.m.k2.x"}},
		{`[{"v": 1, "p": {}}]`, `[{"v": 2}]`, []string{"field r[0].p"}},
		{`{"l": [{"x": 1}]}`, `{"l": []}`, []string{"r.l[0] (the server sent an empty list)"}},
		{`{"l": [1, 2]}`, `{"l": []}`, nil},
		{`{"o": {"x": 1}}`, `{"o": null}`, nil},
	} {
		var doc, srv any
		_ = json.Unmarshal([]byte(tc.doc), &doc)
		_ = json.Unmarshal([]byte(tc.srv), &srv)
		if got := missingFields("r", doc, srv); !slices.Equal(got, tc.want) {
			t.Errorf("missingFields(%s, %s) = %q, want %q", tc.doc, tc.srv, got, tc.want)
		}
	}
}
