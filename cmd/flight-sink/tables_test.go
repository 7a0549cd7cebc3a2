package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestTables: tables ROOT_URI lists every table of a root with its latest figures, as a text
// table (golden, times and sizes masked) and as JSON with a format_version.
func TestTables(t *testing.T) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store) // events: version 3, 5 rows in 2 fragments
	out, errOut, code := runInProcess(t, "tables", root)
	if code != 0 || errOut != "" {
		t.Fatalf("tables: exit %d, stderr %q", code, errOut)
	}
	masked := regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`).ReplaceAllString(out, "TIME")
	masked = regexp.MustCompile(`\d+(\.\d)? (B|KiB|MiB)`).ReplaceAllString(masked, "SIZE")
	golden(t, "tables.golden", masked)

	out, _, code = runInProcess(t, "tables", "--json", root)
	var got tablesJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("tables --json: exit %d, %v\n%s", code, err, out)
	}
	if got.FormatVersion != 1 || len(got.Tables) != 1 {
		t.Fatalf("tables --json: %+v", got)
	}
	if l := got.Tables[0]; l.Table != "events" || l.Version != 3 || l.Rows != 5 || l.Fragments != 2 || l.DataBytes <= 0 || l.LastCommit == "" {
		t.Errorf("events: %+v", l)
	}

	empty := t.TempDir()
	if out, _, code := runInProcess(t, "tables", empty); code != 0 || out != "no tables in file://"+empty+"\n" {
		t.Errorf("an empty root: exit %d %q", code, out)
	}
	if _, errOut, code := runInProcess(t, "tables", empty+"/missing"); code != 1 || errOut == "" {
		t.Errorf("a missing root: exit %d %q", code, errOut)
	}
}
