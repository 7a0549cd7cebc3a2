package iceberg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// icebergNamespace is the one namespace of the REST catalog: every table of the root.
const icebergNamespace = "default"

// RESTOptions configure a REST catalog (NewRESTCatalog).
type RESTOptions struct {
	// Vend, when set, are the read-only S3 credentials handed to readers of an S3 root.
	Vend *VendedS3Credentials
	// Authorize, when set, decides whether a request may be answered: a request it returns an
	// error for is answered 401 (NotAuthorizedException). The server passes its one
	// authenticator, the rule of its Flight port.
	Authorize func(*http.Request) error
}

// restCatalog is a read-only Iceberg REST catalog (the REST spec's read-only subset: config,
// namespaces, list, load and check tables, and vended credentials when configured) of every
// table of a root that has Iceberg metadata. A loaded table is its newest metadata file, as the
// publisher wrote it; the catalog commits nothing.
type restCatalog struct {
	store objstore.Store
	opts  RESTOptions
	// endpoints are the endpoints served, as GET /v1/config lists them.
	endpoints []string
}

// VendedS3Credentials are read-only S3 credentials the REST catalog hands to the readers of an
// S3 root's tables (serve --iceberg-vend-credentials): in a loaded table's config and from the
// table's credentials endpoint. They should allow reading the root's objects and nothing else.
type VendedS3Credentials struct {
	AccessKeyID     string `json:"access-key-id"`
	SecretAccessKey string `json:"secret-access-key"`
	SessionToken    string `json:"session-token,omitempty"`
}

// restRoute is one endpoint of the catalog: its method and path under the catalog (as the mux
// matches them) and its name in the REST spec ("METHOD /v1/{prefix}/...").
type restRoute struct {
	method, path, spec string
	handle             func(*restCatalog, http.ResponseWriter, *http.Request)
}

// restRoutes are the endpoints the catalog serves. GET routes answer HEAD too (net/http).
var restRoutes = []restRoute{
	{"GET", "/v1/config", "GET /v1/config", (*restCatalog).config},
	{"GET", "/v1/namespaces", "GET /v1/{prefix}/namespaces", (*restCatalog).namespaces},
	{"GET", "/v1/namespaces/{ns}", "GET /v1/{prefix}/namespaces/{namespace}", (*restCatalog).namespace},
	{"HEAD", "/v1/namespaces/{ns}", "HEAD /v1/{prefix}/namespaces/{namespace}", (*restCatalog).namespace},
	{"GET", "/v1/namespaces/{ns}/tables", "GET /v1/{prefix}/namespaces/{namespace}/tables", (*restCatalog).tables},
	{"GET", "/v1/namespaces/{ns}/tables/{table}", "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}", (*restCatalog).loadTable},
	{"HEAD", "/v1/namespaces/{ns}/tables/{table}", "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}", (*restCatalog).loadTable},
	{"GET", restCredentialsPath, "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials", (*restCatalog).credentials},
}

// restSpecPaths are the other paths the REST spec defines (writes, scan planning, views,
// functions, request signing, OAuth): any method on them answers the spec's
// UnsupportedOperationResponse (406), as does a method the catalog does not serve on a path
// it serves.
var restSpecPaths = []string{
	"/v1/oauth/tokens",
	"/v1/namespaces/{ns}/properties",
	"/v1/namespaces/{ns}/register",
	"/v1/namespaces/{ns}/register-view",
	"/v1/namespaces/{ns}/tables/{table}/plan",
	"/v1/namespaces/{ns}/tables/{table}/plan/{plan}",
	"/v1/namespaces/{ns}/tables/{table}/tasks",
	"/v1/namespaces/{ns}/tables/{table}/unregister",
	"/v1/namespaces/{ns}/tables/{table}/sign",
	"/v1/namespaces/{ns}/tables/{table}/metrics",
	"/v1/namespaces/{ns}/views",
	"/v1/namespaces/{ns}/views/{view}",
	"/v1/namespaces/{ns}/functions",
	"/v1/namespaces/{ns}/functions/{function}",
	"/v1/tables/rename",
	"/v1/views/rename",
	"/v1/transactions/commit",
}

