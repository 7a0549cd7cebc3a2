package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/color"
	_ "image/png" // image.Decode reads the screenshot
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// chromiumInstall is how CI (Debian, as root) installs the browser; .ci/run does it.
const chromiumInstall = "apt-get update && apt-get install -y chromium"

const (
	table = "browser_tbl"
	query = "q-" + table
	// memwalTable is a MemWAL table whose rows are only in a memtable, written by memwalQuery.
	memwalTable = "browser_memwal"
	memwalQuery = "q-memwal"
	// keyedTable is a keyed MemWAL table: keyedKeys keys, each written keyedWrites times.
	keyedTable             = "browser_keyed"
	keyedKeys, keyedWrites = 200, 10
	// laggingTable and stalledTable last committed an epoch lagAge and stallAge before the page's
	// clock: past the status page's lagging (2 min) and stalled (15 min) ages.
	laggingTable, stalledTable = "browser_lagging", "browser_stalled"
	lagAge, stallAge           = 5 * time.Minute, 20 * time.Minute
	// The window, and so the screenshot, is this size.
	width, height = 1200, 900
)

var schema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)

// findChromium returns the browser binary: $FLIGHT_SINK_CHROMIUM, else chromium on PATH. Without
// one the test skips, unless the browser is required (CI=true or FLIGHT_SINK_REQUIRE_BROWSER=1):
// CI must never pass by skipping.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLIGHT_SINK_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" || os.Getenv("FLIGHT_SINK_REQUIRE_BROWSER") == "1" {
		t.Fatalf("chromium not found but the browser test is required (CI=true or FLIGHT_SINK_REQUIRE_BROWSER=1); install it with:\n\t%s\n"+
			"or point FLIGHT_SINK_CHROMIUM at a Chromium or Chrome binary", chromiumInstall)
	}
	t.Skipf("chromium not found; skipping the status page browser test (install: %s)", chromiumInstall)
	return ""
}

// testClock is the server's clock: commits are stamped with, and the status page reads ages and
// rates against, whatever time the test sets.
type testClock struct{ at atomic.Pointer[time.Time] }

func (c *testClock) set(t time.Time)      { c.at.Store(&t) }
func (c *testClock) now() time.Time       { return *c.at.Load() }
func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }

// startServer starts a flight-sink server on loopback ports in this process, on clock, and
// returns its Flight and HTTP addresses. It stops when the test ends.
func startServer(t *testing.T, clock *testClock) (grpcAddr, httpAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir()}
	cfg.Sink.Engine.Now = clock.now
	// The MemWAL table's rows stay in its memtable for the page to show: no flush or fold by age
	// (the freshness bound), however slow the machine.
	cfg.Sink.MemWALFreshness = -1
	srv, err := flightsvc.NewServer(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv.Addr().String(), srv.HTTPAddr().String()
}

// putEpoch writes one epoch of rows ids to tbl through DoPut and requires the server to commit it.
func putEpoch(t *testing.T, c flight.Client, tbl string, epoch int64, ids ...int64) {
	t.Helper()
	putCmd(t, c, map[string]any{"table": tbl, "query_id": "q-" + tbl, "epoch_id": epoch, "create": true}, ids...)
}

