package httpcheck

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/flightsvc"
)

var schema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)

func start(t *testing.T) (grpcAddr, httpAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.Addr().String(), srv.HTTPAddr().String()
}

// putEpoch sends epoch epoch of query (rows ids from epoch*1000) and returns the ack status.
func putEpoch(t *testing.T, c flight.Client, table, query string, epoch int64, rows int) string {
	t.Helper()
	ids := make([]int64, rows)
	for i := range ids {
		ids[i] = epoch*1000 + int64(i)
	}
	return putWith(t, c, map[string]any{"table": table, "query_id": query, "epoch_id": epoch, "create": true}, ids...)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// metricValue returns the value of the sample whose line starts with prefix (name plus labels).
func metricValue(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		return v
	}
	return 0
}

func TestMetricsCountEpochsAndCommitLatency(t *testing.T) {
	grpcAddr, httpAddr := start(t)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The meter provider is the process's: earlier servers of this process (go test -count=N)
	// counted into it too, so the test checks what its own epochs added.
	before := get(t, "http://"+httpAddr+"/metrics")
	for e := int64(0); e < 4; e++ {
		if s := putEpoch(t, c, "metrics", "q", e, 10); s != "committed" {
			t.Fatalf("epoch %d: %s", e, s)
		}
	}
	if s := putEpoch(t, c, "metrics", "q", 3, 10); s != "duplicate" {
		t.Fatalf("replay: %s", s)
	}
	body := get(t, "http://"+httpAddr+"/metrics")
	added := func(name string, labels ...string) float64 {
		return metricValue(t, body, name, labels...) - metricValue(t, before, name, labels...)
	}
	if v := added("flight_sink_epochs_total", `status="committed"`, `table="metrics"`); v != 4 {
		t.Errorf("committed epochs = %v, want 4\n%s", v, body)
	}
	if v := added("flight_sink_epochs_total", `status="duplicate"`, `table="metrics"`); v != 1 {
		t.Errorf("duplicate epochs = %v, want 1", v)
	}
	if v := added("flight_sink_rows_total", `table="metrics"`); v != 40 {
		t.Errorf("rows = %v, want 40", v)
	}
	// Four Append commits (Create does not go through the commit loop): four observations.
	if v := added("flight_sink_commit_duration_seconds_count", `operation="Append"`); v != 4 {
		t.Errorf("commit latency observations (Append) = %v, want 4", v)
	}
	if v := added("flight_sink_commit_duration_seconds_bucket", `operation="Append"`, `le="+Inf"`); v != 4 {
		t.Errorf("commit latency +Inf bucket = %v, want 4", v)
	}
	if got := get(t, "http://"+httpAddr+"/healthz"); strings.TrimSpace(got) != "ok" {
		t.Errorf("/healthz = %q", got)
	}
	page := get(t, "http://"+httpAddr+"/status")
	for _, want := range []string{"Table metrics", "<td>q</td>", ">3<"} {
		if !strings.Contains(page, want) {
			t.Errorf("/status lacks %q:\n%s", want, page)
		}
	}
}
