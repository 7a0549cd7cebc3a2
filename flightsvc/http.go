package flightsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"sort"
	"strings"
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
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
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
	mux.Handle(icebergRESTPrefix+"/", newIcebergREST(svc, auth, svc.icebergVend))
	mux.HandleFunc("/status.json", h.status)
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
	QueryID string `json:"query_id"`
	Epoch   int64  `json:"epoch"`
	Version uint64 `json:"version"`
	When    string `json:"committed"`
}

// statusTable is one table of the status page and of /status.json.
type statusTable struct {
	Name string `json:"table"`
	// Health is ok, lagging, stalled or failing (statusHealth); Why says what made it so.
	Health string `json:"health"`
	Why    string `json:"why"`
	// LaggingAfter and StalledAfter are the table's health thresholds (its configuration's, else
	// the server's); zero: the defaults.
	LaggingAfter time.Duration `json:"-"`
	StalledAfter time.Duration `json:"-"`
	// LaggingAfterSec and StalledAfterSec are the same in seconds.
	LaggingAfterSec float64 `json:"health_lagging_after_seconds,omitempty"`
	StalledAfterSec float64 `json:"health_stalled_after_seconds,omitempty"`
	// LastData is when a streaming query last committed to the table (zero: none has); Age
	// renders how long ago.
	LastData time.Time `json:"last_data_commit,omitzero"`
	// LastDataAge is how long ago that was, in seconds (absent: no streaming query writes it).
	LastDataAge float64 `json:"last_data_commit_age_seconds,omitempty"`
	Age         string  `json:"-"`
	Version     uint64  `json:"version"`
	// Rows are the rows a read of the table returns now: BaseRows (the latest version's live
	// rows, less those MemWAL rows supersede) plus MemWALRows (on a keyed table, one per key).
	Rows       int64  `json:"rows"`
	BaseRows   int64  `json:"base_rows"`
	MemWALRows int64  `json:"memwal_rows"`
	Fragments  int    `json:"fragments"`
	Bytes      int64  `json:"data_bytes"`
	Committed  string `json:"last_commit"`
	// PartitionBy is the table's partition spec, as table_stats has it (absent: unpartitioned).
	PartitionBy []PartitionField `json:"partition_by,omitempty"`
	// Queries are the page's rows of Streams, by query id.
	Queries []statusQuery `json:"-"`
	// Streams are each streaming query's last epoch, as table_stats has them.
	Streams Streams       `json:"streams"`
	Shards  []statusShard `json:"memwal_shards"`
	Runs    []statusRun   `json:"maintenance"`
	Iceberg *IcebergStats `json:"iceberg,omitempty"`
	// Rates are the rows and epochs this server acknowledged lately (tableRates).
	Rates statusRates `json:"rates"`
	Err   string      `json:"error,omitempty"`

	// What the page renders of the figures above.
	RowsRate, EpochsRate, Trend, Freshness string `json:"-"`
}

// statusShard is one MemWAL shard's backlog on the status page.
type statusShard struct {
	Shard          string `json:"shard"`
	MemtableRows   int64  `json:"memtable_rows"`
	UnflushedBytes int64  `json:"unflushed_bytes"`
	Generations    int    `json:"generations"`
	GenerationRows int64  `json:"generation_rows"`
}

// statusRun is one recent maintenance commit (compaction, index optimize, a MemWAL fold).
type statusRun struct {
	Version   uint64 `json:"version"`
	Operation string `json:"operation"`
	Step      string `json:"step"`
	When      string `json:"committed"`
}

// Health states of a table, worst first, and how long the Iceberg metadata may lag. The ages
// of lagging and stalled are each table's (statusTable.LaggingAfter, StalledAfter: its
// configuration's, else the server's), which the server exports for the alert rules
// (deploy/prometheus/alerts.yml).
const (
	healthFailing = "failing"
	healthStalled = "stalled"
	healthLagging = "lagging"
	healthOK      = "ok"

	icebergLagAfter = 5 * time.Minute
)

// healthRank orders health states worst first.
var healthRank = map[string]int{healthFailing: 0, healthStalled: 1, healthLagging: 2, healthOK: 3}