// putCmd writes rows ids with DoPut command command and requires the server to commit them.
func putCmd(t *testing.T, c flight.Client, command map[string]any, ids ...int64) {
	t.Helper()
	epoch := command["epoch_id"]
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(ids, nil)
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(ids)))
	defer rec.Release()

	cmd, err := json.Marshal(command)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.DoPut(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	if err := w.Write(rec); err != nil {
		t.Fatalf("epoch %d: write: %v", epoch, err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("epoch %d: close: %v", epoch, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("epoch %d: close send: %v", epoch, err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatalf("epoch %d: ack: %v", epoch, err)
	}
	var ack struct{ Status string }
	if err := json.Unmarshal(res.AppMetadata, &ack); err != nil || ack.Status != "committed" {
		t.Fatalf("epoch %d: ack %s (%v), want committed", epoch, res.AppMetadata, err)
	}
}

// runChromium runs the headless browser with args and returns what it printed on stdout. Its
// stderr (noisy even on success: no D-Bus in a container) is shown only when it fails.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{
		"--headless", "--disable-gpu", "--no-sandbox",
		// A profile of its own: no state from, or lock held by, another browser run.
		"--user-data-dir=" + t.TempDir(),
		"--no-first-run", "--force-device-scale-factor=1", "--hide-scrollbars",
	}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		errText := stderr.String()
		if len(errText) > 4000 {
			errText = "..." + errText[len(errText)-4000:]
		}
		t.Fatalf("%s %s: %v\n--- stderr ---\n%s", bin, strings.Join(args, " "), err, errText)
	}
	return stdout.Bytes()
}

