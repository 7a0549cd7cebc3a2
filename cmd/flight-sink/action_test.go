package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestActionAgainstRunningServer drives a real server (on a loopback socket) with the action
// subcommand: table_stats and compact work through the server, and errors are one clear line.
func TestActionAgainstRunningServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := t.TempDir()
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: root, AuthTokens: []string{"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	tbl, err := engine.Create(ctx, srv.Sink().Store(), "events", schema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 5; i++ {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues([]int64{i}, nil)
		col := b.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, 1)
		if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	addr := srv.Addr().String()
	call := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"action", "--server", "grpc://" + addr}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := call("--token", "s3cret", "table_stats", `{"table": "events"}`)
	var st struct {
		Rows      int64 `json:"rows"`
		Fragments int   `json:"fragments"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Rows != 5 || st.Fragments != 5 {
		t.Fatalf("table_stats: code %d out %q err %q", code, out, errs)
	}
	if code, out, errs = call("--token", "s3cret", "compact", `{"table": "events"}`); code != 0 || !strings.Contains(out, `"fragments_added": 1`) {
		t.Fatalf("compact: code %d out %q err %q", code, out, errs)
	}
	code, _, errs = call("table_stats", `{"table": "events"}`)
	if code != 1 || !strings.Contains(errs, "Unauthenticated") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("without a token: code %d err %q", code, errs)
	}
	code, _, errs = call("--token", "s3cret", "table_stats", `{"table": `)
	if code != 1 || !strings.Contains(errs, "not valid JSON") {
		t.Fatalf("bad body: code %d err %q", code, errs)
	}
}
