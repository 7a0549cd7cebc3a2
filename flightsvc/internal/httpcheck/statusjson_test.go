package httpcheck

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStatusJSON: /status.json carries what the page shows: a summary, and per table its health
// (a table written a moment ago is ok), why, its last streaming commit, rows and streams (as table_stats has them); the
// HTML page shows the same summary and a health table, and refreshes itself.
func TestStatusJSON(t *testing.T) {
	grpcAddr, httpAddr := start(t)
	c, err := flight.NewClientWithMiddleware(grpcAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := time.Now().Add(-time.Second)
	for e := int64(0); e < 2; e++ {
		if s := putEpoch(t, c, "json_tbl", "q-json", e, 10); s != "committed" {
			t.Fatalf("epoch %d: %s", e, s)
		}
	}
	var got struct {
		FormatVersion int    `json:"format_version"`
		Summary       string `json:"summary"`
		Tables        []struct {
			Table, Health, Why string
			LastDataCommit     time.Time `json:"last_data_commit"`
			Rows               int64
			Streams            map[string]struct {
				Epoch     int64
				Timestamp time.Time
			}
		}
	}
	body := get(t, "http://"+httpAddr+"/status.json")
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	if got.FormatVersion != 1 || got.Summary != "1 table(s): 1 ok" || len(got.Tables) != 1 {
		t.Fatalf("/status.json: %+v", got)
	}
	tb := got.Tables[0]
	if tb.Table != "json_tbl" || tb.Health != "ok" || tb.Why != "epochs committing" || tb.Rows != 20 ||
		tb.LastDataCommit.Before(before) || len(tb.Streams) != 1 || tb.Streams["q-json"].Epoch != 1 || tb.Streams["q-json"].Timestamp.Before(before) {
		t.Errorf("json_tbl: %+v", tb)
	}
	page := get(t, "http://"+httpAddr+"/status")
	for _, want := range []string{`<meta http-equiv="refresh"`, "1 table(s): 1 ok", `<span class="health ok">ok</span>`, "last epoch "} {
		if !strings.Contains(page, want) {
			t.Errorf("/status lacks %q", want)
		}
	}
}