var (
	tableRE = regexp.MustCompile(`(?s)<table[^>]*>(.*?)</table>`)
	rowRE   = regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`)
	cellRE  = regexp.MustCompile(`(?s)<t[dh][^>]*>(.*?)</t[dh]>`)
	tagRE   = regexp.MustCompile(`<[^>]*>`)
)

// htmlTables returns the text of every cell of every table of a serialized DOM: tables, rows,
// cells. The status page's tables are flat, so no nesting needs handling.
func htmlTables(dom string) [][][]string {
	var tables [][][]string
	for _, tm := range tableRE.FindAllStringSubmatch(dom, -1) {
		var rows [][]string
		for _, rm := range rowRE.FindAllStringSubmatch(tm[1], -1) {
			var cells []string
			for _, cm := range cellRE.FindAllStringSubmatch(rm[1], -1) {
				cells = append(cells, strings.TrimSpace(html.UnescapeString(tagRE.ReplaceAllString(cm[1], ""))))
			}
			rows = append(rows, cells)
		}
		tables = append(tables, rows)
	}
	return tables
}

// cellOf finds the table whose header row has column col and returns that column of the row
// whose first cell is key.
func cellOf(tables [][][]string, col, key string) (string, bool) {
	for _, rows := range tables {
		if len(rows) == 0 {
			continue
		}
		i := -1
		for j, h := range rows[0] {
			if h == col {
				i = j
			}
		}
		if i < 0 {
			continue
		}
		for _, r := range rows[1:] {
			if len(r) > i && r[0] == key {
				return r[i], true
			}
		}
	}
	return "", false
}

// TestStatusPageInBrowser renders the status page in headless Chromium with a healthy, a lagging
// and a stalled table (their epochs committed on a clock the test sets), a MemWAL table whose rows
// are all in a memtable and a keyed MemWAL table whose keys were each written several times, and
// checks what it shows: health states worst first with their ages, rows a reader sees, the rates
// and their trend, the summary; /status.json carries the same; a screenshot of it is taken.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := findChromium(t)
	// The page's clock runs an hour ahead of the real one: the Iceberg publisher's lag, which
	// it reads on the real clock, then never marks a table lagging, however slow the machine.
	pageNow := time.Now().Add(time.Hour).Truncate(time.Second)
	clock := newTestClock(pageNow)
	grpcAddr, httpAddr := startServer(t, clock)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Each table's first epoch creates it a minute earlier, so that the last epoch's commit is
	// stamped exactly at its age (a commit is stamped after the version it follows).
	clock.set(pageNow.Add(-stallAge - time.Minute))
	putEpoch(t, c, stalledTable, 0, 1, 2)
	clock.set(pageNow.Add(-stallAge))
	putEpoch(t, c, stalledTable, 1, 3)
	clock.set(pageNow.Add(-lagAge - time.Minute))
	putEpoch(t, c, laggingTable, 0, 1, 2)
	clock.set(pageNow.Add(-lagAge))
	putEpoch(t, c, laggingTable, 1, 3)
	// The healthy table: two epochs 30 s apart, in two buckets of the trend.
	clock.set(pageNow.Add(-30 * time.Second))
	putEpoch(t, c, table, 0, 1, 2, 3)
	clock.set(pageNow)
	putEpoch(t, c, table, 1, 4, 5)
	// A MemWAL table whose 5,000 rows are all still in a memtable: its rows and its query's
	// last epoch come from shard state.
	mwIDs := make([]int64, 5000)
	for i := range mwIDs {
		mwIDs[i] = int64(i)
	}
	mwCreate := map[string]any{"memwal": map[string]any{"shards": 1}}
	putCmd(t, c, map[string]any{"table": memwalTable, "query_id": memwalQuery, "epoch_id": 6, "create": mwCreate}, mwIDs[:2500]...)
	putCmd(t, c, map[string]any{"table": memwalTable, "query_id": memwalQuery, "epoch_id": 7}, mwIDs[2500:]...)
	// A keyed MemWAL table: every key written keyedWrites times, all in a memtable.
	keyedCreate := map[string]any{"primary_key": []string{"id"}, "memwal": map[string]any{"shards": 1}}
	for e := range keyedWrites {
		cmd := map[string]any{"table": keyedTable, "query_id": "q-keyed", "epoch_id": e}
		if e == 0 {
			cmd["create"] = keyedCreate
		}
		putCmd(t, c, cmd, mwIDs[:keyedKeys]...)
	}
	url := "http://" + httpAddr + "/status"

	t.Run("health", func(t *testing.T) {
		dom := string(runChromium(t, chromium, "--dump-dom", url))
		rows := healthRows(dom)
		var order []string
		for _, r := range rows {
			order = append(order, r["table"])
		}
		want := []string{stalledTable, laggingTable, keyedTable, memwalTable, table}
		if strings.Join(order, " ") != strings.Join(want, " ") {
			t.Fatalf("health rows in order %q, want worst first then by name %q", order, want)
		}
		byName := map[string]map[string]string{}
		for _, r := range rows {
			byName[r["table"]] = r
		}
		for name, w := range map[string]struct{ health, age string }{
			stalledTable: {"stalled", "last epoch 20 min ago"},
			laggingTable: {"lagging", "last epoch 5 min ago"},
			table:        {"ok", "last epoch 0 s ago"},
		} {
			if r := byName[name]; r["health"] != w.health || r["last epoch"] != w.age {
				t.Errorf("table %s: health %q, last epoch %q; want %q, %q (row %q)", name, r["health"], r["last epoch"], w.health, w.age, r)
			}
		}
		if why := byName[stalledTable]["why"]; !strings.Contains(why, "no epoch committed for 20 min") {
			t.Errorf("stalled table's why: %q", why)
		}
		// 5 rows in the last 5 minutes; the stalled table's epoch is older than the window.
		if r := byName[table]; r["rows/s"] == "0" || r["epochs/s"] == "0" {
			t.Errorf("healthy table shows rates %q rows/s, %q epochs/s; want more than 0", r["rows/s"], r["epochs/s"])
		}
		if r := byName[stalledTable]; r["rows/s"] != "0" {
			t.Errorf("stalled table shows %q rows/s, want 0", r["rows/s"])
		}
		if got := byName[keyedTable]["rows"]; got != fmt.Sprint(keyedKeys) {
			t.Errorf("keyed MemWAL table with %d keys each written %d times shows %s rows, want %d", keyedKeys, keyedWrites, got, keyedKeys)
		}
		if n := strings.Count(dom, `<svg class="trend"`); n != len(want) {
			t.Errorf("%d trend elements, want one per table (%d)", n, len(want))
		}
		if m := trendRE.FindStringSubmatch(rowHTML(dom, table)); m == nil || strings.Count(m[1], ",") != 30 {
			t.Errorf("healthy table's trend has no 30-point polyline: %q", m)
		}
		if !strings.Contains(dom, "5 table(s): 3 ok, 1 lagging, 1 stalled") {
			t.Errorf("summary line missing:\n%s", dom)
		}
	})

	t.Run("json", func(t *testing.T) {
		resp, err := http.Get("http://" + httpAddr + "/status.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			FormatVersion int    `json:"format_version"`
			Summary       string `json:"summary"`
			Tables        []struct {
				Table  string  `json:"table"`
				Health string  `json:"health"`
				Rows   int64   `json:"rows"`
				Age    float64 `json:"last_data_commit_age_seconds"`
				Rates  struct {
					RowsPerSec    float64 `json:"rows_per_second"`
					RowsPerBucket []int64 `json:"rows_per_bucket"`
				} `json:"rates"`
			} `json:"tables"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if doc.FormatVersion != 1 || doc.Summary != "5 table(s): 3 ok, 1 lagging, 1 stalled" || len(doc.Tables) != 5 {
			t.Fatalf("/status.json: %+v", doc)
		}
		got := map[string]string{}
		for i, tb := range doc.Tables {
			got[tb.Table] = tb.Health
			if i == 0 && tb.Table != stalledTable {
				t.Errorf("/status.json lists %s first, want the stalled table", tb.Table)
			}
			switch tb.Table {
			case stalledTable:
				if tb.Age != stallAge.Seconds() {
					t.Errorf("stalled table's age %v s, want %v", tb.Age, stallAge.Seconds())
				}
			case keyedTable:
				if tb.Rows != keyedKeys {
					t.Errorf("keyed table: %d rows, want %d", tb.Rows, keyedKeys)
				}
			case table:
				var sum int64
				for _, n := range tb.Rates.RowsPerBucket {
					sum += n
				}
				if sum != 5 || len(tb.Rates.RowsPerBucket) != 30 {
					t.Errorf("healthy table's buckets %v, want 30 holding 5 rows", tb.Rates.RowsPerBucket)
				}
			}
		}
		if got[stalledTable] != "stalled" || got[laggingTable] != "lagging" || got[table] != "ok" {
			t.Errorf("/status.json health %v", got)
		}
	})

	t.Run("dom", func(t *testing.T) {
		dom := string(runChromium(t, chromium, "--dump-dom", url))
		if !strings.Contains(dom, "Table "+table) {
			t.Fatalf("the page the browser rendered does not name table %s:\n%s", table, dom)
		}
		tables := htmlTables(sectionOf(dom, table))
		if epoch, ok := cellOf(tables, "last epoch", query); !ok || epoch != "1" {
			t.Errorf("query %s's row shows last epoch %q (found: %v), want 1; tables: %q", query, epoch, ok, tables)
		}
		// Create, then one Append per epoch.
		if v, ok := cellOf(tables, "at version", query); !ok || v != "3" {
			t.Errorf("query %s's row shows version %q (found: %v), want 3; tables: %q", query, v, ok, tables)
		}
		if rows, ok := cellOf(tables, "rows", "3"); !ok || rows != "5" {
			t.Errorf("table %s shows %q rows at version 3 (found: %v), want 5; tables: %q", table, rows, ok, tables)
		}

		// The MemWAL table (version 1: its create): 5,000 rows, all of them MemWAL rows, and
		// its query's last epoch from the shard.
		tables = htmlTables(sectionOf(dom, memwalTable))
		for col, want := range map[string]string{"rows": "5000", "base rows": "0", "MemWAL rows": "5000"} {
			if got, ok := cellOf(tables, col, "1"); !ok || got != want {
				t.Errorf("table %s shows %s %q (found: %v), want %s; tables: %q", memwalTable, col, got, ok, want, tables)
			}
		}
		if epoch, ok := cellOf(tables, "last epoch", memwalQuery); !ok || epoch != "7" {
			t.Errorf("query %s's row shows last epoch %q (found: %v), want 7; tables: %q", memwalQuery, epoch, ok, tables)
		}
		if v, _ := cellOf(tables, "at version", memwalQuery); v != "MemWAL" {
			t.Errorf("query %s's row shows version %q, want MemWAL", memwalQuery, v)
		}
		// The keyed MemWAL table: one row per key, all of them MemWAL rows.
		keyed := htmlTables(sectionOf(dom, keyedTable))
		for col, want := range map[string]string{"rows": fmt.Sprint(keyedKeys), "base rows": "0", "MemWAL rows": fmt.Sprint(keyedKeys)} {
			if got, ok := cellOf(keyed, col, "1"); !ok || got != want {
				t.Errorf("table %s shows %s %q (found: %v), want %s; tables: %q", keyedTable, col, got, ok, want, keyed)
			}
		}
		if strings.Contains(dom, "No streaming queries have written this table") {
			t.Errorf("the page says a table has no streaming queries; both have one:\n%s", dom)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		shot := filepath.Join(t.TempDir(), "status.png")
		t.Logf("screenshot: %s", shot)
		runChromium(t, chromium, "--screenshot="+shot, "--window-size=1200,900", url)
		f, err := os.Open(shot)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		defer f.Close()
		img, format, err := image.Decode(f)
		if err != nil || format != "png" {
			t.Fatalf("screenshot does not decode as PNG: format %q, %v", format, err)
		}
		if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
			t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
		}
		colours, ink := inkOf(img)
		// Text and table rules on a plain background: a blank or failed render is one colour.
		if colours < 2 || ink < 500 {
			t.Errorf("screenshot looks blank: %d colours, %d pixels differ from the background", colours, ink)
		}
		t.Logf("screenshot: %d colours, %d of %d pixels differ from the background", colours, ink, width*height)
	})
}

