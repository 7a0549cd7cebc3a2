package flightsvc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestMemWALQuarantineOverFlight: a MemWAL generation whose file no longer fits the table (its
// bytes replaced on disk by a well-formed Arrow stream of another schema) is quarantined by the
// next fold: fold_memwal_shard succeeds, table_stats names the generation with its error and
// epoch, DoGet reads every other epoch and nothing of it, and puts keep being acknowledged past
// the fold ceiling (16 generations).
func TestMemWALQuarantineOverFlight(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	const table = "qt"
	put := func(e int64, ids ...int64) {
		t.Helper()
		c := cmd{"table": table, "query_id": "q", "epoch_id": e}
		if e == 0 {
			c["create"] = cmd{"memwal": cmd{"shards": 1}}
		}
		if a := s.mustPut(t, c, ids); a.Status != "committed" {
			t.Fatalf("epoch %d: %+v", e, a)
		}
		s.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
	}
	put(0, 1, 2)
	put(1, 3, 4) // generation 2, replaced below
	put(2, 5)

	gens, err := filepath.Glob(filepath.Join(s.Root, table, "_mem_wal", "*", "gen", "00000000000000000002", "*"))
	if err != nil || len(gens) != 1 {
		t.Fatalf("generation 2's files: %v %v", gens, err)
	}
	if err := os.WriteFile(gens[0], typetest.StringIDStream(t), 0o644); err != nil {
		t.Fatal(err)
	}
	var folded flightsvc.FoldMemWALResult
	s.mustAction(t, "fold_memwal_shard", cmd{"table": table}, &folded)
	if folded.GenerationsReclaimed != 2 {
		t.Fatalf("fold reclaimed %d generations, want 2 (the third is quarantined)", folded.GenerationsReclaimed)
	}
	var st flightsvc.TableStats
	s.mustAction(t, "table_stats", cmd{"table": table}, &st)
	if st.MemWAL == nil || len(st.MemWAL.Shards) != 1 || len(st.MemWAL.Shards[0].Quarantined) != 1 {
		t.Fatalf("table_stats memwal %+v: want one quarantined generation", st.MemWAL)
	}
	q := st.MemWAL.Shards[0].Quarantined[0]
	if q.Generation != 2 || q.Rows != 2 || !strings.Contains(q.Error, "schema mismatch") ||
		len(q.Epochs) != 1 || q.Epochs[0] != (flightsvc.EpochSpan{QueryID: "q", First: 1, Last: 1}) {
		t.Fatalf("quarantined %+v: want generation 2, 2 rows, epoch 1 of q and the schema error", q)
	}
	s.wantIDs(t, table, []int64{1, 2, 5})

	// More one-generation epochs than the fold ceiling: every one is acknowledged.
	want := []int64{1, 2, 5}
	for e := int64(3); e < 25; e++ {
		put(e, 100+e)
		want = append(want, 100+e)
	}
	s.wantIDs(t, table, want)
}
