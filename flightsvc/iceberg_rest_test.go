package flightsvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/internal/pythontest"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestIcebergRESTCatalog: the HTTP listener's /iceberg is an Iceberg REST catalog PyIceberg
// attaches to (load_catalog type "rest", the server's auth token as its bearer token): it lists
// every published table, and every one reads exactly its rows; a keyed table carries its primary
// key as identifier fields; a table with publishing off is not listed; a request without the
// token is refused (401). DuckDB's ATTACH (TYPE iceberg) lists and reads them the same.
func TestIcebergRESTCatalog(t *testing.T) {
	py := pythontest.Interpreter(t, "pyiceberg")
	const token = "rest-s3cret"
	s := startServer(t, flightsvc.Config{AuthTokens: []string{token}, HTTPListen: "127.0.0.1:0"})
	ctx := context.Background()
	store, err := objstore.NewLocal(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{}
	for _, tc := range []struct {
		name string
		pk   []string
		ids  []int64
		off  bool
	}{
		{"plain", nil, []int64{1, 2, 3}, false},
		{"keyed", []string{"id"}, []int64{10, 11}, false},
		{"empty", nil, nil, false},
		{"unpublished", nil, []int64{7}, true},
	} {
		co := engine.CreateOptions{PrimaryKey: tc.pk}
		if tc.off {
			co.Config = map[string]string{iceberg.ConfigPublish: "false"}
		}
		tb, err := engine.Create(ctx, store, tc.name, rowSchema, co, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(tc.ids) > 0 {
			rec := batch(tc.ids...)
			_, err := tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if tc.off {
			continue
		}
		if _, err := iceberg.New(tb, nil).Publish(ctx); err != nil {
			t.Fatal(err)
		}
		want[tc.name] = append([]int64{}, tc.ids...)
	}
	uri := fmt.Sprintf("http://%s/iceberg", s.Srv.HTTPAddr())

	resp, err := http.Get(uri + "/v1/namespaces/default/tables")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("list tables without the token: %s; want 401", resp.Status)
	}

	script := `
import json, sys
from pyiceberg.catalog import load_catalog
cat = load_catalog("flight-sink", type="rest", uri=sys.argv[1], token=sys.argv[2])
out = {"namespaces": [list(n) for n in cat.list_namespaces()], "tables": {}}
for ident in cat.list_tables("default"):
    tbl = cat.load_table(ident)
    ids = sorted(tbl.scan().to_arrow().column("id").to_pylist())
    out["tables"][ident[-1]] = {"ids": ids, "identifiers": list(tbl.schema().identifier_field_names())}
print(json.dumps(out))
`
	cmd := exec.CommandContext(ctx, py, "-c", script, uri, token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg: %v\n%s", err, stderr.String())
	}
	var got struct {
		Namespaces [][]string `json:"namespaces"`
		Tables     map[string]struct {
			IDs         []int64  `json:"ids"`
			Identifiers []string `json:"identifiers"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("pyiceberg printed %q: %v", out, err)
	}
	if fmt.Sprint(got.Namespaces) != "[[default]]" {
		t.Errorf("namespaces %v; want [[default]]", got.Namespaces)
	}
	if len(got.Tables) != len(want) {
		t.Fatalf("the catalog lists %v; want the published tables %v", got.Tables, want)
	}
	for name, ids := range want {
		g, ok := got.Tables[name]
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if !ok || fmt.Sprint(g.IDs) != fmt.Sprint(ids) {
			t.Errorf("table %s reads %v through the catalog; want %v", name, g.IDs, ids)
		}
	}
	if ids := got.Tables["keyed"].Identifiers; fmt.Sprint(ids) != "[id]" {
		t.Errorf("keyed table's identifier fields %v; want [id]", ids)
	}

	t.Run("duckdb", func(t *testing.T) {
		// DuckDB's iceberg, avro and httpfs extensions from their pip packages
		// (duckdb-ext-iceberg, duckdb-ext-avro, duckdb-ext-httpfs): no download at run time.
		dscript := `
import json, os, sys, duckdb, importlib.metadata as md
files = md.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions")
con = duckdb.connect(config={"extension_directory": str(files), "autoinstall_known_extensions": False})
con.execute("LOAD httpfs"); con.execute("LOAD avro"); con.execute("LOAD iceberg")
con.execute(f"CREATE SECRET fs (TYPE iceberg, TOKEN '{sys.argv[2]}')")
con.execute(f"ATTACH 'warehouse' AS fs (TYPE iceberg, SECRET fs, ENDPOINT '{sys.argv[1]}')")
out = {}
for (name,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'fs' AND table_schema = 'default'").fetchall():
    out[name] = sorted(r[0] for r in con.execute(f'SELECT id FROM fs."default"."{name}"').fetchall())
print(json.dumps(out))
`
		if err := exec.Command(py, "-c", "import duckdb, importlib.metadata as md; md.distribution('duckdb-ext-iceberg'); md.distribution('duckdb-ext-avro'); md.distribution('duckdb-ext-httpfs')").Run(); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s cannot import duckdb with duckdb-ext-iceberg and duckdb-ext-avro: %v", py, err)
			}
			t.Skipf("%s has no duckdb with duckdb-ext-iceberg and duckdb-ext-avro: %v", py, err)
		}
		cmd := exec.CommandContext(ctx, py, "-c", dscript, uri, token)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("duckdb: %v\n%s", err, stderr.String())
		}
		var tables map[string][]int64
		if err := json.Unmarshal(out, &tables); err != nil {
			t.Fatalf("duckdb printed %q: %v", out, err)
		}
		if len(tables) != len(want) {
			t.Fatalf("DuckDB's ATTACH lists %v; want the published tables %v", tables, want)
		}
		for name, ids := range want {
			if g, ok := tables[name]; !ok || fmt.Sprint(g) != fmt.Sprint(ids) {
				t.Errorf("table %s reads %v in DuckDB; want %v", name, g, ids)
			}
		}
	})
}