// inkOf returns how many distinct colours img has (counting stops at 256) and how many pixels
// differ from its top-left one, the page background.
func inkOf(img image.Image) (colours, ink int) {
	b := img.Bounds()
	bg := color.RGBAModel.Convert(img.At(b.Min.X, b.Min.Y))
	seen := map[color.Color]bool{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y))
			if c != bg {
				ink++
			}
			if len(seen) < 256 {
				seen[c] = true
			}
		}
	}
	return len(seen), ink
}

var (
	healthTableRE = regexp.MustCompile(`(?s)<table id="health">(.*?)</table>`)
	trendRE       = regexp.MustCompile(`<polyline[^>]*points="([^"]*)"`)
)

// healthRows returns the rows of the page's health table, in page order, each as its cells' text
// by column header.
func healthRows(dom string) []map[string]string {
	m := healthTableRE.FindStringSubmatch(dom)
	if m == nil {
		return nil
	}
	tables := htmlTables("<table>" + m[1] + "</table>")
	if len(tables) != 1 || len(tables[0]) == 0 {
		return nil
	}
	header := tables[0][0]
	var out []map[string]string
	for _, cells := range tables[0][1:] {
		row := map[string]string{}
		for i, c := range cells {
			if i < len(header) {
				row[header[i]] = c
			}
		}
		out = append(out, row)
	}
	return out
}

// sectionOf returns the part of the page about table name: from its heading to the next one.
func sectionOf(dom, name string) string {
	i := strings.Index(dom, `<h2 id="table-`+name+`"`)
	if i < 0 {
		return ""
	}
	if j := strings.Index(dom[i+1:], "<h2 "); j >= 0 {
		return dom[i : i+1+j]
	}
	return dom[i:]
}

// rowHTML returns the markup of table name's row in the health table.
func rowHTML(dom, name string) string {
	i := strings.Index(dom, `data-table="`+name+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(dom[i:], "</tr>")
	if j < 0 {
		return dom[i:]
	}
	return dom[i : i+j]
}
