package flightsvc_test

// Reads and table metadata: DoGet (time travel, projection), GetFlightInfo, GetSchema,
// ListFlights, ListActions; plain PATH appends and create_table.

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/flightsvc"
)

func TestDoGetTimeTravelAndProjection(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "q", 0, idRange(0, 10))  // v2
	s.putEpoch(t, "t", "q", 1, idRange(10, 10)) // v3
	c := epochCmd("t", "q", 2)
	c["mode"] = "complete"
	s.mustPut(t, c, idRange(100, 4)) // v4 replaces everything

	ctx := testCtx(t)
	for _, tc := range []struct {
		version uint64
		want    []int64
	}{{1, []int64{}}, {2, idRange(0, 10)}, {3, idRange(0, 20)}, {4, idRange(100, 4)}, {0, idRange(100, 4)}} {
		tk := cmd{"table": "t"}
		if tc.version != 0 {
			tk["version"] = tc.version
		}
		r, err := s.get(ctx, tk)
		if err != nil {
			t.Fatalf("version %d: %v", tc.version, err)
		}
		if !slices.Equal(r.IDs, tc.want) || r.Rows != int64(len(tc.want)) {
			t.Fatalf("version %d: ids %v, want %v", tc.version, r.IDs, tc.want)
		}
		if !arrowschema.EqualIgnoringFieldIDs(r.Schema, rowSchema) {
			t.Fatalf("version %d: schema %v", tc.version, r.Schema)
		}
	}

	// Projection: only the named columns, in the order asked for.
	r, err := s.get(ctx, cmd{"table": "t", "version": 3, "columns": []string{"payload"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema.NumFields() != 1 || r.Schema.Field(0).Name != "payload" || r.IDs != nil || r.Rows != 20 {
		t.Fatalf("projection payload: schema %v rows %d", r.Schema, r.Rows)
	}
	slices.Sort(r.Payloads)
	if r.Payloads[0] != "row-0" || len(r.Payloads) != 20 {
		t.Fatalf("payloads %v", r.Payloads)
	}
	r, err = s.get(ctx, cmd{"table": "t", "version": 2, "columns": []string{"payload", "id"}})
	if err != nil {
		t.Fatal(err)
	}
	if names := []string{r.Schema.Field(0).Name, r.Schema.Field(1).Name}; !slices.Equal(names, []string{"payload", "id"}) {
		t.Fatalf("projected column order %v", names)
	}
	if !slices.Equal(r.IDs, idRange(0, 10)) {
		t.Fatalf("ids %v", r.IDs)
	}
	_, err = s.get(ctx, cmd{"table": "t", "version": 5})
	wantCode(t, err, codes.NotFound)
}

func TestFlightInfoSchemaAndListFlights(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "alpha", "q", 0, idRange(0, 10))
	s.putEpoch(t, "alpha", "q", 1, idRange(10, 5))
	s.putEpoch(t, "beta", "q", 0, idRange(0, 3))
	ctx := testCtx(t)

	// GetFlightInfo (PATH): latest version; its endpoint's ticket reads exactly that version,
	// even after the table moved on.
	info, err := s.Client.GetFlightInfo(ctx, pathDesc("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if info.TotalRecords != 15 || info.TotalBytes <= 0 || len(info.Endpoint) != 1 {
		t.Fatalf("flight info: records %d bytes %d endpoints %d", info.TotalRecords, info.TotalBytes, len(info.Endpoint))
	}
	if d := info.GetFlightDescriptor(); d.GetType() != flight.DescriptorPATH || !slices.Equal(d.GetPath(), []string{"alpha"}) {
		t.Fatalf("flight info descriptor %v", d)
	}
	sc, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
	if err != nil || !arrowschema.EqualIgnoringFieldIDs(sc, rowSchema) {
		t.Fatalf("flight info schema %v, %v", sc, err)
	}
	var tk struct {
		Table   string `json:"table"`
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(info.Endpoint[0].Ticket.Ticket, &tk); err != nil || tk.Table != "alpha" || tk.Version != 3 {
		t.Fatalf("endpoint ticket %s: %v", info.Endpoint[0].Ticket.Ticket, err)
	}
	s.putEpoch(t, "alpha", "q", 2, idRange(15, 5))
	r, err := s.get(ctx, info.Endpoint[0].Ticket.Ticket)
	if err != nil || !slices.Equal(r.IDs, idRange(0, 15)) {
		t.Fatalf("DoGet of the endpoint ticket: %v, %v", r.IDs, err)
	}

	// GetFlightInfo (CMD) of an older version.
	info, err = s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "alpha", "version": 2}))
	if err != nil || info.TotalRecords != 10 {
		t.Fatalf("flight info of version 2: %v, %v", info, err)
	}

	// GetSchema.
	res, err := s.Client.GetSchema(ctx, pathDesc("beta"))
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := flight.DeserializeSchema(res.Schema, memory.DefaultAllocator); err != nil || !arrowschema.EqualIgnoringFieldIDs(sc, rowSchema) {
		t.Fatalf("GetSchema: %v, %v", sc, err)
	}

	// ListFlights: every table, with its latest version's row count.
	stream, err := s.Client.ListFlights(ctx, &flight.Criteria{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for {
		fi, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[fi.GetFlightDescriptor().GetPath()[0]] = fi.TotalRecords
	}
	if len(got) != 2 || got["alpha"] != 20 || got["beta"] != 3 {
		t.Fatalf("ListFlights %v", got)
	}
}

func TestListActions(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	stream, err := s.Client.ListActions(testCtx(t), &flight.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		a, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[a.Type] = a.Description
	}
	for _, name := range []string{"commit_epoch", "epoch_status", "create_table", "history", "table_stats"} {
		if len(got[name]) < 20 {
			t.Fatalf("action %q missing or undescribed: %v", name, got)
		}
	}
	// Every listed action is one the server runs: none answers "unknown action".
	for name := range got {
		_, err := s.action(testCtx(t), name, cmd{"table": "none"})
		if err != nil && codeOf(err) == codes.InvalidArgument && containsFold(err.Error(), "unknown action") {
			t.Fatalf("listed action %s is unknown to DoAction", name)
		}
	}
}

func TestPathDescriptorPlainAppend(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "q", 0, idRange(0, 5))
	put := func(ids ...[]int64) ack {
		recs := make([]arrow.RecordBatch, len(ids))
		for i := range ids {
			recs[i] = batch(ids[i]...)
			defer recs[i].Release()
		}
		a, err := s.put(testCtx(t), pathDesc("t"), rowSchema, recs...)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := put(idRange(5, 5), idRange(10, 5))
	wantAck(t, a, "committed", 3)
	if a.Rows != 10 || a.QueryID != "" || a.EpochID != nil {
		t.Fatalf("plain append ack %+v", a)
	}
	// No identity: sending the same data again appends it again.
	wantAck(t, put(idRange(5, 5)), "committed", 4)
	wantAck(t, put(), "empty", 0)
	s.wantIDs(t, "t", idRange(0, 15), idRange(5, 5))
	h := s.history(t, "t", 1)
	if _, ok := h[0].Properties[engine.PropQueryID]; ok || h[0].Operation != string(engine.OpAppend) {
		t.Fatalf("plain append transaction %+v", h[0])
	}
	// Plain appends do not disturb the epoch watermark.
	wantAck(t, s.putEpoch(t, "t", "q", 0, idRange(0, 5)), "duplicate", 2)
}

func TestCreateTableThenPutWithoutCreate(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	var created struct {
		Table   string `json:"table"`
		Version uint64 `json:"version"`
	}
	s.mustAction(t, "create_table", cmd{"table": "typed", "schema": []cmd{
		{"name": "id", "type": "int64", "nullable": false},
		{"name": "payload", "type": "utf8"},
		{"name": "ts", "type": "timestamp[us, tz=UTC]"},
		{"name": "score", "type": "float64"},
	}}, &created)
	if created.Table != "typed" || created.Version != 1 {
		t.Fatalf("create_table result %+v", created)
	}
	res, err := s.Client.GetSchema(testCtx(t), pathDesc("typed"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := flight.DeserializeSchema(res.Schema, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	want := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, nil)
	if !arrowschema.EqualIgnoringFieldIDs(sc, want) {
		t.Fatalf("schema\n got %v\nwant %v", sc, want)
	}

	// A stream of the table's schema, columns in another order, no "create".
	in := arrow.NewSchema([]arrow.Field{want.Field(3), want.Field(2), want.Field(1), want.Field(0)}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, in)
	for i := int64(0); i < 6; i++ {
		b.Field(0).(*array.Float64Builder).Append(float64(i) / 2)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000 + i))
		b.Field(2).(*array.StringBuilder).Append("p")
		b.Field(3).(*array.Int64Builder).Append(i)
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "typed", "query_id": "q", "epoch_id": 0}), in, rec)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", 2)
	r, err := s.get(testCtx(t), cmd{"table": "typed"})
	if err != nil {
		t.Fatal(err)
	}
	if !arrowschema.EqualIgnoringFieldIDs(r.Schema, want) || !slices.Equal(r.IDs, idRange(0, 6)) {
		t.Fatalf("read back: schema %v ids %v", r.Schema, r.IDs)
	}
	// An id declared nullable goes into the non-nullable column when it holds no null, and is
	// refused, naming the column, when it holds one.
	nullable := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		want.Field(1), want.Field(2), want.Field(3)}, nil)
	for epoch, null := range []bool{false, true} {
		err = s.putSchema(testCtx(t), t, cmd{"table": "typed", "query_id": "q", "epoch_id": 1 + epoch}, nullable, func(b *array.RecordBuilder) {
			if null {
				b.Field(0).(*array.Int64Builder).AppendNull()
			} else {
				b.Field(0).(*array.Int64Builder).Append(6)
			}
			b.Field(1).(*array.StringBuilder).Append("x")
			b.Field(2).(*array.TimestampBuilder).Append(1)
			b.Field(3).(*array.Float64Builder).Append(1)
		})
		if !null && err != nil {
			t.Fatalf("an id declared nullable, holding no null: %v", err)
		}
	}
	wantReason(t, err, codes.InvalidArgument, "SCHEMA_DATA_MISMATCH")
	wantCode(t, err, codes.InvalidArgument, `"id"`)
	if r, err := s.get(testCtx(t), cmd{"table": "typed"}); err != nil || !slices.Equal(r.IDs, idRange(0, 7)) || r.Schema.Field(0).Nullable {
		t.Fatalf("read back: %v, ids %v, schema %v", err, r.IDs, r.Schema)
	}
}

// TestDoGetFitsDefaultClientLimits: a client with gRPC's default 4 MiB receive limit (arrow-go's
// Flight client as constructed by NewClientWithMiddleware without options) must be able to read
// any table: DoGet has to keep each FlightData message under that limit, whatever the size of the
// fragments or rows per scan batch.
func TestDoGetFitsDefaultClientLimits(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
	pad := strings.Repeat("p", 1<<10)
	for i := int64(0); i < 6000; i++ { // ~6 MiB in one fragment
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.StringBuilder).Append(pad)
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	a, err := s.put(testCtx(t), cmdDesc(t, epochCmd("t", "q", 0)), rowSchema, rec)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", 2)

	c, err := flight.NewClientWithMiddleware(s.Addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plain := &flightConn{Addr: s.Addr, Client: c}
	r, err := plain.get(testCtx(t), cmd{"table": "t"})
	if err != nil {
		t.Fatalf("DoGet with default client limits: %v", err)
	}
	if !slices.Equal(r.IDs, idRange(0, 6000)) {
		t.Fatalf("read %d rows, want 6000", len(r.IDs))
	}
}
