package flightsvc_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/internal/pythontest"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// restCall sends one request to the REST catalog of the server at httpAddr and returns the
// response and its body.
func restCall(t *testing.T, method, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestIcebergRESTSpecSubset: the catalog serves the REST spec's read-only subset as the spec
// says: GET /v1/config lists its endpoints; HEAD of a namespace and of a table answers 204, 404
// when absent; a loaded table carries an ETag, If-None-Match with it answers 304 until a publish
// changes the metadata (then 200 and a new tag); the access-delegation header is accepted; every
// other endpoint the spec defines (writes among them) answers UnsupportedOperationException 406,
// and a path it does not define 404.
func TestIcebergRESTSpecSubset(t *testing.T) {
	s, httpAddr := publishingServer(t, -1)
	base := "http://" + httpAddr + "/iceberg/v1"
	var epoch int64
	putPublished(t, s, httpAddr, "events", &epoch)

	resp, b := restCall(t, "GET", base+"/config", nil)
	var cfg struct {
		Endpoints []string `json:"endpoints"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/config: %s %s (%v)", resp.Status, b, err)
	}
	for _, e := range []string{"GET /v1/{prefix}/namespaces", "GET /v1/{prefix}/namespaces/{namespace}",
		"HEAD /v1/{prefix}/namespaces/{namespace}", "GET /v1/{prefix}/namespaces/{namespace}/tables",
		"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}", "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}"} {
		if !slices.Contains(cfg.Endpoints, e) {
			t.Errorf("config endpoints %q lack %q", cfg.Endpoints, e)
		}
	}
	if slices.ContainsFunc(cfg.Endpoints, func(e string) bool { return strings.HasSuffix(e, "/credentials") }) {
		t.Errorf("a local root's catalog lists a credentials endpoint: %q", cfg.Endpoints)
	}

	for _, tc := range []struct {
		path string
		want int
	}{
		{"/namespaces/default", 204}, {"/namespaces/other", 404},
		{"/namespaces/default/tables/events", 204}, {"/namespaces/default/tables/nope", 404},
		{"/namespaces/other/tables/events", 404},
	} {
		if resp, _ := restCall(t, "HEAD", base+tc.path, nil); resp.StatusCode != tc.want {
			t.Errorf("HEAD %s: %s, want %d", tc.path, resp.Status, tc.want)
		}
	}

	table := base + "/namespaces/default/tables/events"
	resp, _ = restCall(t, "GET", table, map[string]string{"X-Iceberg-Access-Delegation": "vended-credentials"})
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || etag == "" {
		t.Fatalf("GET the table: %s, ETag %q; want 200 with an ETag", resp.Status, etag)
	}
	if resp, b := restCall(t, "GET", table, map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified || len(b) != 0 {
		t.Fatalf("GET with If-None-Match of the current ETag: %s %q; want 304 and no body", resp.Status, b)
	}
	putPublished(t, s, httpAddr, "events", &epoch)
	resp, b = restCall(t, "GET", table, map[string]string{"If-None-Match": etag})
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == etag || resp.Header.Get("ETag") == "" || !bytes.Contains(b, []byte(`"metadata"`)) {
		t.Fatalf("GET with the old ETag after a publish: %s, ETag %q (old %q); want 200, the metadata and a new ETag", resp.Status, resp.Header.Get("ETag"), etag)
	}

	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/namespaces/default/tables/events", 406}, // a commit
		{"DELETE", "/namespaces/default/tables/events", 406},
		{"POST", "/namespaces", 406},
		{"DELETE", "/namespaces/default", 406},
		{"POST", "/namespaces/default/tables", 406},
		{"POST", "/namespaces/default/properties", 406},
		{"POST", "/namespaces/default/register", 406},
		{"POST", "/transactions/commit", 406},
		{"POST", "/tables/rename", 406},
		{"GET", "/namespaces/default/views", 406},
		{"POST", "/namespaces/default/tables/events/plan", 406},
		{"GET", "/namespaces/default/tables/events/credentials", 406}, // nothing to vend
		{"GET", "/no/such/path", 404},
	} {
		resp, b := restCall(t, tc.method, base+tc.path, nil)
		var e struct {
			Error struct {
				Type string `json:"type"`
				Code int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.want || e.Error.Code != tc.want {
			t.Errorf("%s %s: %s %s; want %d with the spec's error model", tc.method, tc.path, resp.Status, b, tc.want)
		}
		if tc.want == 406 && e.Error.Type != "UnsupportedOperationException" {
			t.Errorf("%s %s: error type %q; want UnsupportedOperationException", tc.method, tc.path, e.Error.Type)
		}
	}
}

// TestIcebergRESTS3Root: on an S3 root a loaded table's config says how to reach the bucket
// (s3.endpoint, s3.path-style-access, client.region) and, with read-only credentials
// configured to vend, carries them when the client delegates access (as does the table's
// credentials endpoint); PyIceberg with nothing but the catalog's URI and token reads the table.
func TestIcebergRESTS3Root(t *testing.T) {
	uri, opts := storetest.S3(t)
	const token = "s3-rest-token"
	s := startServer(t, flightsvc.Config{Root: uri, S3: &opts, HTTPListen: "127.0.0.1:0", AuthTokens: []string{token},
		IcebergVendCredentials: &iceberg.VendedS3Credentials{AccessKeyID: opts.AccessKeyID, SecretAccessKey: opts.SecretAccessKey}})
	httpAddr := s.Srv.HTTPAddr().String()
	ctx := t.Context()
	store, err := objstore.NewS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "events", rowSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(10, 11, 12, 20, 21, 22)
	_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iceberg.New(tb, nil).Publish(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + httpAddr + "/iceberg/v1"
	auth := "Bearer " + token

	resp, b := restCall(t, "GET", base+"/config", map[string]string{"Authorization": auth})
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials")) {
		t.Fatalf("GET /v1/config: %s %s; want the credentials endpoint listed", resp.Status, b)
	}
	resp, b = restCall(t, "GET", base+"/namespaces/default/tables/events",
		map[string]string{"Authorization": auth, "X-Iceberg-Access-Delegation": "vended-credentials"})
	var load struct {
		Config map[string]string `json:"config"`
	}
	if err := json.Unmarshal(b, &load); err != nil || resp.StatusCode != 200 {
		t.Fatalf("load table: %s %s (%v)", resp.Status, b, err)
	}
	want := map[string]string{"s3.endpoint": opts.Endpoint, "s3.path-style-access": "true", "client.region": opts.Region,
		"s3.access-key-id": opts.AccessKeyID, "s3.secret-access-key": opts.SecretAccessKey}
	for k, v := range want {
		if load.Config[k] != v {
			t.Errorf("load config %s = %q; want %q", k, load.Config[k], v)
		}
	}
	resp, b = restCall(t, "GET", base+"/namespaces/default/tables/events", map[string]string{"Authorization": auth})
	if resp.StatusCode != 200 || bytes.Contains(b, []byte(opts.SecretAccessKey)) {
		t.Errorf("load without delegation: %s; want 200 without the credentials: %s", resp.Status, b)
	}
	resp, b = restCall(t, "GET", base+"/namespaces/default/tables/events/credentials", map[string]string{"Authorization": auth})
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"storage-credentials"`)) || !bytes.Contains(b, []byte(opts.AccessKeyID)) {
		t.Errorf("credentials: %s %s", resp.Status, b)
	}

	py := pythontest.Interpreter(t, "pyiceberg")
	script := `
import json, sys
from pyiceberg.catalog import load_catalog
cat = load_catalog("flight-sink", type="rest", uri=sys.argv[1], token=sys.argv[2])
print(json.dumps(sorted(cat.load_table("default.events").scan().to_arrow().column("id").to_pylist())))
`
	c := exec.Command(py, "-c", script, "http://"+httpAddr+"/iceberg", token)
	// Nothing of the store reaches PyIceberg but through the catalog.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			c.Env = append(c.Env, kv)
		}
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("pyiceberg through the catalog: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), "[10, 11, 12, 20, 21, 22]"; got != want {
		t.Fatalf("pyiceberg reads %s; want %s", got, want)
	}
}

