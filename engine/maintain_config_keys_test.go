package engine

import (
	"errors"
	"math"
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

// TestSetMaintenanceCrash: a process that dies after writing the settings' transaction file and
// before their manifest leaves the table with its old settings, readable, and a later
// SetMaintenance commits normally.
func TestSetMaintenanceCrash(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := Create(ctx, store, "cfg", hSchema, CreateOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("killed before the manifest")
	dying, err := Open(ctx, store, "cfg", &Options{BeforeManifestWrite: func(uint64) error { return crash }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dying.SetMaintenance(ctx, map[string]string{"compaction.max_fragments": "8"}, nil); !errors.Is(err, crash) {
		t.Fatalf("set with a crash before the manifest: %v", err)
	}
	fresh, err := Open(ctx, store, "cfg", nil)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := fresh.Latest(ctx)
	if err != nil || latest.Version != 1 || latest.Config[ConfigMaintenance] != "" {
		t.Fatalf("after the crash: version %d, config %v, %v; want version 1 with no settings", latest.Version, latest.Config, err)
	}
	m, err := fresh.SetMaintenance(ctx, map[string]string{"compaction.max_fragments": "8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := MaintenanceConfigOf(m); err != nil || m.Version != 2 || cfg.Compaction.MaxFragments != 8 {
		t.Fatalf("set after the crash: version %d, %+v, %v", m.Version, cfg.Compaction, err)
	}
}

// encodeConfig is c's ConfigMaintenance value; the test fails when c does not encode.
func encodeConfig(t testing.TB, c MaintenanceConfig) string {
	t.Helper()
	s, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSetMaintenanceRefusesNonFinite: no key takes NaN, an infinity or a number beyond its
// bounds, whether it comes as a setting's text or inside a ConfigMaintenance value; a refused
// value names its key, commits nothing and leaves the stored settings as they were.
func TestSetMaintenanceRefusesNonFinite(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl, err := Create(ctx, store, "cfg", hSchema, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.SetMaintenance(ctx, map[string]string{"mode": "off", "cleanup.keep_last": "77"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "infinity", "1e309", "-1e309", "1e300",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "0x1p1000", "-1"}
	for _, key := range MaintenanceKeys() {
		for _, v := range hostile {
			_, err := tbl.SetMaintenance(ctx, map[string]string{key: v}, nil)
			var keyErr *ConfigKeyError
			if !errors.As(err, &keyErr) || keyErr.Key != key || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%s=%s: %v, want a ConfigKeyError naming the key", key, v, err)
			}
		}
	}
	latest := hLatest(t, tbl)
	cfg, err := MaintenanceConfigOf(latest)
	if latest.Version != m.Version || err != nil || cfg.Mode != MaintenanceOff || cfg.Cleanup.KeepLast != 77 {
		t.Fatalf("after the refused settings: version %d (want %d), %+v, %v", latest.Version, m.Version, cfg, err)
	}

	// The encoding refuses what Validate refuses instead of storing nothing.
	for _, c := range []MaintenanceConfig{
		{Compaction: CompactionMaintenance{MergeRatio: math.NaN()}},
		{Compaction: CompactionMaintenance{MaxDeletedShare: math.Inf(1)}},
		{Compaction: CompactionMaintenance{MergeRatio: math.Inf(-1)}},
		{Cleanup: CleanupMaintenance{KeepLast: -5}},
		{Compaction: CompactionMaintenance{TargetRowsPerFragment: math.MaxInt64}},
	} {
		if s, err := c.Encode(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Encode(%+v) = %q, %v; want ErrInvalidConfig", c, s, err)
		}
	}
	for _, v := range []string{`{"cleanup":{"grace":1e300}}`, `{"cleanup":{"grace":-1e300}}`, `{"cleanup":{"keep_last":-1}}`,
		`{"compaction":{"merge_ratio":-4}}`, `{"compaction":{"merge_ratio":1e300}}`} {
		if c, err := ParseMaintenanceConfig(v); err == nil {
			t.Errorf("ParseMaintenanceConfig(%s) = %+v, want an error", v, c)
		}
	}
}
