package flightsvc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/objstore"
)

// FuzzIcebergREST: whatever the method, path, query string and authorization of a request, the
// REST catalog never panics and answers either a success (JSON, or HEAD's empty 204) or a 4xx
// with the REST spec's JSON ErrorModel (its code the status), whose message repeats at most a
// few hundred bytes of the request.
func FuzzIcebergREST(f *testing.F) {
	const token = "fuzz-token"
	s := startServer(f, flightsvc.Config{})
	ctx := context.Background()
	store, err := objstore.NewLocal(s.Root)
	if err != nil {
		f.Fatal(err)
	}
	tb, err := engine.Create(ctx, store, "events", rowSchema, engine.CreateOptions{PrimaryKey: []string{"id"}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	rec := batch(1, 2)
	_, err = tb.Append(ctx, []arrow.RecordBatch{rec}, nil)
	rec.Release()
	if err != nil {
		f.Fatal(err)
	}
	if _, err := iceberg.New(tb, nil).Publish(ctx); err != nil {
		f.Fatal(err)
	}
	h := flightsvc.IcebergRESTHandler(s.Srv, token)

	long := strings.Repeat("n", 5000)
	for _, seed := range []struct {
		method, path, query string
		authorized          bool
	}{
		{"GET", "/v1/config", "warehouse=x", true},
		{"GET", "/v1/namespaces", "", true},
		{"GET", "/v1/namespaces", "parent=default", true},
		{"HEAD", "/v1/namespaces/default", "", true},
		{"GET", "/v1/namespaces/default/tables", "pageToken=&pageSize=1", true},
		{"GET", "/v1/namespaces/default/tables/events", "snapshots=all", true},
		{"HEAD", "/v1/namespaces/default/tables/events", "", true},
		{"GET", "/v1/namespaces/default/tables/events", "", false},
		{"POST", "/v1/namespaces/default/tables", "", true},
		{"DELETE", "/v1/namespaces/default/tables/events", "", true},
		{"GET", "/v1/namespaces/" + long, "", true},
		{"GET", "/v1/namespaces/default/tables/" + long, "", true},
		{"GET", "/v1/namespaces/default/tables/" + strings.Repeat("ü", 200), "", true},
		{"GET", "/v1//config", "", true},
		{"GET", "/v1/namespaces/default/tables/../../config", "", true},
		{"GET", "/v1/namespaces/default/tables/.", "", true},
		{"GET", "", "", true},
		{"GET", "/v1/namespaces/default/tables/a%2Fb", "%zz", true},
		{long, "/" + long, long, true},
		{"CONNECT", "/v1/config", "", true},
	} {
		f.Add(seed.method, seed.path, seed.query, seed.authorized)
	}
	f.Fuzz(func(t *testing.T, method, path, query string, authorized bool) {
		req := &http.Request{
			Method: method,
			URL:    &url.URL{Path: "/iceberg" + path, RawQuery: query},
			Header: http.Header{},
			Host:   "127.0.0.1",
			Body:   http.NoBody,
		}
		req = req.WithContext(t.Context())
		if authorized {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body := w.Body.Bytes()
		switch code := w.Code; {
		case code == http.StatusOK:
			if !json.Valid(body) {
				t.Fatalf("%q %q?%q: 200 with a body that is not JSON: %q", method, path, query, body)
			}
		case code == http.StatusNoContent && method == http.MethodHead:
		case code >= 400 && code < 500:
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%q %q?%q: %d with Content-Type %q, want application/json: %q", method, path, query, code, ct, body)
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != code || e.Error.Type == "" || e.Error.Message == "" {
				t.Fatalf("%q %q?%q: %d with a body that is not the REST ErrorModel: %q (%v)", method, path, query, code, body, err)
			}
			if len(e.Error.Message) > 1024 {
				t.Fatalf("%q %q?%q: the error message repeats %d bytes: %.300q...", method, path, query, len(e.Error.Message), e.Error.Message)
			}
		default:
			t.Fatalf("%q %q?%q: status %d, want a success or a 4xx JSON error: %q", method, path, query, code, body)
		}
	})
}