// statusHealth sets st's health, why and age from its figures at now: failing when its latest
// version cannot be read; for a table streaming queries write, stalled when none has committed
// for st.StalledAfter, lagging after st.LaggingAfter (zero: the server defaults); lagging too
// when its Iceberg metadata is more than icebergLagAfter behind; ok otherwise.
func statusHealth(st *statusTable, now time.Time) {
	lagAfter, stallAfter := st.LaggingAfter, st.StalledAfter
	if lagAfter <= 0 {
		lagAfter = streaming.DefaultHealthLaggingAfter
	}
	if stallAfter <= 0 {
		stallAfter = streaming.DefaultHealthStalledAfter
	}
	switch {
	case st.Err != "":
		st.Health, st.Why = healthFailing, "cannot read the table: "+st.Err
		return
	case !st.LastData.IsZero():
		age := now.Sub(st.LastData)
		st.Age = "last epoch " + agoText(age)
		switch {
		case age > stallAfter:
			st.Health, st.Why = healthStalled, fmt.Sprintf("no epoch committed for %s (stalled after %s)", agoDuration(age), agoDuration(stallAfter))
			return
		case age > lagAfter:
			st.Health, st.Why = healthLagging, fmt.Sprintf("no epoch committed for %s (lagging after %s)", agoDuration(age), agoDuration(lagAfter))
			return
		}
	}
	if ib := st.Iceberg; ib != nil && ib.Enabled && ib.LagVersions > 0 && ib.LagSeconds > icebergLagAfter.Seconds() {
		st.Health, st.Why = healthLagging, fmt.Sprintf("Iceberg metadata %d versions and %s behind", ib.LagVersions, agoDuration(time.Duration(ib.LagSeconds*float64(time.Second))))
		return
	}
	st.Health, st.Why = healthOK, "epochs committing"
	if st.LastData.IsZero() {
		st.Why = "no streaming query writes it"
	}
}

// agoDuration renders d for people: "45 s", "3 min", "2 h 5 min", "3 d 4 h".
func agoDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}

// freshnessText says what engines reading the table's Iceberg metadata cannot see yet.
func freshnessText(ib *IcebergStats) string {
	switch {
	case ib == nil:
		return "-"
	case !ib.Enabled:
		return "Iceberg off"
	case ib.MissingRows == 0:
		return "none"
	}
	return fmt.Sprintf("%d rows, oldest %s", ib.MissingRows, agoText(time.Duration(ib.MissingSeconds*float64(time.Second))))
}

// agoText is agoDuration plus "ago".
func agoText(d time.Duration) string { return agoDuration(d) + " ago" }

// sortWorstFirst orders tables by health, worst first, then by name.
func sortWorstFirst(tables []statusTable) {
	sort.SliceStable(tables, func(i, j int) bool {
		if ri, rj := healthRank[tables[i].Health], healthRank[tables[j].Health]; ri != rj {
			return ri < rj
		}
		return tables[i].Name < tables[j].Name
	})
}

// statusSummary is the page's summary line: how many tables are in each state.
func statusSummary(tables []statusTable) string {
	counts := map[string]int{}
	for _, t := range tables {
		counts[t.Health]++
	}
	parts := []string{}
	for _, h := range []string{healthOK, healthLagging, healthStalled, healthFailing} {
		if counts[h] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[h], h))
		}
	}
	if len(parts) == 0 {
		return "no tables"
	}
	return fmt.Sprintf("%d table(s): %s", len(tables), strings.Join(parts, ", "))
}

// maintenanceScan is how many recent versions the status page searches for maintenance runs.
const maintenanceScan = 200