// TestIcebergRESTNotFoundAnswers: what is absent answers as Iceberg's reference catalog does,
// the error type and message prefix its clients and REST compatibility kit match: a namespace
// (also as the parent of a listing) is NoSuchNamespaceException "Namespace does not exist: NS";
// a table, in whichever namespace, NoSuchTableException "Table does not exist: NS.TABLE".
func TestIcebergRESTNotFoundAnswers(t *testing.T) {
	_, httpAddr := publishingServer(t, -1)
	base := "http://" + httpAddr + "/iceberg/v1"
	for _, tc := range []struct {
		path, typ, message string
		exact              bool
	}{
		{"/namespaces?parent=nope", "NoSuchNamespaceException", "Namespace does not exist: nope", true},
		{"/namespaces?parent=a%1Fb", "NoSuchNamespaceException", "Namespace does not exist: a.b", true},
		{"/namespaces/nope", "NoSuchNamespaceException", "Namespace does not exist: nope", false},
		{"/namespaces/nope/tables", "NoSuchNamespaceException", "Namespace does not exist: nope", false},
		{"/namespaces/nope/tables/t", "NoSuchTableException", "Table does not exist: nope.t", false},
		{"/namespaces/default/tables/missing", "NoSuchTableException", "Table does not exist: default.missing", false},
		{"/namespaces/default/tables/-bad", "NoSuchTableException", "Table does not exist: default.-bad", false},
	} {
		resp, b := restCall(t, "GET", base+tc.path, nil)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 404 || e.Error.Code != 404 || e.Error.Type != tc.typ {
			t.Errorf("GET %s: %s %s (%v); want 404 %s", tc.path, resp.Status, b, err, tc.typ)
			continue
		}
		if tc.exact && e.Error.Message != tc.message || !strings.HasPrefix(e.Error.Message, tc.message) {
			t.Errorf("GET %s: message %q; want %q (exact: %v)", tc.path, e.Error.Message, tc.message, tc.exact)
		}
	}
	resp, b := restCall(t, "GET", base+"/namespaces?parent=default", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"namespaces":[]`) {
		t.Errorf("GET /namespaces?parent=default: %s %s; want 200 and no namespaces", resp.Status, b)
	}
	resp, _ = restCall(t, "HEAD", base+"/namespaces/nope/tables/t", nil)
	if resp.StatusCode != 404 {
		t.Errorf("HEAD a table of an unknown namespace: %s; want 404", resp.Status)
	}
}
