package flightsvc

import (
	"strings"
	"testing"
	"time"
)

// TestStatusHealth: a table's health follows the age of its last streaming commit at a given
// time, its readability and its Iceberg lag; the page lists tables worst first and sums them up.
func TestStatusHealth(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	tables := []statusTable{
		{Name: "a_healthy", LastData: now.Add(-30 * time.Second)},
		{Name: "b_idle"},
		{Name: "c_lagging", LastData: now.Add(-3 * time.Minute)},
		{Name: "d_stalled", LastData: now.Add(-20 * time.Minute)},
		{Name: "e_failing", Err: "read manifest: object store unavailable"},
		{Name: "f_iceberg_behind", LastData: now.Add(-time.Second), Iceberg: &IcebergStats{Enabled: true, LagVersions: 40, LagSeconds: 600}},
		{Name: "g_iceberg_off", LastData: now.Add(-time.Second), Iceberg: &IcebergStats{Enabled: false, LagVersions: 40, LagSeconds: 600}},
	}
	for i := range tables {
		statusHealth(&tables[i], now)
	}
	want := map[string]struct{ health, why, age string }{
		"a_healthy":        {healthOK, "epochs committing", "last epoch 30 s ago"},
		"b_idle":           {healthOK, "no streaming query writes it", ""},
		"c_lagging":        {healthLagging, "no epoch committed for 3 min (lagging after 2 min)", "last epoch 3 min ago"},
		"d_stalled":        {healthStalled, "no epoch committed for 20 min (stalled after 15 min)", "last epoch 20 min ago"},
		"e_failing":        {healthFailing, "cannot read the table: read manifest: object store unavailable", ""},
		"f_iceberg_behind": {healthLagging, "Iceberg metadata 40 versions and 10 min behind", "last epoch 1 s ago"},
		"g_iceberg_off":    {healthOK, "epochs committing", "last epoch 1 s ago"},
	}
	for _, st := range tables {
		w := want[st.Name]
		if st.Health != w.health || st.Why != w.why || st.Age != w.age {
			t.Errorf("%s: %q %q %q, want %q %q %q", st.Name, st.Health, st.Why, st.Age, w.health, w.why, w.age)
		}
	}
	sortWorstFirst(tables)
	var order []string
	for _, st := range tables {
		order = append(order, st.Name)
	}
	if got := strings.Join(order, " "); got != "e_failing d_stalled c_lagging f_iceberg_behind a_healthy b_idle g_iceberg_off" {
		t.Errorf("order %s, want worst first, then by name", got)
	}
	if got := statusSummary(tables); got != "7 table(s): 3 ok, 2 lagging, 1 stalled, 1 failing" {
		t.Errorf("summary %q", got)
	}
	if got := statusSummary(nil); got != "no tables" {
		t.Errorf("summary of none %q", got)
	}
}
