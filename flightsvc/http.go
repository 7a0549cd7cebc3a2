package flightsvc

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
)

// Metrics are process-wide: the OpenTelemetry meter provider is global, so it is installed once
// and every server in the process serves the same registry.
var (
	metricsOnce     sync.Once
	metricsRegistry *prometheus.Registry
	metricsErr      error
)

func installMetrics() (*prometheus.Registry, error) {
	metricsOnce.Do(func() {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			metricsErr = fmt.Errorf("prometheus exporter: %w", err)
			return
		}
		res, _ := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("flight-sink")))
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)))
		metricsRegistry = reg
	})
	return metricsRegistry, metricsErr
}

// httpServer serves /metrics, /healthz, /readyz and /status.
type httpServer struct {
	srv   *http.Server
	lis   net.Listener
	svc   *Service
	ready *readiness
}

func newHTTPServer(addr string, svc *Service, auth *tokenAuth, ready *readiness) (*httpServer, error) {
	reg, err := installMetrics()
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen on %s: %w", addr, err)
	}
	h := &httpServer{lis: lis, svc: svc, ready: ready}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	// /readyz: 200 "ready" while the store answers and the server is not shutting down; 503
	// with the reason otherwise. /healthz stays 200 while the process serves HTTP at all.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if why := h.ready.notReady(); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/status", h.status)
	mux.Handle(icebergRESTPrefix+"/", newIcebergREST(svc, auth.tokens))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/status", http.StatusFound) })
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return h, nil
}

