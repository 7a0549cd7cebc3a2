package flightsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestDamagedSchemaFileOverFlight: a schema file with one byte changed in storage (a column
// renamed) is refused by a read and a put alike with DataLoss (DATA_CORRUPT) naming the file,
// never read as another schema (its column all nulls) nor refused as SCHEMA_MISMATCH.
func TestDamagedSchemaFileOverFlight(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "hurt", "q", 0, []int64{1, 2})
	schemas, err := filepath.Glob(filepath.Join(s.Root, "hurt", "_schemas", "*.arrows"))
	if err != nil || len(schemas) != 1 {
		t.Fatalf("schema files %v, %v; want one", schemas, err)
	}
	b, err := os.ReadFile(schemas[0])
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "payload")
	if i < 0 {
		t.Fatal("the schema file does not hold the payload column's name")
	}
	b[i] = 'P'
	if err := os.WriteFile(schemas[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Another server on the root: nothing of the table cached.
	other := startServer(t, flightsvc.Config{Root: s.Root})
	name := filepath.Base(schemas[0])
	_, err = other.get(testCtx(t), cmd{"table": "hurt"})
	wantReason(t, err, codes.DataLoss, "DATA_CORRUPT")
	if !strings.Contains(err.Error(), name) {
		t.Fatalf("the read's error %q does not name the schema file %s", err, name)
	}
	_, err = other.putCmd(testCtx(t), t, epochCmd("hurt", "q", 1), []int64{3})
	wantReason(t, err, codes.DataLoss, "DATA_CORRUPT")
}

// TestDamagedIcebergMetadataFile: a table's newest Iceberg metadata file cut short is answered
// by the REST catalog's load table (GET and HEAD) as a 500 with the REST spec's ErrorModel naming
// the file, never a 200 with an empty or partial body.
func TestDamagedIcebergMetadataFile(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0"})
	ctx := context.Background()
	store, err := objstore.NewLocal(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "meta", rowSchema, engine.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iceberg.New(tb, nil).Publish(ctx); err != nil {
		t.Fatal(err)
	}
	uri := fmt.Sprintf("http://%s/iceberg/v1/namespaces/default/tables/meta", s.Srv.HTTPAddr())
	resp, err := http.Get(uri)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("load table before the damage: %s", resp.Status)
	}
	files, err := filepath.Glob(filepath.Join(s.Root, "meta", "metadata", "*.metadata.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("metadata files %v, %v", files, err)
	}
	newest := files[len(files)-1] // v<N>: one file after one publish
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, err := http.NewRequest(method, uri, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("%s of the table with a cut metadata file: %s %q; want 500", method, resp.Status, body)
		}
		if method == http.MethodHead {
			continue
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != 500 || e.Error.Type == "" ||
			!strings.Contains(e.Error.Message, filepath.Base(newest)) {
			t.Fatalf("the 500's body %q is not an ErrorModel naming %s (%v)", body, filepath.Base(newest), err)
		}
	}
}

// TestLocalRootRemoved: with the server's local root directory removed, a put that would
// create its table answers Unavailable (STORAGE_UNAVAILABLE) naming the root and creates nothing
// (the root stays gone), and /readyz turns 503 at the readiness probe's next look.
func TestLocalRootRemoved(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0"})
	s.putEpoch(t, "kept", "q", 0, []int64{1})
	if err := os.RemoveAll(s.Root); err != nil {
		t.Fatal(err)
	}
	_, err := s.putCmd(testCtx(t), t, cmd{"table": "fresh", "query_id": "q", "epoch_id": 0, "create": true}, []int64{1})
	wantReason(t, err, codes.Unavailable, "STORAGE_UNAVAILABLE")
	if !strings.Contains(err.Error(), s.Root) {
		t.Fatalf("the put's error %q does not name the root %s", err, s.Root)
	}
	_, err = s.putCmd(testCtx(t), t, epochCmd("kept", "q", 1), []int64{2})
	wantCode(t, err, codes.Unavailable)
	if _, err := os.Stat(s.Root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the removed root was created again: %v", err)
	}
	// The probe looks every few seconds: wait for its verdict, bounded generously.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", s.Srv.HTTPAddr()))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), s.Root) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with the root removed: %s %q; want 503 naming the root", resp.Status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
