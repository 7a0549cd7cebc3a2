package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestSetMaintenance: settings are checked key by key (an unknown key or a bad value names the
// key and commits nothing), committed as one version, listed with what is stored and the
// defaults, followed by the next maintenance run, and "" restores a default.
func TestSetMaintenance(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl, err := Create(ctx, store, "cfg", hSchema, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m *Manifest
	for i := range 4 {
		m = hAppend(t, tbl, hRange(int64(i)*10, 10), "a")
	}
	settings, err := MaintenanceSettings(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(settings) != len(MaintenanceKeys()) || settings[0] != (MaintenanceSetting{Key: "mode", Value: "background"}) {
		t.Fatalf("settings of a table that stores none: %+v", settings)
	}

	for _, bad := range []struct{ key, value string }{
		{"compaction.nope", "1"},
		{"compaction.max_fragments", "1"}, // below MinMaxFragments
		{"compaction.max_fragments", "many"},
		{"cleanup.keep_last", "-3"},
		{"cleanup.older_than", "soon"},
		{"mode", "sometimes"},
		{"compaction.enabled", "yes please"},
		{"compaction.max_deleted_share", "0"},
	} {
		_, err := tbl.SetMaintenance(ctx, map[string]string{"mode": "inline", bad.key: bad.value}, nil)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), strings.TrimPrefix(bad.key, "compaction.")) {
			t.Errorf("%s=%s: %v, want ErrInvalidConfig naming the key", bad.key, bad.value, err)
		}
	}
	if latest, err := tbl.Latest(ctx); err != nil || latest.Version != m.Version {
		t.Fatalf("refused settings committed something: version %d, %v", latest.Version, err)
	}

	set, err := tbl.SetMaintenance(ctx, map[string]string{"mode": "inline", "compaction.min_fragments": "2", "cleanup.enabled": "false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Version != m.Version+1 {
		t.Fatalf("settings committed version %d, want %d", set.Version, m.Version+1)
	}
	cfg, err := MaintenanceConfigOf(set)
	if err != nil || cfg.Mode != MaintenanceInline || cfg.Compaction.MinFragments != 2 || enabled(cfg.Cleanup.Enabled) {
		t.Fatalf("stored config %+v, %v", cfg, err)
	}
	settings, _ = MaintenanceSettings(set)
	stored := map[string]string{}
	for _, s := range settings {
		if s.Stored {
			stored[s.Key] = s.Value
		}
	}
	if len(stored) != 3 || stored["mode"] != "inline" || stored["compaction.min_fragments"] != "2" || stored["cleanup.enabled"] != "false" {
		t.Fatalf("stored settings %v", stored)
	}

	// The next commit's maintenance follows the stored settings: inline, compacting the small
	// fragments at 2 of them.
	before := hAppend(t, tbl, hRange(100, 10), "b")
	if err := NewTableMaintainer(tbl, nil).MaintainAfterCommit(ctx, before); err != nil {
		t.Fatal(err)
	}
	after, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Fragments) >= len(before.Fragments) {
		t.Fatalf("no compaction after the commit: %d fragments before, %d after", len(before.Fragments), len(after.Fragments))
	}

	// "" restores the defaults; with none left the stored config goes.
	reset, err := tbl.SetMaintenance(ctx, map[string]string{"mode": "", "compaction.min_fragments": "", "cleanup.enabled": ""}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reset.Config[ConfigMaintenance]; ok {
		t.Fatalf("config still stored after every key was reset: %v", reset.Config)
	}
}