func (h *httpServer) serve() error {
	if err := h.srv.Serve(h.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (h *httpServer) shutdown(ctx context.Context) { _ = h.srv.Shutdown(ctx) }

// statusQuery is one streaming query's row on the status page.
type statusQuery struct {
	QueryID string
	Epoch   int64
	Version uint64
	When    string
}

type statusTable struct {
	Name    string
	Version uint64
	// Rows is BaseRows + MemWALRows (memwal.TableState).
	Rows, BaseRows, MemWALRows int64
	Fragments                  int
	Bytes                      int64
	Committed                  string
	Queries                    []statusQuery
	Shards                     []statusShard
	Runs                       []statusRun
	Iceberg                    *IcebergStats
	Err                        string
}

// statusShard is one MemWAL shard's backlog on the status page.
type statusShard struct {
	Shard          string
	MemtableRows   int64
	UnflushedBytes int64
	Generations    int
	GenerationRows int64
}

// statusRun is one recent maintenance commit (compaction, index optimize, a MemWAL fold).
type statusRun struct {
	Version   uint64
	Operation string
	Step      string
	When      string
}

// maintenanceScan is how many recent versions the status page searches for maintenance runs.
const maintenanceScan = 200

var statusTmpl = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flight-sink status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:20px} h2{font-size:16px;margin:1.5em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 1em} td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}
th{background:#f3f3f3} .num{text-align:right} .err{color:#a00}
</style></head><body>
<h1>flight-sink</h1>
<p>Root <code>{{.Root}}</code> &middot; {{len .Tables}} table(s) &middot; page generated {{.Now}}</p>
{{range .Tables}}
<h2 id="table-{{.Name}}">Table {{.Name}}</h2>
{{if .Err}}<p class="err">{{.Err}}</p>{{else}}
<table><tr><th>version</th><th>rows</th><th>base rows</th><th>MemWAL rows</th><th>fragments</th><th>data bytes</th><th>last commit</th></tr>
<tr><td class="num">{{.Version}}</td><td class="num">{{.Rows}}</td><td class="num">{{.BaseRows}}</td><td class="num">{{.MemWALRows}}</td><td class="num">{{.Fragments}}</td><td class="num">{{.Bytes}}</td><td>{{.Committed}}</td></tr></table>
{{if .Queries}}<table><tr><th>streaming query</th><th>last epoch</th><th>at version</th><th>committed</th></tr>
{{range .Queries}}<tr><td>{{.QueryID}}</td><td class="num">{{.Epoch}}</td><td class="num">{{if .Version}}{{.Version}}{{else}}MemWAL{{end}}</td><td>{{.When}}</td></tr>
{{end}}</table>{{else}}<p>No streaming queries have written this table.</p>{{end}}
{{if .Shards}}<table><tr><th>MemWAL shard</th><th>memtable rows</th><th>unflushed bytes</th><th>generations</th><th>generation rows</th></tr>
{{range .Shards}}<tr><td>{{.Shard}}</td><td class="num">{{.MemtableRows}}</td><td class="num">{{.UnflushedBytes}}</td><td class="num">{{.Generations}}</td><td class="num">{{.GenerationRows}}</td></tr>
{{end}}</table>{{end}}
{{with .Iceberg}}<table><tr><th>iceberg</th><th>iceberg version</th><th>versions behind</th><th>rows readers miss</th><th>oldest missed row</th><th>snapshots</th><th>metadata file</th></tr>
<tr><td>{{if not .Enabled}}off{{else if eq .IcebergVersion 0}}not published yet{{else if gt .MissingRows 0}}behind{{else}}up to date{{end}}</td><td class="num">{{.IcebergVersion}}</td><td class="num">{{.LagVersions}}</td><td class="num">{{.MissingRows}}</td><td class="num">{{printf "%.1f" .MissingSeconds}} s</td><td class="num">{{.Snapshots}}</td><td><code>{{.MetadataFile}}</code></td></tr></table>{{end}}
{{if .Runs}}<table><tr><th>recent maintenance</th><th>version</th><th>operation</th><th>committed</th></tr>
{{range .Runs}}<tr><td>{{.Step}}</td><td class="num">{{.Version}}</td><td>{{.Operation}}</td><td>{{.When}}</td></tr>
{{end}}</table>{{else}}<p>No maintenance in the last versions.</p>{{end}}
{{end}}{{else}}<p>No tables yet.</p>{{end}}
</body></html>
`))

// status renders a read-only HTML page of every table: version, rows, and each streaming query's
// last epoch and time. It uses no external assets.
func (h *httpServer) status(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	names, err := engine.ListTables(ctx, h.svc.sink.Store())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var tables []statusTable
	for _, n := range names {
		st := statusTable{Name: n}
		_, m, err := h.svc.manifestFor(ctx, tableVersion{table: n})
		if err != nil {
			st.Err = err.Error()
			tables = append(tables, st)
			continue
		}
		st.Version, st.Rows, st.BaseRows, st.Fragments = m.Version, m.Rows(), m.Rows(), len(m.Fragments)
		st.Committed = m.Timestamp().UTC().Format(time.RFC3339)
		st.Bytes = m.DataBytes()
		streams := make(map[string]memwal.StreamState, len(m.Streams))
		for q, wm := range m.Streams {
			streams[q] = memwal.StreamState{Epoch: wm.Epoch, Version: wm.Version, TimestampNanos: wm.TimestampNanos}
		}
		tbl, tblErr := h.svc.sink.Table(ctx, n)
		if tblErr == nil {
			// Unreadable shard state leaves the base table's figures, as the shards table below.
			if state, err := h.svc.sink.TableState(ctx, tbl, m); err == nil {
				st.Rows, st.BaseRows, st.MemWALRows, streams = state.Rows(), state.BaseRows, state.MemWALRows, state.Streams
			}
		}
		for q, wm := range streams {
			when := "in MemWAL (not flushed yet)"
			if wm.TimestampNanos != 0 {
				when = time.Unix(0, wm.TimestampNanos).UTC().Format(time.RFC3339)
			}
			st.Queries = append(st.Queries, statusQuery{QueryID: q, Epoch: wm.Epoch, Version: wm.Version, When: when})
		}
		sort.Slice(st.Queries, func(i, j int) bool { return st.Queries[i].QueryID < st.Queries[j].QueryID })
		if tblErr == nil {
			if shards, err := h.svc.sink.MemWALStats(ctx, tbl, m); err == nil {
				for _, sh := range shards {
					st.Shards = append(st.Shards, statusShard{Shard: sh.Shard, MemtableRows: sh.MemtableRows,
						UnflushedBytes: sh.UnflushedBytes, Generations: sh.Generations, GenerationRows: sh.GenerationRows})
				}
			}
			st.Iceberg = h.svc.icebergStats(ctx, tbl)
			if hist, err := tbl.HistoryFrom(ctx, m.Version, maintenanceScan); err == nil {
				for _, e := range hist {
					step := e.Properties[engine.PropMaintenance]
					if step == "" && e.Properties[memwal.PropFoldShard] != "" {
						step = "memwal fold"
					}
					if step == "" || len(st.Runs) == 5 {
						continue
					}
					st.Runs = append(st.Runs, statusRun{Version: e.Version, Operation: string(e.Operation), Step: step,
						When: e.Timestamp.UTC().Format(time.RFC3339)})
				}
			}
		}
		tables = append(tables, st)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusTmpl.Execute(w, map[string]any{"Root": h.svc.sink.Store().String(), "Tables": tables, "Now": time.Now().UTC().Format(time.RFC3339)})
}
