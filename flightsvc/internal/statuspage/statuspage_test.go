package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"image"
	"image/color"
	_ "image/png" // image.Decode reads the screenshot
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
	query = "q-browser"
	// memwalTable is a MemWAL table whose rows are only in a memtable, written by memwalQuery.
	memwalTable = "browser_memwal"
	memwalQuery = "q-memwal"
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

// startServer starts a flight-sink server on loopback ports in this process and returns its
// Flight and HTTP addresses. It stops when the test ends.
func startServer(t *testing.T) (grpcAddr, httpAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir()}
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

// putEpoch writes one epoch of rows ids through DoPut and requires the server to commit it.
func putEpoch(t *testing.T, c flight.Client, epoch int64, ids ...int64) {
	t.Helper()
	putCmd(t, c, map[string]any{"table": table, "query_id": query, "epoch_id": epoch, "create": true}, ids...)
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

func TestStatusPageInBrowser(t *testing.T) {
	chromium := findChromium(t)
	grpcAddr, httpAddr := startServer(t)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putEpoch(t, c, 0, 1, 2, 3)
	putEpoch(t, c, 1, 4, 5)
	// A MemWAL table whose 5,000 rows are all still in a memtable: its rows and its query's
	// last epoch come from shard state.
	mwIDs := make([]int64, 5000)
	for i := range mwIDs {
		mwIDs[i] = int64(i)
	}
	mwCreate := map[string]any{"memwal": map[string]any{"shards": 1}}
	putCmd(t, c, map[string]any{"table": memwalTable, "query_id": memwalQuery, "epoch_id": 6, "create": mwCreate}, mwIDs[:2500]...)
	putCmd(t, c, map[string]any{"table": memwalTable, "query_id": memwalQuery, "epoch_id": 7}, mwIDs[2500:]...)
	url := "http://" + httpAddr + "/status"

	t.Run("dom", func(t *testing.T) {
		dom := string(runChromium(t, chromium, "--dump-dom", url))
		if !strings.Contains(dom, "Table "+table) {
			t.Fatalf("the page the browser rendered does not name table %s:\n%s", table, dom)
		}
		tables := htmlTables(dom)
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
		if strings.Contains(dom, "No streaming queries have written this table") {
			t.Errorf("the page says a table has no streaming queries; both have one:\n%s", dom)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		shot := filepath.Join(t.TempDir(), "status.png")
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