var statusTmpl = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10"><title>flight-sink status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:20px} h2{font-size:16px;margin:1.5em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 1em} td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}
th{background:#f3f3f3} .num{text-align:right} .err{color:#a00}
.health{display:inline-block;padding:1px 8px;border-radius:3px;color:#fff;font-weight:600}
.ok{background:#2e7d32} .lagging{background:#ef6c00} .stalled{background:#c62828} .failing{background:#6a1b9a}
</style></head><body>
<h1>flight-sink</h1>
<p id="summary"><strong>{{.Summary}}</strong> &middot; root <code>{{.Root}}</code> &middot; page generated {{.Now}}, refreshed every 10 s &middot; <a href="/status.json">JSON</a></p>
{{if .Tables}}<table id="health"><tr><th>table</th><th>health</th><th>why</th><th>last epoch</th><th>rows</th><th>rows/s</th><th>epochs/s</th><th>trend ({{.Window}})</th><th>unseen by engines</th></tr>
{{range .Tables}}<tr class="table-row" data-table="{{.Name}}" data-health="{{.Health}}"><td><a href="#table-{{.Name}}">{{.Name}}</a></td><td><span class="health {{.Health}}">{{.Health}}</span></td><td>{{.Why}}</td><td>{{if .Age}}{{.Age}}{{else}}-{{end}}</td><td class="num">{{.Rows}}</td><td class="num">{{.RowsRate}}</td><td class="num">{{.EpochsRate}}</td><td><svg class="trend" width="120" height="24" viewBox="0 0 120 24" role="img" aria-label="rows per 10 s over the last 5 min"><polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{{.Trend}}"/></svg></td><td>{{.Freshness}}</td></tr>
{{end}}</table>{{end}}
{{range .Tables}}
<h2 id="table-{{.Name}}">Table {{.Name}} <span class="health {{.Health}}">{{.Health}}</span></h2>
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
	now := h.svc.rates.now()
	names, err := engine.ListTables(ctx, h.svc.sink.Store())
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, objstore.ErrUnavailable) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
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
		st.LaggingAfter, st.StalledAfter = h.svc.sink.HealthThresholds(m)
		st.LaggingAfterSec, st.StalledAfterSec = st.LaggingAfter.Seconds(), st.StalledAfter.Seconds()
		st.Committed = m.Timestamp().UTC().Format(time.RFC3339)
		st.Bytes = m.DataBytes()
		st.PartitionBy = PartitionFields(m.PartitionSpec)
		streams := make(map[string]memwal.StreamState, len(m.Streams))
		for q, wm := range m.Streams {
			streams[q] = memwal.StreamState{Epoch: wm.Epoch, Version: wm.Version, TimestampNanos: wm.TimestampNanos}
		}
		var shards []memwal.ShardStats
		tbl, tblErr := h.svc.sink.Table(ctx, n)
		if tblErr == nil {
			// Unreadable shard state leaves the base table's figures, and no shards table.
			if state, err := h.svc.sink.TableState(ctx, tbl); err == nil {
				// One snapshot: the version, its rows, the MemWAL rows and the shards agree.
				m = state.Manifest
				st.Version, st.Fragments, st.Bytes = m.Version, len(m.Fragments), m.DataBytes()
				st.Committed = m.Timestamp().UTC().Format(time.RFC3339)
				st.Rows, st.BaseRows, st.MemWALRows, streams = state.Rows(), state.BaseRows, state.MemWALRows, state.Streams
				shards = state.Shards
			}
		}
		for q, wm := range streams {
			when := "in MemWAL (not flushed yet)"
			if wm.TimestampNanos != 0 {
				at := time.Unix(0, wm.TimestampNanos)
				when = at.UTC().Format(time.RFC3339)
				if at.After(st.LastData) {
					st.LastData = at
				}
			}
			st.Queries = append(st.Queries, statusQuery{QueryID: q, Epoch: wm.Epoch, Version: wm.Version, When: when})
		}
		sort.Slice(st.Queries, func(i, j int) bool { return st.Queries[i].QueryID < st.Queries[j].QueryID })
		st.Streams = StreamsOf(streams)
		for _, sh := range shards {
			st.Shards = append(st.Shards, statusShard{Shard: sh.Shard, MemtableRows: sh.MemtableRows,
				UnflushedBytes: sh.UnflushedBytes, Generations: sh.Generations, GenerationRows: sh.GenerationRows})
		}
		if tblErr == nil {
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
	h.svc.rates.retain(names)
	for i := range tables {
		st := &tables[i]
		statusHealth(st, now)
		if !st.LastData.IsZero() {
			st.LastDataAge = max(now.Sub(st.LastData).Seconds(), 0)
		}
		st.Rates = h.svc.rates.rates(st.Name)
		st.RowsRate, st.EpochsRate = rateText(st.Rates.RowsPerSec), rateText(st.Rates.EpochsPerSec)
		st.Trend = sparkline(st.Rates.RowsPerBucket)
		st.Freshness = freshnessText(st.Iceberg)
	}
	sortWorstFirst(tables)
	if r.URL.Path == "/status.json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"format_version": 1, "root": h.svc.sink.Store().String(), "summary": statusSummary(tables),
			"generated": now.UTC().Format(time.RFC3339), "tables": tables})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusTmpl.Execute(w, map[string]any{"Root": h.svc.sink.Store().String(), "Tables": tables, "Summary": statusSummary(tables),
		"Now": now.UTC().Format(time.RFC3339), "Window": agoDuration(rateWindow)})
}
