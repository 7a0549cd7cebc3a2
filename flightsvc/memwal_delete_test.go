package flightsvc_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// startStoppable starts an in-process server on root and returns it with the function that stops
// it gracefully (Close: its shard writers closed, as at a restart).
func startStoppable(t *testing.T, root string) (*flightConn, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: root, Logger: testLogger(),
		ShutdownGrace: 10 * time.Second, Sink: startServerDefaults()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return &flightConn{Addr: srv.Addr().String(), Client: newClient(t, srv.Addr().String())}, stop
}

// A delete on a MemWAL table removes the matching rows wherever they are (folded into the base
// table, in flushed generations, in a memtable; on a keyed table also a key's newer row in a
// memtable over its folded one), answers how many it removed, and every read afterwards agrees:
// DoGet, GetFlightInfo's endpoints and total_records, table_stats, after a fold, after a restart.
func TestDeleteReachesMemWALRows(t *testing.T) {
	t.Parallel()
	// id < 10 (folded), 40 <= id < 50 (a flushed generation), 90 <= id < 100 (a memtable).
	where := cmd{"op": "or", "args": []cmd{
		{"op": "<", "column": "id", "value": 10},
		{"op": "and", "args": []cmd{{"op": ">=", "column": "id", "value": 40}, {"op": "<", "column": "id", "value": 50}}},
		{"op": "and", "args": []cmd{{"op": ">=", "column": "id", "value": 90}, {"op": "<", "column": "id", "value": 100}}},
	}}
	for _, keyed := range []bool{false, true} {
		name := map[bool]string{false: "unkeyed", true: "keyed"}[keyed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var want []int64
			for id := int64(0); id < 100; id++ {
				if !(id < 10 || (id >= 40 && id < 50) || id >= 90) {
					want = append(want, id)
				}
			}
			root := t.TempDir()
			s, stop := startStoppable(t, root)
			spec := cmd{"memwal": cmd{"shards": 2}}
			if keyed {
				spec["primary_key"] = []string{"id"}
			}
			c := epochCmd("mw", "q", 0)
			c["create"] = spec
			if a := s.mustPut(t, c, idRange(0, 30)); a.Route != "memwal" {
				t.Fatalf("epoch took route %q", a.Route)
			}
			s.mustAction(t, "flush_memwal", cmd{"table": "mw"}, nil)
			s.mustAction(t, "fold_memwal_shard", cmd{"table": "mw"}, nil) // ids 0..29 folded
			s.mustPut(t, epochCmd("mw", "q", 1), idRange(30, 30))
			s.mustAction(t, "flush_memwal", cmd{"table": "mw"}, nil) // ids 30..59 in generations
			s.mustPut(t, epochCmd("mw", "q", 2), idRange(60, 40))    // ids 60..99 in memtables
			if keyed {
				// Newer rows of folded keys, in a memtable: a read returns these, not the folded ones.
				s.mustPut(t, epochCmd("mw", "q", 3), idRange(0, 10))
			}
			s.wantIDs(t, "mw", idRange(0, 100))

			var res flightsvc.DeleteResult
			s.mustAction(t, "delete", cmd{"table": "mw", "where": where}, &res)
			if !res.Committed || res.RowsDeleted != 30 {
				t.Fatalf("delete answered %+v, want committed with 30 rows deleted", res)
			}

			check := func(when string, c *flightConn) {
				t.Helper()
				if got := c.readIDs(t, "mw"); !slices.Equal(got, want) {
					t.Fatalf("%s: DoGet returns %d rows %s, want %d %s", when, len(got), abbrev(got), len(want), abbrev(want))
				}
				info, err := c.Client.GetFlightInfo(testCtx(t), pathDesc("mw"))
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := c.readEndpoints(t, info); !slices.Equal(got, want) || info.TotalRecords != int64(len(want)) {
					t.Fatalf("%s: endpoints return %d rows %s (total_records %d), want %d", when, len(got), abbrev(got), info.TotalRecords, len(want))
				}
				var st flightsvc.TableStats
				c.mustAction(t, "table_stats", cmd{"table": "mw"}, &st)
				if st.Rows != int64(len(want)) {
					t.Fatalf("%s: table_stats rows %d, want %d", when, st.Rows, len(want))
				}
			}
			check("after the delete", s)
			s.mustPut(t, epochCmd("mw", "q", 4), idRange(200, 5)) // a later epoch is not deleted
			want = append(want, idRange(200, 5)...)
			check("after a later epoch", s)
			s.mustAction(t, "flush_memwal", cmd{"table": "mw"}, nil)
			s.mustAction(t, "fold_memwal_shard", cmd{"table": "mw"}, nil)
			check("after a fold", s)
			stop()
			s2, _ := startStoppable(t, root)
			check("after a restart", s2)
			// A second delete of the same rows finds none.
			s2.mustAction(t, "delete", cmd{"table": "mw", "where": where}, &res)
			if res.Committed || res.RowsDeleted != 0 {
				t.Fatalf("second delete answered %+v, want nothing deleted", res)
			}
		})
	}
}

// Epochs keep arriving while a delete of every row runs: each epoch is deleted whole or kept
// whole, the epochs acknowledged before the delete was sent are deleted, the deleted epochs are
// the writer's first ones (an epoch that arrived during the delete landed after it and was not
// deleted), and the delete counts exactly the rows it removed.
func TestDeleteDuringMemWALEpochs(t *testing.T) {
	t.Parallel()
	const rowsPerEpoch, epochs = 10, 40
	for _, keyed := range []bool{false, true} {
		name := map[bool]string{false: "unkeyed", true: "keyed"}[keyed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, flightsvc.Config{})
			spec := cmd{"memwal": cmd{"shards": 2}}
			if keyed {
				spec["primary_key"] = []string{"id"}
			}
			acked := make(chan int64, epochs)
			go func() {
				defer close(acked)
				for e := int64(0); e < epochs; e++ {
					c := epochCmd("mw", "q", e)
					c["create"] = spec
					if _, err := s.putCmd(testCtx(t), t, c, idRange(e*rowsPerEpoch, rowsPerEpoch)); err != nil {
						t.Errorf("epoch %d: %v", e, err)
						return
					}
					acked <- e
				}
			}()
			// Delete once a few epochs are acknowledged, while the writer goes on.
			last := int64(-1)
			for last < 4 {
				last = <-acked
			}
			var res flightsvc.DeleteResult
			s.mustAction(t, "delete", cmd{"table": "mw", "where": cmd{"op": ">=", "column": "id", "value": 0}}, &res)
			for range acked { // the writer ends
			}
			if t.Failed() {
				return
			}
			perEpoch := map[int64]int64{}
			for _, id := range s.readIDs(t, "mw") {
				perEpoch[id/rowsPerEpoch]++
			}
			deleted := int64(0)
			for e := int64(0); e < epochs; e++ {
				switch n := perEpoch[e]; {
				case n == 0 && e == deleted:
					deleted++ // the delete's epochs are the first ones
				case n != rowsPerEpoch:
					t.Fatalf("epoch %d has %d of its %d rows after the delete (epochs %v)", e, n, rowsPerEpoch, perEpoch)
				}
			}
			if deleted <= last {
				t.Fatalf("epochs 0..%d were acknowledged before the delete, but only %d epochs are gone", last, deleted)
			}
			if res.RowsDeleted != deleted*rowsPerEpoch {
				t.Fatalf("the delete answered %d rows deleted; %d epochs of %d rows are gone", res.RowsDeleted, deleted, rowsPerEpoch)
			}
		})
	}
}
