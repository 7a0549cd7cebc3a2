package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// makeReadTable creates table "people" with two versions of rows whose names need quoting in
// CSV, or are null:
//
//	2 Append ids 1, 2, 3
//	3 Append ids 4, 5
func makeReadTable(t *testing.T, root string) string {
	t.Helper()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tbl, err := engine.Create(ctx, store, "people", testSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[int64]*string{1: ptr("ann"), 2: ptr(`bo, "the" second`), 3: nil, 4: ptr("dee"), 5: ptr("é")}
	for _, ids := range [][]int64{{1, 2, 3}, {4, 5}} {
		b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
		for _, id := range ids {
			b.Field(0).(*array.Int64Builder).Append(id)
			if n := names[id]; n != nil {
				b.Field(1).(*array.StringBuilder).Append(*n)
			} else {
				b.Field(1).AppendNull()
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, "people")
}

func ptr(s string) *string { return &s }

// TestRead: read prints a table's rows in each format (golden), filtered by a text or a JSON
// predicate, limited, at an older version; a bad filter names its position and a missing
// table fails, both with status 1.
func TestRead(t *testing.T) {
	uri := makeReadTable(t, t.TempDir())
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"read_table.golden", []string{"read", uri}},
		{"read_csv.golden", []string{"read", "--format", "csv", uri}},
		{"read_json.golden", []string{"read", "--format", "json", uri}},
		{"read_filter.golden", []string{"read", "--filter", "id >= 2 and name is not null", "--columns", "name,id", uri}},
	} {
		out, errOut, code := runInProcess(t, tc.args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%q: exit %d, stderr %q", tc.args, code, errOut)
		}
		golden(t, tc.golden, out)
	}

	var doc struct {
		FormatVersion int              `json:"format_version"`
		Table         string           `json:"table"`
		Rows          []map[string]any `json:"rows"`
	}
	out, _, _ := runInProcess(t, "read", "--format", "json", uri)
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.FormatVersion != 1 || doc.Table != "people" || len(doc.Rows) != 5 {
		t.Fatalf("read --format json: %v %+v", err, doc)
	}
	if doc.Rows[2]["name"] != nil || doc.Rows[1]["name"] != `bo, "the" second` {
		t.Errorf("json rows %v", doc.Rows)
	}

	count := func(args ...string) int {
		t.Helper()
		out, errOut, code := runInProcess(t, append([]string{"read", "--format", "csv"}, append(args, uri)...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d, %s", args, code, errOut)
		}
		return strings.Count(out, "\n") - 1 // the header
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--filter", `{"op": "in", "column": "id", "values": [1, 5]}`}, 2},
		{[]string{"--filter", "name is null"}, 1},
		{[]string{"--version", "2"}, 3},
		{[]string{"--limit", "4"}, 4},
		{[]string{"--limit", "0"}, 5},
	} {
		if got := count(tc.args...); got != tc.want {
			t.Errorf("read %q: %d rows, want %d", tc.args, got, tc.want)
		}
	}

	if _, errOut, code := runInProcess(t, "read", "--filter", "id = = 3", uri); code != 1 || !strings.Contains(errOut, "position 5") {
		t.Errorf("a bad filter: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runInProcess(t, "read", "--filter", "nope = 3", uri); code != 1 || !strings.Contains(errOut, "nope") {
		t.Errorf("a filter on an unknown column: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runInProcess(t, "read", filepath.Join(filepath.Dir(uri), "missing")); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("a missing table: exit %d, %q", code, errOut)
	}
}
