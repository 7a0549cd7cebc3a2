package flightsvc_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestSetTableConfig: set_table_config refuses an unknown key or a bad value with
// INVALID_REQUEST naming the key and commits nothing; accepted settings are one commit that
// get_table_config lists, and the next commit's maintenance follows them (inline compaction
// at 2 small fragments, where the server's default is no maintenance at all).
func TestSetTableConfig(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	ctx := testCtx(t)
	for e := range int64(2) {
		s.putEpoch(t, "t", "q", e, []int64{e})
	}
	before := s.stats(t, "t")
	for _, bad := range []struct {
		set  cmd
		want string
	}{
		{cmd{"compaction.nope": "1"}, `"compaction.nope"`},
		{cmd{"mode": "inline", "compaction.max_fragments": "1"}, "max_fragments"},
		{cmd{"cleanup.grace": "tomorrow"}, "cleanup.grace"},
		{cmd{}, `needs "set"`},
	} {
		_, err := s.action(ctx, "set_table_config", cmd{"table": "t", "set": bad.set})
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("set %v: %v, want it to name %s", bad.set, err, bad.want)
		}
	}
	// NaN, an infinity or a number out of range: refused naming the key in the ErrorInfo, and the
	// stored settings stay.
	s.mustAction(t, "set_table_config", cmd{"table": "t", "set": cmd{"mode": "off", "cleanup.keep_last": "77"}}, nil)
	before = s.stats(t, "t")
	for _, bad := range []cmd{
		{"compaction.merge_ratio": "NaN"}, {"compaction.max_deleted_share": "+Inf"}, {"compaction.merge_ratio": "-Inf"},
		{"compaction.target_rows_per_fragment": "1e400"}, {"cleanup.keep_last": "99999999999999999999"},
	} {
		_, err := s.action(ctx, "set_table_config", cmd{"table": "t", "set": bad})
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		for k := range bad {
			if info := statusErrorInfo(err); info == nil || info.Metadata["key"] != k {
				t.Errorf("set %v: ErrorInfo %v, want metadata key %s", bad, info, k)
			}
		}
	}
	var kept flightsvc.TableConfig
	s.mustAction(t, "get_table_config", cmd{"table": "t"}, &kept)
	for _, st := range kept.Settings {
		if st.Key == "mode" && st.Value != "off" || st.Key == "cleanup.keep_last" && st.Value != "77" {
			t.Errorf("after the refused settings %s=%s, want the stored one", st.Key, st.Value)
		}
	}
	if v := s.version(t, "t"); v != before.Version {
		t.Fatalf("refused settings moved the table from version %d to %d", before.Version, v)
	}
	s.mustAction(t, "set_table_config", cmd{"table": "t", "set": cmd{"mode": "", "cleanup.keep_last": ""}}, nil)
	before = s.stats(t, "t")

	_, err := s.action(ctx, "set_table_config", cmd{"table": "t", "set": cmd{"mode": 3}})
	wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
	_, err = s.action(ctx, "get_table_config", cmd{"table": "missing"})
	wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
	if v := s.version(t, "t"); v != before.Version {
		t.Fatalf("refused settings moved the table from version %d to %d", before.Version, v)
	}

	var set flightsvc.TableConfig
	s.mustAction(t, "set_table_config", cmd{"table": "t", "set": cmd{"mode": "inline", "compaction.min_fragments": "2"}}, &set)
	var got flightsvc.TableConfig
	s.mustAction(t, "get_table_config", cmd{"table": "t"}, &got)
	// The settings' commit is a commit like any other: its maintenance (now inline) may commit a
	// compaction after it before get_table_config reads.
	if set.FormatVersion != 1 || set.Version != before.Version+1 || got.Version < set.Version {
		t.Fatalf("set answered %+v, get %+v; want version %d", set, got, before.Version+1)
	}
	stored := map[string]string{}
	for _, st := range got.Settings {
		if st.Stored {
			stored[st.Key] = st.Value
		}
	}
	if len(stored) != 2 || stored["mode"] != "inline" || stored["compaction.min_fragments"] != "2" {
		t.Fatalf("stored settings %v", stored)
	}

	// Inline maintenance runs before the ack: the ack of the next epoch comes after the
	// compaction of the small fragments.
	s.putEpoch(t, "t", "q", 2, []int64{2})
	if after := s.stats(t, "t"); after.Fragments >= before.Fragments+1 {
		t.Errorf("%d fragments after the epoch (%d before it), want them compacted", after.Fragments, before.Fragments)
	}
	s.wantIDs(t, "t", []int64{0, 1, 2})
}

// TestTableStatsCountsKeysOnce: table_stats counts what a read returns: on a keyed MemWAL table
// each key once, however often it was written, wherever its rows are (memtable, generation or
// the base table after a fold); /status.json reports the same figures.
func TestTableStatsCountsKeysOnce(t *testing.T) {
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0"})
	keys := make([]int64, 50)
	for i := range keys {
		keys[i] = int64(i)
	}
	create := cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 1}}
	for e := range int64(4) {
		c := cmd{"table": "k", "query_id": "q", "epoch_id": e}
		if e == 0 {
			c["create"] = create
		}
		s.mustPut(t, c, keys)
	}
	var st flightsvc.TableStats
	s.mustAction(t, "table_stats", cmd{"table": "k"}, &st)
	if st.Rows != int64(len(keys)) {
		t.Errorf("table_stats rows %d, want %d (one per key)", st.Rows, len(keys))
	}
	var page struct {
		Tables []struct {
			Version    uint64 `json:"version"`
			Rows       int64  `json:"rows"`
			BaseRows   int64  `json:"base_rows"`
			MemWALRows int64  `json:"memwal_rows"`
		} `json:"tables"`
	}
	if body := s.statusJSON(t, &page); len(page.Tables) != 1 {
		t.Fatalf("/status.json has %d tables, want 1:\n%s", len(page.Tables), body)
	}
	if got := page.Tables[0]; got.Version != st.Version || got.Rows != st.Rows || got.BaseRows != st.BaseRows || got.MemWALRows != st.MemWALRows {
		t.Errorf("/status.json %+v, table_stats version %d rows %d (base %d, MemWAL %d)", got, st.Version, st.Rows, st.BaseRows, st.MemWALRows)
	}
	s.wantIDs(t, "k", keys)
}
