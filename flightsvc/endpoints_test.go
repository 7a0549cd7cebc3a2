package flightsvc_test

// Parallel reads: GetFlightInfo's endpoints (groups of fragments plus the MemWAL rows), read
// concurrently, return exactly the DoGet of the table at the moment of the GetFlightInfo, with and
// without MemWAL rows, with and without a primary key (where a MemWAL row supersedes the base row
// of its key), with a filter; their tickets stay pinned after later writes, compaction and until
// cleanup.

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/streaming"
)

// readEndpoints reads every endpoint of info concurrently and returns the ids of all of them,
// sorted, and the rows each returned.
func (c *flightConn) readEndpoints(t testing.TB, info *flight.FlightInfo) ([]int64, []int64) {
	t.Helper()
	ids := make([][]int64, len(info.Endpoint))
	rows := make([]int64, len(info.Endpoint))
	errs := make([]error, len(info.Endpoint))
	var wg sync.WaitGroup
	for i, ep := range info.Endpoint {
		wg.Go(func() {
			r, err := c.get(testCtx(t), ep.Ticket.Ticket)
			ids[i], rows[i], errs[i] = r.IDs, r.Rows, err
		})
	}
	wg.Wait()
	var all []int64
	for i, err := range errs {
		if err != nil {
			t.Fatalf("endpoint %d (%s): %v", i, info.Endpoint[i].Ticket.Ticket, err)
		}
		all = append(all, ids[i]...)
	}
	slices.Sort(all)
	return all, rows
}

func TestFlightInfoEndpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		keyed  bool
		memwal bool
	}{
		{"unkeyed", false, false},
		{"keyed", true, false},
		{"unkeyed with MemWAL rows", false, true},
		{"keyed with MemWAL rows superseding base rows", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One endpoint per fragment: every fragment is larger than a byte.
			s := startServer(t, flightsvc.Config{EndpointBytes: 1})
			spec := cmd{}
			if tc.keyed {
				spec["primary_key"] = []string{"id"}
			}
			if tc.memwal {
				spec["memwal"] = cmd{"shards": 2}
			}
			// Four base fragments of 100 rows: ids 0..399.
			for e := int64(0); e < 4; e++ {
				c := epochCmd("t", "base", e)
				c["create"], c["route"] = spec, "direct"
				if len(spec) == 0 {
					c["create"] = true
				}
				if a := s.mustPut(t, c, idRange(e*100, 100)); a.Status != "committed" {
					t.Fatalf("base epoch %d: %+v", e, a)
				}
			}
			want := idRange(0, 400)
			if tc.memwal {
				// MemWAL rows: new ids 1000..1149 and, keyed, new versions of ids 50..149 and
				// 390..399 (updates of base rows: "newest wins" must not return them twice).
				c := epochCmd("t", "mw", 0)
				if tc.keyed {
					c["mode"] = "update"
					a := s.mustPut(t, c, idRange(50, 100), idRange(390, 10), idRange(1000, 150))
					if a.Route != "memwal" {
						t.Fatalf("MemWAL epoch took route %q", a.Route)
					}
				} else {
					s.mustPut(t, c, idRange(1000, 150))
				}
				want = append(want, idRange(1000, 150)...)
			}
			ctx := testCtx(t)
			info, err := s.Client.GetFlightInfo(ctx, pathDesc("t"))
			if err != nil {
				t.Fatal(err)
			}
			wantEndpoints := 4
			if tc.memwal {
				wantEndpoints++
			}
			if len(info.Endpoint) != wantEndpoints {
				t.Fatalf("%d endpoints, want %d (one per fragment, plus the MemWAL rows)", len(info.Endpoint), wantEndpoints)
			}
			doget, err := s.get(ctx, cmd{"table": "t"})
			if err != nil {
				t.Fatal(err)
			}
			got, rows := s.readEndpoints(t, info)
			if !slices.Equal(got, doget.IDs) || !slices.Equal(got, want) {
				t.Fatalf("union of the endpoints: %d rows %s\nDoGet: %d rows %s\nwant %d rows", len(got), abbrev(got), len(doget.IDs), abbrev(doget.IDs), len(want))
			}
			if info.TotalRecords != int64(len(want)) {
				t.Fatalf("total_records %d, the endpoints returned %d", info.TotalRecords, len(want))
			}
			for i, n := range rows {
				if n == 0 {
					t.Errorf("endpoint %d returned no rows", i)
				}
			}

			// Later writes (base and MemWAL) do not change what the endpoints return.
			c := epochCmd("t", "base", 4)
			c["route"] = "direct"
			s.mustPut(t, c, idRange(2000, 10))
			if tc.memwal {
				s.mustPut(t, epochCmd("t", "mw", 1), idRange(3000, 10))
			}
			if again, _ := s.readEndpoints(t, info); !slices.Equal(again, want) {
				t.Fatalf("after later writes the endpoints return %d rows %s, want the %d described", len(again), abbrev(again), len(want))
			}

			// A filter in the descriptor is in every ticket: the union is the filtered DoGet.
			filter := cmd{"op": "or", "args": []cmd{
				{"op": "<", "column": "id", "value": 120},
				{"op": ">=", "column": "id", "value": 1100}}}
			finfo, err := s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "t", "filter": filter, "columns": []string{"id"}}))
			if err != nil {
				t.Fatal(err)
			}
			fget, err := s.get(ctx, cmd{"table": "t", "filter": filter, "columns": []string{"id"}})
			if err != nil {
				t.Fatal(err)
			}
			fgot, _ := s.readEndpoints(t, finfo)
			if !slices.Equal(fgot, fget.IDs) || len(fgot) == 0 {
				t.Fatalf("filtered endpoints %s, filtered DoGet %s", abbrev(fgot), abbrev(fget.IDs))
			}
			for _, id := range fgot {
				if id >= 120 && id < 1100 {
					t.Fatalf("filtered read returned id %d", id)
				}
			}
			if finfo.TotalRecords != -1 {
				t.Errorf("total_records with a filter: %d, want -1 (unknown)", finfo.TotalRecords)
			}
			// Only the fragments whose id ranges can match are planned (0..99, 100..199 and
			// 2000..2009 of the five), and total_bytes counts only them.
			wantFiltered := 3
			if tc.memwal {
				wantFiltered++
			}
			if len(finfo.Endpoint) != wantFiltered {
				t.Errorf("filtered plan: %d endpoints, want %d (the fragments the filter can match)", len(finfo.Endpoint), wantFiltered)
			}
			if finfo.TotalBytes >= info.TotalBytes {
				t.Errorf("filtered plan: total_bytes %d, not below the whole table's %d", finfo.TotalBytes, info.TotalBytes)
			}
		})
	}
}

