package flightsvc_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/streaming"
)

// publishCeiling is how long a test waits for a version to reach the REST catalog: a generous
// ceiling on a loaded machine, far above the bound (publish interval, scan interval, a publish).
const publishCeiling = 90 * time.Second

// catalogVersion returns the flight-sink version table's metadata mirrors, as the REST catalog
// serves it (0: not loadable yet).
func catalogVersion(t testing.TB, httpAddr, table string) uint64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/iceberg/v1/namespaces/default/tables/%s", httpAddr, table))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0
	}
	var body struct {
		Metadata struct {
			Properties map[string]string `json:"properties"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseUint(body.Metadata.Properties["flight-sink.version"], 10, 64)
	return v
}

// waitCatalogVersion waits until the REST catalog serves table at version want or newer.
func waitCatalogVersion(t testing.TB, httpAddr, table string, want uint64, after string) {
	t.Helper()
	deadline := time.Now().Add(publishCeiling)
	for {
		got := catalogVersion(t, httpAddr, table)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: the catalog serves version %d of %s %v later; want %d", after, got, table, publishCeiling, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publishingServer starts a server whose background maintenance publishes but compacts
// nothing itself (so that the compactions of the tests have fragments to merge), scanning for
// other processes' commits every scan (negative: never).
func publishingServer(t *testing.T, scan time.Duration) (*testServer, string) {
	noCompaction := false
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0", Sink: streaming.Options{
		DefaultMaintenance:  &engine.MaintenanceConfig{Mode: engine.MaintenanceBackground, Compaction: engine.CompactionMaintenance{Enabled: &noCompaction}},
		IcebergScanInterval: scan,
	}})
	return s, s.Srv.HTTPAddr().String()
}

// putPublished puts two epochs (from epoch *e+1) into table and waits until the catalog serves
// them.
func putPublished(t *testing.T, s *testServer, httpAddr, table string, e *int64) {
	for range 2 {
		*e++
		s.putEpoch(t, table, "q", *e, idRange(*e*10, 3))
	}
	waitCatalogVersion(t, httpAddr, table, s.version(t, table), "epochs")
}

// TestIcebergPublishesActionCommits: the commit of a delete action alone, and of a compact
// action alone, reaches the REST catalog with no further commit and no scan for others'
// commits (the actions schedule their publish).
func TestIcebergPublishesActionCommits(t *testing.T) {
	s, httpAddr := publishingServer(t, -1)
	const table = "actions"
	var epoch int64
	putPublished(t, s, httpAddr, table, &epoch)

	var del flightsvc.DeleteResult
	s.mustAction(t, "delete", cmd{"table": table, "where": map[string]any{"op": "=", "column": "id", "value": 10}}, &del)
	if !del.Committed {
		t.Fatalf("delete committed nothing: %+v", del)
	}
	waitCatalogVersion(t, httpAddr, table, del.Version, "a delete action")

	putPublished(t, s, httpAddr, table, &epoch)
	var comp flightsvc.CompactResult
	s.mustAction(t, "compact", cmd{"table": table}, &comp)
	if comp.Version == 0 {
		t.Fatalf("the compact action committed nothing: %+v", comp)
	}
	waitCatalogVersion(t, httpAddr, table, comp.Version, "a compact action")
}

// TestIcebergPublishesOtherProcessCommits: a `flight-sink compact` run by another process on the
// server's root reaches the REST catalog: the server's scan finds the version it did not make.
func TestIcebergPublishesOtherProcessCommits(t *testing.T) {
	s, httpAddr := publishingServer(t, 250*time.Millisecond)
	const table = "others"
	var epoch int64
	putPublished(t, s, httpAddr, table, &epoch)
	putPublished(t, s, httpAddr, table, &epoch)
	before := s.version(t, table)
	out, err := exec.Command(servertest.Binary(t), "compact", filepath.Join(s.Root, table)).CombinedOutput()
	if err != nil {
		t.Fatalf("flight-sink compact: %v\n%s", err, out)
	}
	after := s.version(t, table)
	if after <= before {
		t.Fatalf("flight-sink compact committed nothing (version %d, then %d):\n%s", before, after, out)
	}
	waitCatalogVersion(t, httpAddr, table, after, "flight-sink compact in another process")
}
