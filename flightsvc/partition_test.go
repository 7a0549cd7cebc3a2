package flightsvc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
)

// eventSchema is the partitioned tables' schema: an id, an event time and a country (sometimes
// null).
var eventSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// eventBatch builds rows ids: id i is in hour i%30 after 2024-03-30T12:00Z (so over two days
// and two months), in one of four countries or none.
func eventBatch(ids []int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, eventSchema)
	defer b.Release()
	const start = int64(1711800000) * 1_000_000 // 2024-03-30T12:00:00Z
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(start + (id%30)*3_600_000_000 + id))
		if c := []string{"NL", "DE", "", "FR", "BE"}[id%5]; c == "" {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(c)
		}
	}
	return b.NewRecordBatch()
}

// openTable opens a table of a test server's root with the engine, to look at its fragments.
func openTable(t testing.TB, root, name string) (*engine.Table, *engine.Manifest) {
	t.Helper()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := engine.Open(testCtx(t), store, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.Latest(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return tbl, m
}

// TestPartitionedTablesSplitEveryWrite creates tables of every transform over DoPut's create,
// plain, keyed (update mode) and MemWAL (folded), writes epochs of many partitions, and checks
// that every data file holds the rows of exactly one partition, that the table reads back whole
// and that table_stats and /status.json show the spec.
func TestPartitionedTablesSplitEveryWrite(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	specs := []string{
		`[{"column":"ts","transform":"day"}]`,
		`[{"column":"ts","transform":"hour"}]`,
		`[{"column":"ts","transform":"month"}]`,
		`[{"column":"ts","transform":"year"}]`,
		`[{"column":"country"}]`,
		`[{"column":"id","transform":"bucket[4]"}]`,
		`[{"column":"country","transform":"truncate[1]"},{"column":"id","transform":"truncate[100]"}]`,
	}
	for i, specJSON := range specs {
		var fields []any
		if err := json.Unmarshal([]byte(specJSON), &fields); err != nil {
			t.Fatal(err)
		}
		spec, err := partition.ParseSpec([]byte(specJSON))
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"plain", "keyed", "memwal"} {
			name := fmt.Sprintf("%s_%d", kind, i)
			t.Run(name+"/"+specJSON, func(t *testing.T) {
				create := cmd{"partition_by": fields}
				mode := "append"
				switch kind {
				case "keyed":
					create["primary_key"], mode = []string{"id"}, "update"
				case "memwal":
					create["memwal"] = cmd{"shards": 1}
				}
				var distinct int
				for epoch, ids := range [][]int64{idRange(0, 120), idRange(100, 80)} { // the keyed table's second epoch replaces 20 rows
					rec := eventBatch(ids)
					b, err := spec.Bind(eventSchema)
					if err != nil {
						t.Fatal(err)
					}
					g, err := b.Group(rec)
					if err != nil {
						t.Fatal(err)
					}
					distinct += len(g)
					// Two batches: one epoch still writes one file per partition.
					half := int64(len(ids) / 2)
					a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": name, "query_id": "q", "epoch_id": epoch, "mode": mode, "create": create}),
						eventSchema, rec.NewSlice(0, half), rec.NewSlice(half, int64(len(ids))))
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
					wantAck(t, a, "committed", 0)
				}
				if kind == "memwal" {
					s.mustAction(t, "flush_memwal", cmd{"table": name}, nil)
					s.mustAction(t, "fold_memwal_shard", cmd{"table": name}, nil)
				}
				tbl, m := openTable(t, s.Root, name)
				if err := tbl.CheckFragmentPartitions(testCtx(t), m); err != nil {
					t.Fatal(err)
				}
				if kind == "memwal" { // one fold of both epochs: one file per partition
					seen := map[string]bool{}
					for _, f := range m.Fragments {
						seen[f.Partition.Key()] = true
					}
					if len(m.Fragments) == 0 || len(seen) != len(m.Fragments) {
						t.Fatalf("the fold made %d fragments of %d partitions", len(m.Fragments), len(seen))
					}
				}
				if kind == "plain" && len(m.Fragments) != distinct {
					t.Fatalf("two epochs of %d partitions in all made %d fragments", distinct, len(m.Fragments))
				}
				want := int64(200)
				if kind == "keyed" {
					want = 180
				}
				if got := s.stats(t, name).Rows; got != want {
					t.Fatalf("%d rows, want %d", got, want)
				}
				r, err := s.get(testCtx(t), cmd{"table": name})
				if err != nil {
					t.Fatal(err)
				}
				if r.Rows != want {
					t.Fatalf("DoGet read %d rows, want %d", r.Rows, want)
				}
				var st struct {
					PartitionBy []flightsvc.PartitionField `json:"partition_by"`
				}
				s.mustAction(t, "table_stats", cmd{"table": name}, &st)
				if got, _ := json.Marshal(st.PartitionBy); string(got) != spec.String() {
					t.Fatalf("table_stats partition_by %s, want %s", got, spec)
				}
			})
		}
	}
}