// A base endpoint's ticket keeps reading its version after a compaction rewrote the fragments it
// names, until cleanup removes the version: then NotFound with reason VERSION_NOT_FOUND.
func TestEndpointTicketPinnedUntilCleanup(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{EndpointBytes: 1})
	for e := int64(0); e < 3; e++ {
		s.putEpoch(t, "t", "q", e, idRange(e*10, 10))
	}
	ctx := testCtx(t)
	info, err := s.Client.GetFlightInfo(ctx, pathDesc("t"))
	if err != nil || len(info.Endpoint) != 3 {
		t.Fatalf("flight info: %v endpoints, %v", len(info.GetEndpoint()), err)
	}
	s.putEpoch(t, "t", "q", 3, idRange(30, 10))
	var cr flightsvc.CompactResult
	s.mustAction(t, "compact", cmd{"table": "t"}, &cr)
	if cr.FragmentsRemoved < 3 {
		t.Fatalf("compaction removed %d fragments, want the 4", cr.FragmentsRemoved)
	}
	if got, _ := s.readEndpoints(t, info); !slices.Equal(got, idRange(0, 30)) {
		t.Fatalf("after compaction the endpoints return %s", abbrev(got))
	}
	time.Sleep(1100 * time.Millisecond) // cleanup's age bound is in whole seconds
	var cl flightsvc.CleanupResult
	s.mustAction(t, "cleanup", cmd{"table": "t", "older_than_seconds": 1, "keep_last": 1}, &cl)
	var tk flightsvc.Ticket
	if err := json.Unmarshal(info.Endpoint[0].Ticket.Ticket, &tk); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cl.VersionsRemoved, *tk.Version) {
		t.Fatalf("cleanup removed versions %v, not the described %d", cl.VersionsRemoved, *tk.Version)
	}
	_, err = s.get(ctx, info.Endpoint[0].Ticket.Ticket)
	wantReason(t, err, codes.NotFound, "VERSION_NOT_FOUND")
}

