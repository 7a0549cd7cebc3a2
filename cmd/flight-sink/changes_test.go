package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestChanges: changes prints the change feed of a range of versions in each format, with its
// change columns; a bad range fails with status 1 and says why.
func TestChanges(t *testing.T) {
	root := t.TempDir()
	uri := makeReadTable(t, root) // 2: ids 1, 2, 3; 3: ids 4, 5
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := engine.Open(context.Background(), store, "people", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Delete(context.Background(), expr.Eq("id", 2), nil); err != nil { // 4
		t.Fatal(err)
	}

	out, errOut, code := runInProcess(t, "changes", "--from", "1", "--format", "csv", uri)
	if code != 0 {
		t.Fatalf("changes --format csv: exit %d, %s", code, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs[1:] {
		got = append(got, r[0]+" "+r[2]+" "+r[3])
	}
	want := "1 insert 2|2 insert 2|3 insert 2|4 insert 3|5 insert 3|2 delete 4"
	if strings.Join(recs[0], ",") != "id,name,_change_type,_commit_version,_commit_timestamp" || strings.Join(got, "|") != want {
		t.Fatalf("changes --format csv:\n%s\nwant rows %s", out, want)
	}
	if recs[6][1] != `bo, "the" second` || recs[6][4] == "" {
		t.Errorf("the delete row %q lacks the old row or its commit time", recs[6])
	}

	var doc struct {
		FormatVersion int              `json:"format_version"`
		Table         string           `json:"table"`
		From          uint64           `json:"from_version"`
		To            uint64           `json:"to_version"`
		Rows          []map[string]any `json:"rows"`
	}
	out, _, _ = runInProcess(t, "changes", "--from", "3", "--format", "json", "--columns", "id", uri)
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.FormatVersion != 1 || doc.Table != "people" || doc.From != 3 || doc.To != 4 || len(doc.Rows) != 3 {
		t.Fatalf("changes --from 3 --format json: %v %s", err, out)
	}
	if doc.Rows[2]["_change_type"] != "delete" || doc.Rows[2]["id"] != float64(2) || doc.Rows[2]["name"] != nil {
		t.Errorf("json rows %v", doc.Rows)
	}
	out, _, code = runInProcess(t, "changes", "--from", "2", "--to", "2", uri)
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(strings.Fields(out)[2], "_change_type") {
		t.Errorf("changes --from 2 --to 2 (table): exit %d\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "0"}, "--from must be >= 1"},
		{[]string{"--from", "3", "--to", "2"}, "before --from"},
		{[]string{"--from", "1", "--to", "9"}, "version not found"},
		{[]string{"--filter", "id = = 3", "--from", "1"}, "position 5"},
	} {
		if _, errOut, code := runInProcess(t, append(append([]string{"changes"}, tc.args...), uri)...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("changes %q: exit %d, %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
	if _, errOut, code := runInProcess(t, "changes", "--from", "1", filepath.Join(root, "missing")); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("a missing table: exit %d, %q", code, errOut)
	}
}
