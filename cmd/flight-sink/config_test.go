package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
)

// TestConfig: config get lists every maintenance setting with its source; config set commits
// the settings in one version, which config get (and the engine's maintenance) then reads; an
// unknown key or a bad value exits 1 naming the key and commits nothing.
func TestConfig(t *testing.T) {
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	makeTable(t, store) // events at version 3
	uri := filepath.Join(root, "events")

	out, errOut, code := runInProcess(t, "config", "get", uri)
	if code != 0 || errOut != "" {
		t.Fatalf("config get: exit %d, %q", code, errOut)
	}
	golden(t, "config_get.golden", out)

	out, errOut, code = runInProcess(t, "config", "set", uri, "compaction.max_fragments=128", "mode=inline", "cleanup.older_than=2h")
	if code != 0 || errOut != "" {
		t.Fatalf("config set: exit %d, %q", code, errOut)
	}
	golden(t, "config_set.golden", out)

	for _, bad := range []struct{ arg, want string }{
		{"compaction.nope=1", `unknown key "compaction.nope"`},
		{"compaction.max_fragments=1", `compaction.max_fragments="1"`},
		{"compaction.merge_ratio=NaN", `compaction.merge_ratio="NaN"`},
		{"compaction.max_deleted_share=Inf", `compaction.max_deleted_share="Inf"`},
		{"cleanup.keep_last=9223372036854775807", "cleanup.keep_last"},
		{"cleanup.keep_last=lots", "cleanup.keep_last"},
		{"mode", `setting "mode": want KEY=VALUE`},
	} {
		_, errOut, code := runInProcess(t, "config", "set", uri, bad.arg)
		if code != 1 || !strings.Contains(errOut, bad.want) {
			t.Errorf("config set %s: exit %d, stderr %q, want it to name %q", bad.arg, code, errOut, bad.want)
		}
	}

	out, _, code = runInProcess(t, "config", "get", "--json", uri)
	var got flightsvc.TableConfig
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("config get --json: exit %d, %v\n%s", code, err, out)
	}
	if got.FormatVersion != 1 || got.Version != 4 {
		t.Fatalf("config get --json: format_version %d, version %d; want 1, 4 (the set's commit, none by the refused ones)", got.FormatVersion, got.Version)
	}
	tbl, err := engine.Open(t.Context(), store, "events", nil)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := tbl.Latest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := engine.MaintenanceConfigOf(latest)
	if err != nil || cfg.Compaction.MaxFragments != 128 || cfg.Mode != engine.MaintenanceInline || cfg.Compaction.MergeRatio != 4 {
		t.Errorf("the table stores %+v (%v)", cfg, err)
	}
	if latest.Config["retention"] != "7d" {
		t.Errorf("config set changed another config key: %v", latest.Config)
	}
}
