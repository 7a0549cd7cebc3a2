package flightsvc_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/streaming"
)

// TestArchivedWatermarksOverFlight: on a server whose manifests carry 2 watermarks, query q's
// watermark moves to the watermark archive once other queries commit; over the wire every answer
// stays what the watermark gives: a replay of q's last epoch is a duplicate, an older epoch
// outside the look-back window is QUERY_REUSED, epoch_status finds the last epoch, and q's next
// epoch lands. The table holds each row once.
func TestArchivedWatermarksOverFlight(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{Sink: streaming.Options{Engine: engine.Options{StreamWatermarksInManifest: 2}}})
	want := []int64{}
	for e := int64(0); e < 3; e++ {
		s.putEpoch(t, "w", "q", e, []int64{e})
		want = append(want, e)
	}
	for i := int64(0); i < 6; i++ {
		s.putEpoch(t, "w", fmt.Sprintf("other-%d", i), 0, []int64{100 + i})
		want = append(want, 100+i)
	}
	if _, hot := s.stats(t, "w").Streams["q"]; hot {
		t.Fatal("q's watermark is still in the manifest; the test needs it archived")
	}
	for _, tc := range []struct {
		name     string
		command  cmd
		code     codes.Code
		reason   string
		wantSeen string
	}{
		{"replay of the archived last epoch", cmd{"table": "w", "query_id": "q", "epoch_id": 2}, codes.OK, "", "duplicate"},
		{"older epoch outside the look-back", cmd{"table": "w", "query_id": "q", "epoch_id": 0, "dedupe_lookback_versions": 1}, codes.FailedPrecondition, "QUERY_REUSED", ""},
		{"next epoch", cmd{"table": "w", "query_id": "q", "epoch_id": 3}, codes.OK, "", "committed"},
	} {
		a, err := s.putCmd(testCtx(t), t, tc.command, []int64{50})
		t.Logf("| %s | %v | %s |", tc.name, codeOf(err), reasonOf(err))
		if codeOf(err) != tc.code || reasonOf(err) != tc.reason || (err == nil && a.Status != tc.wantSeen) {
			t.Fatalf("%s: %v %s (%v), ack %+v; want %v %s %s", tc.name, codeOf(err), reasonOf(err), err, a, tc.code, tc.reason, tc.wantSeen)
		}
	}
	want = append(want, 50)
	var st struct {
		Committed bool   `json:"committed"`
		Version   uint64 `json:"version"`
	}
	s.mustAction(t, "epoch_status", cmd{"table": "w", "query_id": "q", "epoch_id": 2}, &st)
	if !st.Committed || st.Version != 4 {
		t.Fatalf("epoch_status of q's epoch 2: %+v, want committed at version 4", st)
	}
	s.wantIDs(t, "w", want)
}
