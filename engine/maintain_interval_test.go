package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestMaintainerStepMinInterval: a contributed step with a MinInterval runs fewer times than a
// burst of commits triggers it, and the trailing run serves the burst's last commit: once the
// table's background maintenance is idle (Wait includes the trailing run), the step's last run
// saw the newest version. In background and inline mode.
func TestMaintainerStepMinInterval(t *testing.T) {
	for _, mode := range []MaintenanceMode{MaintenanceBackground, MaintenanceInline} {
		t.Run(string(mode), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, store objstore.Store) {
				tbl, err := Create(t.Context(), store, "interval", hSchema, CreateOptions{
					Config: map[string]string{ConfigMaintenance: encodeConfig(t, MaintenanceConfig{Mode: mode})}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				var (
					mu   sync.Mutex
					seen []uint64
				)
				mt := NewTableMaintainer(tbl, &MaintainerOptions{Steps: []MaintenanceStep{{
					Operation:   "interval_step",
					MinInterval: func(*Manifest) time.Duration { return 300 * time.Millisecond },
					Due:         func(context.Context, *Manifest) (bool, error) { return true, nil },
					Run: func(ctx context.Context, _ map[string]string) error {
						m, err := tbl.Latest(ctx)
						if err != nil {
							return err
						}
						mu.Lock()
						seen = append(seen, m.Version)
						mu.Unlock()
						return nil
					},
				}}})
				const n = 10
				var last *Manifest
				for i := range n {
					last = hAppend(t, tbl, hRange(int64(i)*10, 10), "a")
					if err := mt.MaintainAfterCommit(t.Context(), last); err != nil {
						t.Fatal(err)
					}
				}
				if err := tbl.opts.Maintenance.Wait(t.Context()); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(seen) == 0 || len(seen) >= n || seen[len(seen)-1] != last.Version {
					t.Fatalf("%d commits up to version %d: the step ran on versions %v; want fewer than %d runs, the last on %d",
						n, last.Version, seen, n, last.Version)
				}
			})
		})
	}
}