// TestPartitionSpecRefusals: create_table and DoPut's create refuse a spec that does not fit
// with InvalidArgument, reason INVALID_PARTITION_SPEC and the column in the ErrorInfo, and
// create nothing.
func TestPartitionSpecRefusals(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	schema := []cmd{{"name": "id", "type": "int64"}, {"name": "ts", "type": "timestamp[us, tz=UTC]"}, {"name": "f", "type": "double"},
		{"name": "flag", "type": "bool"}, {"name": "s", "type": "string"}}
	for _, c := range []struct {
		spec   []cmd
		column string
	}{
		{[]cmd{{"column": "nope"}}, "nope"},
		{[]cmd{{"column": "id", "transform": "day"}}, "id"},
		{[]cmd{{"column": "f"}}, "f"},
		{[]cmd{{"column": "flag", "transform": "bucket[2]"}}, "flag"},
		{[]cmd{{"column": "id", "transform": "bucket[0]"}}, "id"},
		{[]cmd{{"column": "s", "transform": "truncate[0]"}}, "s"},
		{[]cmd{{"column": "s", "transform": "days"}}, "s"},
		{[]cmd{{"column": "ts", "transform": "day"}, {"column": "ts", "transform": "day"}}, "ts"},
	} {
		_, err := s.action(testCtx(t), "create_table", cmd{"table": "r", "schema": schema, "partition_by": c.spec})
		wantReason(t, err, codes.InvalidArgument, "INVALID_PARTITION_SPEC")
		if got := statusErrorInfo(err).GetMetadata()["column"]; got != c.column {
			t.Fatalf("%v: ErrorInfo column %q, want %q", c.spec, got, c.column)
		}
		_, err = s.action(testCtx(t), "table_stats", cmd{"table": "r"})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
	}
	// DoPut's create: the same refusal before any data is read; nothing is created.
	rec := eventBatch(idRange(0, 10))
	defer rec.Release()
	_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "r", "query_id": "q", "epoch_id": 0, "create": cmd{"partition_by": []cmd{{"column": "country", "transform": "hour"}}}}), eventSchema, rec)
	wantReason(t, err, codes.InvalidArgument, "INVALID_PARTITION_SPEC")
	if got := statusErrorInfo(err).GetMetadata()["column"]; got != "country" {
		t.Fatalf("DoPut create: ErrorInfo column %q", got)
	}
	_, err = s.action(testCtx(t), "table_stats", cmd{"table": "r"})
	wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
	// A partition field with an unknown key is refused by the strict decoder.
	_, err = s.action(testCtx(t), "create_table", cmd{"table": "r", "schema": schema, "partition_by": []cmd{{"column": "ts", "transfrom": "day"}}})
	wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
}

