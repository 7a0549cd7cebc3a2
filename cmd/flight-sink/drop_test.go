package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestDropCLI: `flight-sink drop` refuses without --yes (deleting nothing), then deletes every
// file of the table and reports its newest version; a second drop says the table is not found.
func TestDropCLI(t *testing.T) {
	bin := buildCLI(t)
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store)
	uri := filepath.Join(root, "events")

	r := runCLI(t, bin, nil, "drop", uri)
	if r.code != 1 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("drop without --yes: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(uri, "_versions")); err != nil {
		t.Fatalf("drop without --yes deleted the table: %v", err)
	}
	var out flightsvc.DropTableResult
	if err := json.Unmarshal([]byte(runCLI(t, bin, nil, "drop", "--yes", "--json", uri).mustSucceed(t).stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.FormatVersion != 1 || out.Table != "events" || out.Version != 3 {
		t.Fatalf("drop answered %+v, want events at version 3", out)
	}
	if entries, err := os.ReadDir(uri); err == nil && len(entries) > 0 {
		t.Fatalf("%d entries left under the dropped table", len(entries))
	}
	r = runCLI(t, bin, nil, "drop", "--yes", uri)
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("second drop: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestDropText: drop's text, refusing without --yes and then dropping (golden, the root
// masked).
func TestDropText(t *testing.T) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store)
	uri := filepath.Join(root, "events")
	_, refused, code := runInProcess(t, "drop", uri)
	if code != 1 {
		t.Fatalf("drop without --yes: exit %d", code)
	}
	out, errOut, code := runInProcess(t, "drop", "--yes", uri)
	if code != 0 || errOut != "" {
		t.Fatalf("drop --yes: exit %d, %q", code, errOut)
	}
	golden(t, "drop.golden", strings.ReplaceAll(refused+out, root, "ROOT"))
}
