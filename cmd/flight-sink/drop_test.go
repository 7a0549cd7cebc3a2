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

// TestDropDamagedTable: a table too damaged to open (its schema files removed, as a drop racing a
// writer used to leave it) is dropped by `drop --yes`; without --yes the refusal says why it
// cannot describe the table. Afterwards the name is free.
func TestDropDamagedTable(t *testing.T) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store)
	uri := filepath.Join(root, "events")
	if err := os.RemoveAll(filepath.Join(uri, "_schemas")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runInProcess(t, "inspect", uri); code == 0 {
		t.Fatalf("inspect of the damaged table succeeded (%q)", errOut)
	}
	_, refused, code := runInProcess(t, "drop", uri)
	if code != 1 || !strings.Contains(refused, "cannot be read") || !strings.Contains(refused, "--yes") {
		t.Fatalf("drop without --yes: exit %d, stderr %q", code, refused)
	}
	out, errOut, code := runInProcess(t, "drop", "--yes", uri)
	if code != 0 || !strings.Contains(out, "newest version 3") {
		t.Fatalf("drop --yes of the damaged table: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runInProcess(t, "inspect", uri); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("inspect after the drop: exit %d, stderr %q", code, errOut)
	}
	makeTable(t, store)
}
