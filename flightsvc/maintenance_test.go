package flightsvc_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/streaming"
)

// A MemWAL table over Flight: epochs land in the shards (no base version each), reads merge
// them, flush and fold_memwal_shard fold them into the base table exactly once, and replays stay
// duplicates throughout.
func TestMemWALTableOverFlight(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	create := cmd{"memwal": cmd{"shards": 2}}
	var want []int64
	for e := int64(0); e < 6; e++ {
		ids := idRange(e*100, 50)
		a := s.mustPut(t, cmd{"table": "hf", "query_id": "fast", "epoch_id": e, "create": create}, ids)
		if a.Status != "committed" || a.Route != "memwal" {
			t.Fatalf("epoch %d: %+v", e, a)
		}
		want = append(want, ids...)
	}
	if v := s.version(t, "hf"); v != 1 {
		t.Fatalf("MemWAL epochs created base versions: %d", v)
	}
	s.wantIDs(t, "hf", want)
	if a := s.mustPut(t, cmd{"table": "hf", "query_id": "fast", "epoch_id": 5}, idRange(500, 50)); a.Status != "duplicate" {
		t.Fatalf("replay: %+v", a)
	}
	var st struct {
		MemWAL struct {
			Shards []struct {
				Shard        string `json:"shard"`
				MemtableRows int64  `json:"memtable_rows"`
				Generations  int    `json:"generations"`
			} `json:"shards"`
		} `json:"memwal"`
	}
	s.mustAction(t, "table_stats", cmd{"table": "hf"}, &st)
	var memRows int64
	for _, sh := range st.MemWAL.Shards {
		memRows += sh.MemtableRows
	}
	if len(st.MemWAL.Shards) != 2 || memRows != 300 {
		t.Fatalf("table_stats memwal: %+v", st.MemWAL)
	}
	var flushed struct {
		ShardsFlushed int `json:"shards_flushed"`
	}
	s.mustAction(t, "flush_memwal", cmd{"table": "hf"}, &flushed)
	var folded struct {
		Reclaimed int `json:"generations_reclaimed"`
	}
	s.mustAction(t, "fold_memwal_shard", cmd{"table": "hf"}, &folded)
	if flushed.ShardsFlushed != 2 || folded.Reclaimed < 1 {
		t.Fatalf("flush %+v, fold %+v", flushed, folded)
	}
	if got := s.stats(t, "hf"); got.Rows != 300 {
		t.Fatalf("base rows after the fold: %d", got.Rows)
	}
	s.wantIDs(t, "hf", want)
	if a := s.mustPut(t, cmd{"table": "hf", "query_id": "fast", "epoch_id": 5}, idRange(500, 50)); a.Status != "duplicate" {
		t.Fatalf("replay after the fold: %+v", a)
	}
	// Nothing left to fold; compact_memwal_shard, the fold's older name, answers as
	// fold_memwal_shard does.
	s.mustAction(t, "compact_memwal_shard", cmd{"table": "hf"}, &folded)
	if folded.Reclaimed != 0 {
		t.Fatalf("second fold (compact_memwal_shard) reclaimed %d", folded.Reclaimed)
	}
}

