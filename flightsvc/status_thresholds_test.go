package flightsvc_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestHealthFollowsTableThresholds: a table's health on /status.json follows its own
// health.lagging_after and health.stalled_after (set_table_config), another table's the
// server's; the server exports each table's thresholds on /metrics for the alert rules.
func TestHealthFollowsTableThresholds(t *testing.T) {
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0"})
	httpAddr := s.Srv.HTTPAddr().String()
	s.putEpoch(t, "strict", "q", 1, idRange(0, 3))
	s.putEpoch(t, "relaxed", "q", 1, idRange(0, 3))
	s.mustAction(t, "set_table_config", cmd{"table": "strict", "set": map[string]string{
		"health.lagging_after": "1ms", "health.stalled_after": "24h"}}, nil)
	if _, err := s.action(testCtx(t), "set_table_config", cmd{"table": "relaxed", "set": map[string]string{
		"health.lagging_after": "10m", "health.stalled_after": "5m"}}); err == nil {
		t.Fatal("stalled_after shorter than lagging_after was accepted")
	}
	time.Sleep(5 * time.Millisecond) // the epoch is now older than strict's 1ms for certain

	var got struct {
		Tables []struct {
			Table        string  `json:"table"`
			Health       string  `json:"health"`
			Why          string  `json:"why"`
			LaggingAfter float64 `json:"health_lagging_after_seconds"`
			StalledAfter float64 `json:"health_stalled_after_seconds"`
		} `json:"tables"`
	}
	body := s.statusJSON(t, &got)
	want := map[string]struct {
		health           string
		lagging, stalled float64
	}{
		"strict":  {"lagging", 0.001, 86400},
		"relaxed": {"ok", 120, 900},
	}
	for _, tb := range got.Tables {
		w, ok := want[tb.Table]
		if !ok {
			continue
		}
		delete(want, tb.Table)
		if tb.Health != w.health || tb.LaggingAfter != w.lagging || tb.StalledAfter != w.stalled {
			t.Errorf("%s: %s (%s), thresholds %v/%v s; want %s, %v/%v s", tb.Table, tb.Health, tb.Why, tb.LaggingAfter, tb.StalledAfter, w.health, w.lagging, w.stalled)
		}
	}
	if len(want) > 0 {
		t.Fatalf("/status.json lacks %v: %s", want, body)
	}

	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`flight_sink_table_health_stalled_after_seconds{table="strict"} 86400`,
		`flight_sink_table_health_lagging_after_seconds{table="strict"} 0.001`,
		`flight_sink_table_health_stalled_after_seconds{table="relaxed"} 900`,
	} {
		if !strings.Contains(string(metrics), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
