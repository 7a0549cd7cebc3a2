package flightsvc_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestDropTable: drop_table removes a table's objects; afterwards every request of the table
// answers TABLE_NOT_FOUND (reads, a put without create, a second drop) and a put with create
// makes a fresh table at version 1 holding only its own rows, on the direct route and on MemWAL
// (whose shard writers the drop closed).
func TestDropTable(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for _, route := range []string{"direct", "memwal"} {
		table := "drop_" + route
		create := any(true)
		if route == "memwal" {
			create = cmd{"memwal": cmd{"shards": 2}}
		}
		put := func(q string, e int64, ids []int64, withCreate bool) (ack, error) {
			c := cmd{"table": table, "query_id": q, "epoch_id": e}
			if withCreate {
				c["create"] = create
			}
			return s.putCmd(testCtx(t), t, c, ids)
		}
		for e := int64(0); e < 3; e++ {
			if _, err := put("q", e, idRange(e*10, 3), true); err != nil {
				t.Fatalf("%s: put %d: %v", route, e, err)
			}
		}
		s.wantIDs(t, table, []int64{0, 1, 2, 10, 11, 12, 20, 21, 22})

		var res flightsvc.DropTableResult
		s.mustAction(t, "drop_table", cmd{"table": table}, &res)
		if res.Table != table || res.Version == 0 {
			t.Fatalf("%s: drop_table answered %+v", route, res)
		}
		if entries, err := os.ReadDir(filepath.Join(s.Root, table)); err == nil && len(entries) > 0 {
			t.Fatalf("%s: %d entries left under the dropped table's directory", route, len(entries))
		}
		_, err := s.action(testCtx(t), "table_stats", cmd{"table": table})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
		_, err = s.get(testCtx(t), cmd{"table": table})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
		_, err = put("q", 3, []int64{99}, false)
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
		_, err = s.action(testCtx(t), "drop_table", cmd{"table": table})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")

		// A fresh table under the same name: version 1 its create, the old query's epochs new to it.
		a, err := put("q", 0, []int64{7}, true)
		if err != nil {
			t.Fatalf("%s: put creating the table again: %v", route, err)
		}
		if a.Status != "committed" {
			t.Fatalf("%s: the re-created table answered %+v", route, a)
		}
		s.wantIDs(t, table, []int64{7})
		if st := s.stats(t, table); st.Rows != 1 {
			t.Fatalf("%s: the re-created table holds %d rows, want 1", route, st.Rows)
		}
	}
}

// TestTableDirectoryRemoved: a table whose directory is removed from storage behind the
// server's back (its handle cached) answers TABLE_NOT_FOUND, never commits on its vanished
// version, and a put with create makes a fresh table whose rows read back, with no INTERNAL.
func TestTableDirectoryRemoved(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for e := int64(0); e < 3; e++ {
		s.putEpoch(t, "gone", "q", e, idRange(e*10, 2))
	}
	s.wantIDs(t, "gone", []int64{0, 1, 10, 11, 20, 21})
	if err := os.RemoveAll(filepath.Join(s.Root, "gone")); err != nil {
		t.Fatal(err)
	}
	_, err := s.putCmd(testCtx(t), t, cmd{"table": "gone", "query_id": "q", "epoch_id": 3}, []int64{5})
	wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
	_, err = s.get(testCtx(t), cmd{"table": "gone"})
	wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")

	a := s.putEpoch(t, "gone", "q", 3, []int64{5})
	wantAck(t, a, "committed", 2) // version 1 the create, 2 the epoch: nothing of the old table
	s.wantIDs(t, "gone", []int64{5})
	b, err := s.action(testCtx(t), "history", cmd{"table": "gone"})
	if err != nil {
		t.Fatal(err)
	}
	var h flightsvc.HistoryResult
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Versions) != 2 {
		t.Fatalf("the re-created table has %d versions, want 2", len(h.Versions))
	}
}

// TestDropTicketOfDroppedTable: a ticket GetFlightInfo made before a drop names the table it was
// made for; after the drop, with the name created anew and past the ticket's version, it answers
// TABLE_NOT_FOUND instead of the new table's rows.
func TestDropTicketOfDroppedTable(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for e := int64(0); e < 2; e++ {
		s.putEpoch(t, "tk", "q", e, idRange(e*10, 2)) // versions 1 (create) to 3
	}
	info, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("tk"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoint) != 1 {
		t.Fatalf("%d endpoints, want 1", len(info.Endpoint))
	}
	ticket := info.Endpoint[0].Ticket.Ticket
	if r, err := s.get(testCtx(t), ticket); err != nil || r.Rows != 4 {
		t.Fatalf("the ticket before the drop: %d rows, %v", r.Rows, err)
	}
	s.mustAction(t, "drop_table", cmd{"table": "tk"}, nil)
	for e := int64(0); e < 3; e++ {
		s.putEpoch(t, "tk", "q", e, idRange(100+e*10, 3)) // versions 1 to 4 of the new table
	}
	s.wantIDs(t, "tk", []int64{100, 101, 102, 110, 111, 112, 120, 121, 122})
	r, err := s.get(testCtx(t), ticket)
	if err == nil {
		t.Fatalf("the dropped table's ticket read %d rows of the new table %v", r.Rows, r.IDs)
	}
	wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
}