// A MemWAL table whose 5,000 acknowledged rows are all in a memtable counts them in table_stats
// (split out, with the query's last epoch from shard state) and in GetFlightInfo's
// total_records, which equals what its endpoints return and what DoGet returns.
func TestMemWALRowsInEveryView(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	c := epochCmd("mw", "q-mw", 4)
	c["create"] = cmd{"memwal": cmd{"shards": 2}}
	if a := s.mustPut(t, c, idRange(0, 2500)); a.Route != "memwal" {
		t.Fatalf("epoch took route %q", a.Route)
	}
	s.mustPut(t, epochCmd("mw", "q-mw", 5), idRange(2500, 2500))

	var st flightsvc.TableStats
	s.mustAction(t, "table_stats", cmd{"table": "mw"}, &st)
	if st.Rows != 5000 || st.BaseRows != 0 || st.MemWALRows != 5000 {
		t.Errorf("table_stats rows %d (base %d, MemWAL %d), want 5000 (0, 5000)", st.Rows, st.BaseRows, st.MemWALRows)
	}
	if w, ok := st.Streams["q-mw"]; !ok || w.Epoch != 5 || !w.InMemWAL || w.Version != 0 {
		t.Errorf("table_stats streams %+v, want q-mw at epoch 5 in MemWAL", st.Streams)
	}
	ctx := testCtx(t)
	info, err := s.Client.GetFlightInfo(ctx, pathDesc("mw"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.readEndpoints(t, info)
	if info.TotalRecords != 5000 || !slices.Equal(got, idRange(0, 5000)) || !slices.Equal(got, s.readIDs(t, "mw")) {
		t.Fatalf("total_records %d, endpoints returned %d rows, want 5000 = DoGet", info.TotalRecords, len(got))
	}
}

// A filter on a keyed MemWAL table sees each key's newest row: a base row that matches the filter
// but is superseded by a MemWAL row that does not is returned by no read, endpoints or DoGet.
func TestFilterSeesNewestRow(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{EndpointBytes: 1})
	ctx := testCtx(t)
	withPayload := func(payload string, ids ...int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
		defer b.Release()
		for _, id := range ids {
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.StringBuilder).Append(payload)
		}
		return b.NewRecordBatch()
	}
	put := func(c cmd, rec arrow.RecordBatch) {
		t.Helper()
		defer rec.Release()
		if _, err := s.put(ctx, cmdDesc(t, c), rowSchema, rec); err != nil {
			t.Fatal(err)
		}
	}
	base := epochCmd("k", "base", 0)
	base["create"], base["route"] = cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 1}}, "direct"
	put(base, withPayload("old", idRange(0, 10)...))
	upd := epochCmd("k", "mw", 0)
	upd["mode"] = "update"
	put(upd, withPayload("new", 3, 4, 5)) // ids 3..5 now read "new"

	filter := cmd{"op": "=", "column": "payload", "value": "old"}
	want := []int64{0, 1, 2, 6, 7, 8, 9}
	r, err := s.get(ctx, cmd{"table": "k", "filter": filter})
	if err != nil || !slices.Equal(r.IDs, want) {
		t.Fatalf("filtered DoGet: %v, %v; want %v", r.IDs, err, want)
	}
	info, err := s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "k", "filter": filter}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.readEndpoints(t, info); !slices.Equal(got, want) {
		t.Fatalf("filtered endpoints %v, want %v", got, want)
	}
	r, err = s.get(ctx, cmd{"table": "k", "filter": cmd{"op": "=", "column": "payload", "value": "new"}})
	if err != nil || !slices.Equal(r.IDs, []int64{3, 4, 5}) {
		t.Fatalf("DoGet of the new rows: %v, %v", r.IDs, err)
	}
}

// The MemWAL endpoint's capture lives for --read-snapshot-ttl and within a memory budget (the
// oldest evicted first); a ticket naming one that is gone is NotFound, READ_SNAPSHOT_NOT_FOUND.
func TestReadSnapshotExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  flightsvc.Config
		// expire makes the first capture go away.
		expire func(t *testing.T, s *testServer)
	}{
		{"ttl", flightsvc.Config{Sink: streaming.Options{ReadSnapshotTTL: 50 * time.Millisecond}},
			func(t *testing.T, s *testServer) { time.Sleep(100 * time.Millisecond) }},
		{"evicted by a newer capture", flightsvc.Config{Sink: streaming.Options{ReadSnapshotMaxBytes: 1}},
			func(t *testing.T, s *testServer) {
				if _, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("mw")); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tc.cfg)
			c := epochCmd("mw", "q", 0)
			c["create"] = cmd{"memwal": cmd{"shards": 1}}
			s.mustPut(t, c, idRange(0, 10))
			info, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("mw"))
			if err != nil || len(info.Endpoint) != 1 {
				t.Fatalf("flight info: %v, %v", info, err)
			}
			tc.expire(t, s)
			_, err = s.get(testCtx(t), info.Endpoint[0].Ticket.Ticket)
			wantReason(t, err, codes.NotFound, "READ_SNAPSHOT_NOT_FOUND")
		})
	}
}