// NewRESTCatalog returns the read-only Iceberg REST catalog of the tables of store as an HTTP
// handler: it serves the spec's paths from the root ("/v1/config", ...), so a server mounts it
// under its catalog prefix with http.StripPrefix (docs/iceberg.md, REST catalog).
func NewRESTCatalog(store objstore.Store, o RESTOptions) http.Handler {
	c := &restCatalog{store: store, opts: o}
	mux := http.NewServeMux()
	for _, rt := range restRoutes {
		if rt.path == restCredentialsPath && !c.vending() {
			continue // nothing to vend: the endpoint is unsupported, like the spec's others
		}
		handle := rt.handle
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) { handle(c, w, r) })
		c.endpoints = append(c.endpoints, rt.spec)
	}
	unsupported := func(w http.ResponseWriter, r *http.Request) {
		restError(w, http.StatusNotAcceptable, "UnsupportedOperationException", "this catalog is read-only and does not support "+
			echo(r.Method)+" "+echo(r.URL.Path)+" (GET /v1/config lists its endpoints)")
	}
	// Any other method on a path the spec defines (POST a table: a commit); the method-less
	// pattern is less specific than the routes above.
	paths := map[string]bool{}
	for _, rt := range restRoutes {
		paths[rt.path] = true
	}
	for _, p := range restSpecPaths {
		paths[p] = true
	}
	for p := range paths {
		mux.HandleFunc(p, unsupported)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		restError(w, http.StatusNotFound, "NotFoundException", "no such endpoint of this read-only catalog: "+echo(r.Method)+" "+echo(r.URL.Path))
	})
	return c.authorize(cleanPath(mux))
}

// restCredentialsPath is the table's vended-credentials endpoint.
const restCredentialsPath = "/v1/namespaces/{ns}/tables/{table}/credentials"

