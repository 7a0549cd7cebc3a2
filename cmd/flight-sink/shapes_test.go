package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// jsonShape lists the paths of a JSON document with the type at each, sorted: one line per
// path, "versions[].timestamp string". A list's elements share one path ([]).
func jsonShape(doc []byte) (string, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return "", err
	}
	seen := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		kind := "null"
		switch x := v.(type) {
		case map[string]any:
			kind = "object"
			for k, e := range x {
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		case []any:
			kind = "array"
			for _, e := range x {
				walk(path+"[]", e)
			}
		case string:
			kind = "string"
		case float64:
			kind = "number"
		case bool:
			kind = "bool"
		}
		if path != "" {
			seen[path+" "+kind] = true
		}
	}
	walk("", v)
	lines := make([]string, 0, len(seen))
	for l := range seen {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n", nil
}

// subDocument returns the JSON of doc's top-level field key.
func subDocument(t *testing.T, doc []byte, key string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if m[key] == nil {
		t.Fatalf("no %q in %s", key, doc)
	}
	return m[key]
}

// TestJSONShapes: each object has one JSON shape whether the CLI prints it (--json, reading the
// table from storage) or a server's action answers it; the shapes are held in golden files, and
// every top-level document carries format_version.
func TestJSONShapes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := t.TempDir()
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: root})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	makeTable(t, srv.Sink().Store()) // events: 3 versions, a streaming watermark
	uri := filepath.Join(root, "events")

	cli := func(args ...string) []byte {
		t.Helper()
		out, errOut, code := runInProcess(t, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d, %s", args, code, errOut)
		}
		return []byte(out)
	}
	action := func(name, body string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run([]string{"action", "--server", "grpc://" + srv.Addr().String(), name, body}, &out, &errb); code != 0 {
			t.Fatalf("action %s: exit %d, %s", name, code, errb.String())
		}
		return out.Bytes()
	}
	body := `{"table": "events"}`
	for _, tc := range []struct {
		golden   string
		cli, act []byte
	}{
		{"json_history.golden", cli("history", "--json", uri), action("history", body)},
		{"json_table_config.golden", cli("config", "get", "--json", uri), action("get_table_config", body)},
		{"json_streams.golden", subDocument(t, cli("inspect", "--json", uri), "streams"), subDocument(t, action("table_stats", body), "streams")},
	} {
		cliShape, err := jsonShape(tc.cli)
		if err != nil {
			t.Fatalf("%s: the CLI's output is not JSON: %v\n%s", tc.golden, err, tc.cli)
		}
		actShape, err := jsonShape(tc.act)
		if err != nil {
			t.Fatalf("%s: the action's output is not JSON: %v\n%s", tc.golden, err, tc.act)
		}
		if cliShape != actShape {
			t.Errorf("%s: the CLI and the action disagree:\n--- CLI\n%s--- action\n%s", tc.golden, cliShape, actShape)
		}
		golden(t, tc.golden, cliShape)
	}

	// Every top-level document says its format_version; data sizes are data_bytes everywhere.
	for name, doc := range map[string][]byte{
		"tables":      cli("tables", "--json", root),
		"inspect":     cli("inspect", "--json", uri),
		"table_stats": action("table_stats", body),
		"read":        cli("read", "--format", "json", uri),
		"compact":     cli("compact", "--json", "--dry-run", uri),
		"cleanup":     cli("cleanup", "--json", "--dry-run", uri),
		"iceberg":     cli("iceberg", "status", "--json", uri),
		"history":     cli("history", "--json", uri),
		"config":      cli("config", "get", "--json", uri),
		"compact_act": action("compact", body),
		"cleanup_act": action("cleanup", `{"table": "events", "dry_run": true}`),
	} {
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["format_version"] != float64(flightsvc.FormatVersion) {
			t.Errorf("%s: format_version %v, want %d", name, m["format_version"], flightsvc.FormatVersion)
		}
		if strings.Contains(string(doc), `"total_bytes"`) {
			t.Errorf("%s says total_bytes; data sizes are data_bytes", name)
		}
	}
	inspect, stats := map[string]any{}, map[string]any{}
	_ = json.Unmarshal(cli("inspect", "--json", uri), &inspect)
	_ = json.Unmarshal(action("table_stats", body), &stats)
	if fmt.Sprint(inspect["data_bytes"]) != fmt.Sprint(stats["data_bytes"]) {
		t.Errorf("inspect data_bytes %v, table_stats %v", inspect["data_bytes"], stats["data_bytes"])
	}
}