// TestPartitionLimitOverTheWire: an epoch of more partitions than the table's limit is refused
// with TOO_MANY_PARTITIONS and commits nothing; one within it lands. /status.json shows the spec.
func TestPartitionLimitOverTheWire(t *testing.T) {
	s := startServer(t, flightsvc.Config{HTTPListen: "127.0.0.1:0"})
	s.mustAction(t, "create_table", cmd{"table": "l", "schema": []cmd{{"name": "id", "type": "int64"}, {"name": "ts", "type": "timestamp[us, tz=UTC]"}, {"name": "country", "type": "string"}},
		"partition_by": []cmd{{"column": "ts", "transform": "hour"}}, "max_partitions_per_write": 5}, nil)
	rec := eventBatch(idRange(0, 60)) // 30 hours
	defer rec.Release()
	_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "l", "query_id": "q", "epoch_id": 0}), eventSchema, rec)
	wantReason(t, err, codes.InvalidArgument, "TOO_MANY_PARTITIONS")
	if v := s.version(t, "l"); v != 1 {
		t.Fatalf("a refused epoch committed: version %d", v)
	}
	small := eventBatch([]int64{0, 1, 2, 30, 31})
	defer small.Release()
	a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "l", "query_id": "q", "epoch_id": 0}), eventSchema, small)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", 2)

	resp, err := http.Get("http://" + s.Srv.HTTPAddr().String() + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var status struct {
		Tables []struct {
			Table       string                     `json:"table"`
			PartitionBy []flightsvc.PartitionField `json:"partition_by"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	if len(status.Tables) != 1 || len(status.Tables[0].PartitionBy) != 1 || status.Tables[0].PartitionBy[0] != (flightsvc.PartitionField{Column: "ts", Transform: "hour"}) {
		t.Fatalf("/status.json tables %+v", status.Tables)
	}
}

// TestGetFlightInfoPrunesPartitions: GetFlightInfo with a filter on one day of a day-partitioned
// table describes only that day's fragments (endpoints and total_bytes), and its endpoints read
// exactly the rows the filter matches; DoGet with the filter reads the same rows.
func TestGetFlightInfoPrunesPartitions(t *testing.T) {
	s := startServer(t, flightsvc.Config{EndpointBytes: 1}) // an endpoint per fragment
	create := cmd{"partition_by": []cmd{{"column": "ts", "transform": "day"}}}
	for e := range int64(3) {
		rec := eventBatch(idRange(e*100, 100)) // two days each
		_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "d", "query_id": "q", "epoch_id": e, "create": create}), eventSchema, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, m := openTable(t, s.Root, "d")
	if len(m.Fragments) != 6 {
		t.Fatalf("three epochs of two days made %d fragments", len(m.Fragments))
	}
	filter := cmd{"op": "and", "args": []cmd{
		{"op": ">=", "column": "ts", "value": "2024-03-31T00:00:00Z"},
		{"op": "<", "column": "ts", "value": "2024-04-01T00:00:00Z"}}}
	all, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("d"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Client.GetFlightInfo(testCtx(t), cmdDesc(t, cmd{"table": "d", "filter": filter}))
	if err != nil {
		t.Fatal(err)
	}
	const march31 = 19813 // days since 1970
	var dayBytes int64
	dayFrags := map[uint64]bool{}
	for _, f := range m.Fragments {
		if f.Partition[0].Int == march31 {
			dayFrags[f.ID] = true
			dayBytes += f.DataBytes()
		}
	}
	if len(info.Endpoint) != len(dayFrags) || len(all.Endpoint) != len(m.Fragments) {
		t.Fatalf("%d endpoints with the filter, %d without; the day has %d of %d fragments", len(info.Endpoint), len(all.Endpoint), len(dayFrags), len(m.Fragments))
	}
	if info.TotalBytes != dayBytes {
		t.Fatalf("total_bytes %d with the filter, the day's fragments hold %d (the table %d)", info.TotalBytes, dayBytes, all.TotalBytes)
	}
	var rows int64
	for _, ep := range info.Endpoint {
		var tk flightsvc.Ticket
		if err := json.Unmarshal(ep.Ticket.Ticket, &tk); err != nil {
			t.Fatal(err)
		}
		for _, id := range *tk.Fragments {
			if !dayFrags[id] {
				t.Fatalf("endpoint reads fragment %d of another day", id)
			}
		}
		r, err := s.get(testCtx(t), ep.Ticket.Ticket)
		if err != nil {
			t.Fatal(err)
		}
		rows += r.Rows
	}
	whole, err := s.get(testCtx(t), cmd{"table": "d", "filter": filter})
	if err != nil {
		t.Fatal(err)
	}
	// Id i is i%30 hours after 2024-03-30T12:00: on March 31 when i%30 is 12..29, 18 of every 30.
	if want := int64(180); rows != want || whole.Rows != want {
		t.Fatalf("endpoints read %d rows, DoGet %d, want %d", rows, whole.Rows, want)
	}
}

// TestStagedEpochOfPartitionedTable: the stages of a staged epoch each write files of one
// partition; the epoch's stages together are held to the table's partition limit at commit.
func TestStagedEpochOfPartitionedTable(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	s.mustAction(t, "create_table", cmd{"table": "st", "schema": []cmd{{"name": "id", "type": "int64"}, {"name": "ts", "type": "timestamp[us, tz=UTC]"}, {"name": "country", "type": "string"}},
		"partition_by": []cmd{{"column": "country"}}, "max_partitions_per_write": 4}, nil)
	stage := func(epoch, part int64, ids []int64) string {
		rec := eventBatch(ids)
		defer rec.Release()
		a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "st", "query_id": "q", "epoch_id": epoch, "partition": cmd{"id": part}}), eventSchema, rec)
		if err != nil {
			t.Fatal(err)
		}
		wantAck(t, a, "staged", 0)
		return a.Stage
	}
	// Two stages of three countries each (ids 0,1,3 and 5,6,8: NL, DE, FR): 3 partitions in all.
	tokens := []string{stage(0, 0, []int64{0, 1, 3, 10, 11, 13}), stage(0, 1, []int64{5, 6, 8})}
	var c ack
	s.mustAction(t, "commit_epoch", cmd{"table": "st", "query_id": "q", "epoch_id": 0, "stages": tokens}, &c)
	wantAck(t, c, "committed", 2)
	tbl, m := openTable(t, s.Root, "st")
	if err := tbl.CheckFragmentPartitions(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	if len(m.Fragments) != 6 { // one file per partition per stage
		t.Fatalf("%d fragments, want 3 per stage", len(m.Fragments))
	}
	// Stages of 3 and 2 partitions, 5 together: past the limit of 4 at commit, nothing lands.
	tokens = []string{stage(1, 0, []int64{0, 1, 3}), stage(1, 1, []int64{2, 4})}
	_, err := s.action(testCtx(t), "commit_epoch", cmd{"table": "st", "query_id": "q", "epoch_id": 1, "stages": tokens})
	wantReason(t, err, codes.InvalidArgument, "TOO_MANY_PARTITIONS")
	if v := s.version(t, "st"); v != 2 {
		t.Fatalf("a refused staged epoch committed: version %d", v)
	}
}

// TestPartitionMaintenanceOverTheWire: on a day-partitioned table (plain and MemWAL), the compact
// action merges each day's small files into one, and the delete action of a whole day drops its
// fragments in one commit without a deletion file.
func TestPartitionMaintenanceOverTheWire(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	for _, kind := range []string{"plain", "memwal"} {
		t.Run(kind, func(t *testing.T) {
			create := cmd{"partition_by": []cmd{{"column": "ts", "transform": "day"}}}
			if kind == "memwal" {
				create["memwal"] = cmd{"shards": 1}
			}
			name := "m_" + kind
			for e := range int64(4) {
				rec := eventBatch(idRange(e*60, 60)) // two days each
				_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": name, "query_id": "q", "epoch_id": e, "create": create}), eventSchema, rec)
				rec.Release()
				if err != nil {
					t.Fatal(err)
				}
				if kind == "memwal" { // a fold per epoch: small files
					s.mustAction(t, "flush_memwal", cmd{"table": name}, nil)
					s.mustAction(t, "fold_memwal_shard", cmd{"table": name}, nil)
				}
			}
			_, m := openTable(t, s.Root, name)
			if len(m.Fragments) != 8 {
				t.Fatalf("four epochs of two days made %d fragments", len(m.Fragments))
			}
			s.mustAction(t, "compact", cmd{"table": name}, nil)
			tbl, m := openTable(t, s.Root, name)
			if err := tbl.CheckFragmentPartitions(testCtx(t), m); err != nil {
				t.Fatal(err)
			}
			if len(m.Fragments) != 2 || s.stats(t, name).Rows != 240 {
				t.Fatalf("after compaction %d fragments (want one per day, 2), %d rows", len(m.Fragments), s.stats(t, name).Rows)
			}
			var del struct {
				Committed   bool  `json:"committed"`
				RowsDeleted int64 `json:"rows_deleted"`
			}
			s.mustAction(t, "delete", cmd{"table": name, "where": cmd{"op": "and", "args": []cmd{
				{"op": ">=", "column": "ts", "value": "2024-03-31T00:00:00Z"},
				{"op": "<", "column": "ts", "value": "2024-04-01T00:00:00Z"}}}}, &del)
			_, after := openTable(t, s.Root, name)
			if !del.Committed || del.RowsDeleted != 144 || len(after.Fragments) != 1 || after.Version != m.Version+1 {
				t.Fatalf("delete of a day: %+v, %d fragments left at version %d (from %d)", del, len(after.Fragments), after.Version, m.Version)
			}
			for _, f := range after.Fragments {
				if f.DeletionFile != "" {
					t.Fatalf("fragment %d has a deletion file %s", f.ID, f.DeletionFile)
				}
			}
			if got := s.stats(t, name).Rows; got != 96 {
				t.Fatalf("%d rows after the delete, want 96", got)
			}
		})
	}
}