// vending reports whether the catalog hands readers credentials: an S3 root and credentials
// configured.
func (c *restCatalog) vending() bool {
	_, s3 := c.store.(*objstore.S3)
	return s3 && c.opts.Vend != nil
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

// authorize answers a request RESTOptions.Authorize refuses with 401, before the catalog reads
// anything.
func (c *restCatalog) authorize(next http.Handler) http.Handler {
	if c.opts.Authorize == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.opts.Authorize(r); err != nil {
			restError(w, http.StatusUnauthorized, "NotAuthorizedException", "a bearer token the server accepts is required (the server's --auth-token)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *restCatalog) config(w http.ResponseWriter, _ *http.Request) {
	restJSON(w, map[string]any{"defaults": map[string]string{}, "overrides": map[string]string{}, "endpoints": c.endpoints})
}

func (c *restCatalog) namespaces(w http.ResponseWriter, r *http.Request) {
	if parent := r.URL.Query().Get("parent"); parent != "" {
		if parent != icebergNamespace {
			namespaceNotFound(w, parent)
			return
		}
		restJSON(w, map[string]any{"namespaces": [][]string{}})
		return
	}
	restJSON(w, map[string]any{"namespaces": [][]string{{icebergNamespace}}})
}

func (c *restCatalog) namespace(w http.ResponseWriter, r *http.Request) {
	if !c.knownNamespace(w, r) {
		return
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusNoContent) // the spec's namespaceExists
		return
	}
	restJSON(w, map[string]any{"namespace": []string{icebergNamespace}, "properties": map[string]string{}})
}

func (c *restCatalog) knownNamespace(w http.ResponseWriter, r *http.Request) bool {
	if ns := r.PathValue("ns"); ns != icebergNamespace {
		namespaceNotFound(w, ns)
		return false
	}
	return true
}

// namespaceNotFound answers 404 NoSuchNamespaceException for namespace ns (its levels joined by
// the spec's unit separator) with the message of Iceberg's reference catalog, "Namespace does not
// exist: a.b", which Iceberg's clients and its REST compatibility kit match whole.
func namespaceNotFound(w http.ResponseWriter, ns string) {
	restError(w, http.StatusNotFound, "NoSuchNamespaceException", "Namespace does not exist: "+echo(strings.ReplaceAll(ns, "\x1f", ".")))
}

// tableNotFound answers 404 NoSuchTableException for the table of the request (in whichever
// namespace, as the reference catalog does: loading a table of an unknown namespace is a missing
// table), the message starting as the reference catalog's, "Table does not exist: ns.table",
// then why.
func tableNotFound(w http.ResponseWriter, r *http.Request, why string) {
	ident := strings.ReplaceAll(r.PathValue("ns"), "\x1f", ".") + "." + r.PathValue("table")
	restError(w, http.StatusNotFound, "NoSuchTableException", "Table does not exist: "+echo(ident)+" ("+why+")")
}

// tableNamespace reports whether the request's table is in the catalog's namespace, answering
// the missing table when it is not.
func tableNamespace(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("ns") != icebergNamespace {
		tableNotFound(w, r, "the catalog's one namespace is "+icebergNamespace)
		return false
	}
	return true
}

// tables lists the tables that have Iceberg metadata.
func (c *restCatalog) tables(w http.ResponseWriter, r *http.Request) {
	if !c.knownNamespace(w, r) {
		return
	}
	ctx := r.Context()
	store := c.store
	names, err := engine.ListTables(ctx, store)
	if err != nil {
		restError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	ids := []map[string]any{}
	for _, n := range names {
		if _, _, err := LatestMetadata(ctx, store, n); err != nil {
			continue // not published (publishing off), or unreadable: not listed
		}
		ids = append(ids, map[string]any{"namespace": []string{icebergNamespace}, "name": n})
	}
	restJSON(w, map[string]any{"identifiers": ids})
}

// loadTable answers the table's newest metadata file (LoadTableResult).
func (c *restCatalog) loadTable(w http.ResponseWriter, r *http.Request) {
	if !tableNamespace(w, r) {
		return
	}
	name := r.PathValue("table")
	if err := engine.ValidateTableName(name); err != nil {
		tableNotFound(w, r, "not a table name: 1-128 characters of letters, digits, '_', '.', '-', starting with a letter or digit")
		return
	}
	loc, meta, err := LatestMetadata(r.Context(), c.store, name)
	switch {
	case errors.Is(err, ErrNoMetadata):
		tableNotFound(w, r, "no such table, or it has no Iceberg metadata: publishing off")
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
	// The metadata location names one metadata file, written once: its tag changes with every
	// publish and only then.
	etag := metadataETag(loc)
	w.Header().Set("ETag", etag)
	if matchesETag(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	res := map[string]any{"metadata-location": loc, "metadata": json.RawMessage(meta), "config": c.tableConfig(r, name)}
	if creds := c.storageCredentials(name); creds != nil && delegates(r, "vended-credentials") {
		res["storage-credentials"] = creds
	}
	restJSON(w, res)
}

// metadataETag is the ETag of a load-table response answering metadata file loc.
func metadataETag(loc string) string {
	sum := sha256.Sum256([]byte(loc))
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// matchesETag reports whether an If-None-Match header names etag (or is "*"); weak tags match
// their strong form.
func matchesETag(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// delegates reports whether the request's X-Iceberg-Access-Delegation lists mechanism.
func delegates(r *http.Request, mechanism string) bool {
	for _, v := range r.Header.Values("X-Iceberg-Access-Delegation") {
		for _, m := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(m), mechanism) {
				return true
			}
		}
	}
	return false
}

// tableConfig is a loaded table's config: for an S3 root, how to reach the bucket
// (s3.endpoint, s3.path-style-access, client.region) and, when the client delegates access to
// vended credentials and the server has some, the credentials; nothing for a local root.
func (c *restCatalog) tableConfig(r *http.Request, name string) map[string]string {
	st, ok := c.store.(*objstore.S3)
	if !ok {
		return map[string]string{}
	}
	a := st.Access()
	cfg := map[string]string{"s3.path-style-access": strconv.FormatBool(a.PathStyle), "client.region": a.Region}
	if a.Endpoint != "" {
		cfg["s3.endpoint"] = a.Endpoint
	}
	if c.vending() && delegates(r, "vended-credentials") {
		maps.Copy(cfg, c.credentialConfig())
	}
	return cfg
}

// credentialConfig is the vended credentials as FileIO properties.
func (c *restCatalog) credentialConfig() map[string]string {
	cfg := map[string]string{"s3.access-key-id": c.opts.Vend.AccessKeyID, "s3.secret-access-key": c.opts.Vend.SecretAccessKey}
	if c.opts.Vend.SessionToken != "" {
		cfg["s3.session-token"] = c.opts.Vend.SessionToken
	}
	return cfg
}

// storageCredentials are the spec's StorageCredentials of table name: the vended credentials
// for the table's location; nil when the catalog vends none.
func (c *restCatalog) storageCredentials(name string) []map[string]any {
	if !c.vending() {
		return nil
	}
	return []map[string]any{{"prefix": c.store.String() + "/" + name, "config": c.credentialConfig()}}
}

// credentials answers a table's vended credentials (the spec's loadCredentials).
func (c *restCatalog) credentials(w http.ResponseWriter, r *http.Request) {
	if !tableNamespace(w, r) {
		return
	}
	name := r.PathValue("table")
	if err := engine.ValidateTableName(name); err != nil {
		tableNotFound(w, r, "not a table name")
		return
	}
	if _, _, err := LatestMetadata(r.Context(), c.store, name); err != nil {
		tableNotFound(w, r, "no such table, or it has no Iceberg metadata: publishing off")
		return
	}
	restJSON(w, map[string]any{"storage-credentials": c.storageCredentials(name)})
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
