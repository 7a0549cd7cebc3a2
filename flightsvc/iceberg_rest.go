package flightsvc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/iceberg"
)

// icebergRESTPrefix is where the HTTP listener serves the Iceberg REST catalog: a client's
// catalog URI is http://<http-listen>/iceberg (docs/iceberg.md, REST catalog).
const icebergRESTPrefix = "/iceberg"

// icebergNamespace is the one namespace of the REST catalog: every table of the server's root.
const icebergNamespace = "default"

// icebergREST is a read-only Iceberg REST catalog (the REST spec's config, namespaces, list and
// load table endpoints) of every table of the sink's root that has Iceberg metadata. A loaded
// table is its newest metadata file, as the publisher wrote it; the catalog commits nothing.
// With auth tokens configured every request needs "Authorization: Bearer <token>".
type icebergREST struct {
	svc  *Service
	auth *tokenAuth
}

// newIcebergREST returns the catalog's handler, to be mounted under icebergRESTPrefix.
func newIcebergREST(svc *Service, auth *tokenAuth) http.Handler {
	c := &icebergREST{svc: svc, auth: auth}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/config", c.config)
	mux.HandleFunc("GET /v1/namespaces", c.namespaces)
	mux.HandleFunc("GET /v1/namespaces/{ns}", c.namespace)
	mux.HandleFunc("HEAD /v1/namespaces/{ns}", c.namespace)
	mux.HandleFunc("GET /v1/namespaces/{ns}/tables", c.tables)
	mux.HandleFunc("GET /v1/namespaces/{ns}/tables/{table}", c.loadTable)
	mux.HandleFunc("HEAD /v1/namespaces/{ns}/tables/{table}", c.loadTable)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		restError(w, http.StatusNotFound, "NotFoundException", "no such endpoint of this read-only catalog: "+echo(r.Method)+" "+echo(r.URL.Path))
	})
	return http.StripPrefix(icebergRESTPrefix, c.authorize(cleanPath(mux)))
}

// cleanPath answers a path the mux would redirect to its cleaned form ("//", "." or ".."
// segments) with the catalog's 404 instead: a REST client follows no redirect, and every
// answer of the catalog is JSON.
func cleanPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
			strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") {
			restError(w, http.StatusNotFound, "NotFoundException", "no such endpoint of this read-only catalog: "+echo(r.Method)+" "+echo(p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxEcho is the most bytes of a request's own text (a name, a path) an error message repeats.
const maxEcho = 200

// echo returns s for an error message: cut to maxEcho bytes (on a rune boundary, saying how
// long it was), so a client's long name is not sent back whole.
func echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// authorize checks the request's Authorization header by the Flight port's rule
// (tokenAuth.verify) when tokens are set.
func (c *icebergREST) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.auth.verify(r.Header.Get("Authorization")); err != nil {
			restError(w, http.StatusUnauthorized, "NotAuthorizedException", "a bearer token the server accepts is required (the server's --auth-token)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *icebergREST) config(w http.ResponseWriter, _ *http.Request) {
	restJSON(w, map[string]any{"defaults": map[string]string{}, "overrides": map[string]string{}})
}

func (c *icebergREST) namespaces(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("parent") != "" {
		restJSON(w, map[string]any{"namespaces": [][]string{}})
		return
	}
	restJSON(w, map[string]any{"namespaces": [][]string{{icebergNamespace}}})
}

func (c *icebergREST) namespace(w http.ResponseWriter, r *http.Request) {
	if !c.knownNamespace(w, r) {
		return
	}
	restJSON(w, map[string]any{"namespace": []string{icebergNamespace}, "properties": map[string]string{}})
}

func (c *icebergREST) knownNamespace(w http.ResponseWriter, r *http.Request) bool {
	if ns := r.PathValue("ns"); ns != icebergNamespace {
		restError(w, http.StatusNotFound, "NoSuchNamespaceException", "namespace "+echo(ns)+" does not exist: the catalog's one namespace is "+icebergNamespace)
		return false
	}
	return true
}

// tables lists the tables that have Iceberg metadata.
func (c *icebergREST) tables(w http.ResponseWriter, r *http.Request) {
	if !c.knownNamespace(w, r) {
		return
	}
	ctx := r.Context()
	store := c.svc.sink.Store()
	names, err := engine.ListTables(ctx, store)
	if err != nil {
		restError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	ids := []map[string]any{}
	for _, n := range names {
		if _, _, err := iceberg.LatestMetadata(ctx, store, n); err != nil {
			continue // not published (publishing off), or unreadable: not listed
		}
		ids = append(ids, map[string]any{"namespace": []string{icebergNamespace}, "name": n})
	}
	restJSON(w, map[string]any{"identifiers": ids})
}

// loadTable answers the table's newest metadata file (LoadTableResult).
func (c *icebergREST) loadTable(w http.ResponseWriter, r *http.Request) {
	if !c.knownNamespace(w, r) {
		return
	}
	name := r.PathValue("table")
	if err := engine.ValidateTableName(name); err != nil {
		restError(w, http.StatusNotFound, "NoSuchTableException", "table "+echo(name)+" does not exist: not a table name (1-128 characters of letters, digits, '_', '.', '-', starting with a letter or digit)")
		return
	}
	loc, meta, err := iceberg.LatestMetadata(r.Context(), c.svc.sink.Store(), name)
	switch {
	case errors.Is(err, iceberg.ErrNoMetadata):
		restError(w, http.StatusNotFound, "NoSuchTableException", "table "+name+" does not exist or has no Iceberg metadata (publishing off)") // a valid name: at most 128 bytes
		return
	case err != nil:
		restError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	if err := checkMetadataFile(meta); err != nil {
		restError(w, http.StatusInternalServerError, "ServiceFailureException",
			fmt.Sprintf("table %s: metadata file %s (%d bytes) is damaged: %v", name, loc, len(meta), err))
		return
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	restJSON(w, map[string]any{"metadata-location": loc, "metadata": json.RawMessage(meta), "config": map[string]string{}})
}

// checkMetadataFile checks that b is a whole Iceberg table metadata file: a JSON object with a
// format-version and a table-uuid. A file cut short or damaged in storage fails it.
func checkMetadataFile(b []byte) error {
	var head struct {
		FormatVersion *int   `json:"format-version"`
		TableUUID     string `json:"table-uuid"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	if head.FormatVersion == nil || head.TableUUID == "" {
		return errors.New("no format-version or table-uuid")
	}
	return nil
}

// restJSON answers 200 with v, or, when v does not encode, a 500 ErrorModel: never a 200
// with a partial body.
func restJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		restError(w, http.StatusInternalServerError, "ServiceFailureException", "encode the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// restError writes the REST spec's ErrorModel.
func restError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}