// compact, delete and cleanup actions keep every live row and remove what they say.
func TestMaintenanceActions(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	var want []int64
	for e := int64(0); e < 20; e++ {
		ids := idRange(e*10, 10)
		s.putEpoch(t, "maint", "q", e, ids)
		want = append(want, ids...)
	}
	var del struct {
		Committed   bool  `json:"committed"`
		RowsDeleted int64 `json:"rows_deleted"`
	}
	s.mustAction(t, "delete", cmd{"table": "maint", "where": cmd{"op": "<", "column": "id", "value": 15}}, &del)
	if !del.Committed || del.RowsDeleted != 15 {
		t.Fatalf("delete: %+v", del)
	}
	want = want[15:]
	var comp struct {
		Version          uint64 `json:"version"`
		FragmentsRemoved int    `json:"fragments_removed"`
		FragmentsAdded   int    `json:"fragments_added"`
	}
	s.mustAction(t, "compact", cmd{"table": "maint"}, &comp)
	if comp.FragmentsRemoved != 20 || comp.FragmentsAdded != 1 {
		t.Fatalf("compact: %+v", comp)
	}
	if st := s.stats(t, "maint"); st.Fragments != 1 || st.Rows != int64(len(want)) {
		t.Fatalf("after compaction: %+v", st)
	}
	s.wantIDs(t, "maint", want)
	var dry, real struct {
		VersionsRemoved []uint64 `json:"versions_removed"`
		FilesRemoved    []string `json:"files_removed"`
	}
	s.mustAction(t, "cleanup", cmd{"table": "maint", "older_than_seconds": 1, "dry_run": true}, &dry)
	// Versions are superseded for less than a second here, so a 1 s policy keeps them all; the
	// dry run must report exactly what the real run does.
	s.mustAction(t, "cleanup", cmd{"table": "maint", "older_than_seconds": 1}, &real)
	if len(dry.VersionsRemoved) != len(real.VersionsRemoved) || len(dry.FilesRemoved) != len(real.FilesRemoved) {
		t.Fatalf("dry run %+v differs from real run %+v", dry, real)
	}
	s.wantIDs(t, "maint", want)
	// Replays are still recognised after the maintenance.
	if a := s.mustPut(t, epochCmd("maint", "q", 19), idRange(190, 10)); a.Status != "duplicate" {
		t.Fatalf("replay after maintenance: %+v", a)
	}
}

// update mode on a keyed table upserts over Flight.
func TestUpdateModeUpsertsByKey(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	c := func(e int64) cmd {
		return cmd{"table": "keyed", "query_id": "u", "epoch_id": e, "mode": "update", "create": cmd{"primary_key": []string{"id"}}}
	}
	s.mustPut(t, c(0), []int64{1, 2, 3})
	s.mustPut(t, c(1), []int64{2, 3, 4})
	s.wantIDs(t, "keyed", []int64{1, 2, 3, 4})
}

// With the default maintenance on, a table written one small epoch at a time stays compact
// without any user action, every row lands exactly once, and replays are still duplicates.
func TestMaintenanceKeepsStreamingTablesSmall(t *testing.T) {
	s := startServer(t, flightsvc.Config{Sink: streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceInline}}})
	var want []int64
	for e := int64(0); e < 80; e++ {
		ids := idRange(e*10, 10)
		if a := s.putEpoch(t, "auto", "q", e, ids); a.Status != "committed" {
			t.Fatalf("epoch %d: %+v", e, a)
		}
		want = append(want, ids...)
	}
	st := s.stats(t, "auto")
	if st.Fragments >= 20 {
		t.Fatalf("%d fragments after 80 epochs with maintenance on", st.Fragments)
	}
	s.wantIDs(t, "auto", want)
	if a := s.putEpoch(t, "auto", "q", 79, idRange(790, 10)); a.Status != "duplicate" {
		t.Fatalf("replay: %+v", a)
	}
}

// create_index and optimize_indices over Flight: the index covers the keyed table, upserts stay
// correct through it, and table_stats reports it.
func TestIndexActions(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	c := func(e int64) cmd {
		return cmd{"table": "indexed", "query_id": "u", "epoch_id": e, "mode": "update", "create": cmd{"primary_key": []string{"id"}}}
	}
	s.mustPut(t, c(0), []int64{1, 2, 3})
	var created struct {
		Version uint64 `json:"version"`
	}
	s.mustAction(t, "create_index", cmd{"table": "indexed"}, &created)
	s.mustPut(t, c(1), []int64{3, 4})
	var opt struct {
		Indices []any `json:"indices"`
	}
	s.mustAction(t, "optimize_indices", cmd{"table": "indexed"}, &opt)
	var st struct {
		Indices []struct {
			Name      string `json:"name"`
			Unindexed int    `json:"unindexed_fragments"`
		} `json:"indices"`
	}
	s.mustAction(t, "table_stats", cmd{"table": "indexed"}, &st)
	if created.Version == 0 || len(st.Indices) != 1 || st.Indices[0].Name != "pk" || st.Indices[0].Unindexed != 0 {
		t.Fatalf("create %+v, stats %+v", created, st)
	}
	s.mustPut(t, c(2), []int64{1, 5})
	s.wantIDs(t, "indexed", []int64{1, 2, 3, 4, 5})
	_, err := s.action(testCtx(t), "create_index", cmd{"table": "indexed"})
	wantCode(t, err, codes.InvalidArgument)
}
