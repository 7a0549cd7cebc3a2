package flightsvc_test

// The Arrow type policy over a real server (engine/arrowschema/types.go): every Arrow type id, on the direct
// and the MemWAL route, either lands and reads back equal (after its documented conversion)
// through DoGet, flush_memwal, the fold and compaction, or is refused with InvalidArgument naming
// the column before any table or file exists.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/streaming"
)

// typeSamples returns a sample of every Arrow type id plus the nested cases, failing the test
// when an id has no sample.
func typeSamples(t *testing.T) []typetest.Sample {
	t.Helper()
	byID := typetest.ByID()
	var out []typetest.Sample
	for _, r := range arrowschema.TypeRules() {
		s, ok := byID[r.ID]
		if !ok {
			t.Fatalf("no sample of Arrow type id %s", r.ID)
		}
		out = append(out, s)
	}
	return append(out, typetest.Nested()...)
}

// typedBatch is a batch of id (epoch*10 + row) and column c holding the sample's rows.
func typedBatch(t *testing.T, s typetest.Sample, epoch int64) arrow.RecordBatch {
	t.Helper()
	c, err := s.Rows(s.Type)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	defer ib.Release()
	for i := 0; i < c.Len(); i++ {
		ib.Append(epoch*10 + int64(i))
	}
	id := ib.NewArray()
	defer id.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: s.Type, Nullable: true}}, nil)
	return array.NewRecordBatch(sc, []arrow.Array{id, c}, int64(c.Len()))
}

// readTyped reads the table and checks that it holds exactly the rows of epochs, column c equal
// to the sample's rows as the stored type.
func readTyped(t *testing.T, c *flightConn, table string, s typetest.Sample, stored arrow.DataType, epochs []int64, when string) {
	t.Helper()
	want, err := s.Rows(stored)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	stream, err := c.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: []byte(fmt.Sprintf(`{"table": %q}`, table))})
	if err != nil {
		t.Fatalf("%s: DoGet: %v", when, err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatalf("%s: DoGet: %v", when, err)
	}
	defer rdr.Release()
	if got := rdr.Schema().Field(1).Type; !arrowschema.SameType(got, stored) {
		t.Fatalf("%s: column c read as %s, want %s", when, got, stored)
	}
	// The read type carries the table's field ids on nested fields, which array.Equal of a
	// large_list compares: relabel the expected values with them.
	rel, err := arrowschema.ConformColumns(arrow.NewSchema([]arrow.Field{rdr.Schema().Field(1)}, nil), []arrow.Array{want}, int64(want.Len()))
	if err != nil {
		t.Fatal(err)
	}
	defer rel.Release()
	wantRel := rel.Column(0)
	var ids []int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		idc := rec.Column(0).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			id := idc.Value(i)
			ids = append(ids, id)
			got := array.NewSlice(rec.Column(1), int64(i), int64(i+1))
			exp := array.NewSlice(wantRel, id%10, id%10+1)
			if !array.Equal(got, exp) {
				t.Errorf("%s: row %d: c = %v, want %v", when, id, got, exp)
			}
			got.Release()
			exp.Release()
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s: DoGet: %v", when, err)
	}
	var wantIDs []int64
	for _, e := range epochs {
		for i := int64(0); i < typetest.Len; i++ {
			wantIDs = append(wantIDs, e*10+i)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if fmt.Sprint(ids) != fmt.Sprint(wantIDs) {
		t.Fatalf("%s: ids %v, want %v", when, ids, wantIDs)
	}
}

// tableFiles lists the files under a table's directory.
func tableFiles(t *testing.T, root, table string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, table), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func TestArrowTypes(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for _, route := range []string{"direct", "memwal"} {
		for _, smp := range typeSamples(t) {
			t.Run(route+"/"+smp.Name, func(t *testing.T) {
				table := route + "-" + smp.Name
				create := any(true)
				if route == "memwal" {
					create = cmd{"memwal": cmd{"shards": 1}}
				}
				epochCmd := func(e int64, r string) cmd {
					return cmd{"table": table, "query_id": "q", "epoch_id": e, "create": create, "route": r}
				}
				put := func(e int64, r string) (ack, error) {
					rec := typedBatch(t, smp, e)
					defer rec.Release()
					return s.put(testCtx(t), cmdDesc(t, epochCmd(e, r)), rec.Schema(), rec)
				}
				inSchema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: smp.Type, Nullable: true}}, nil)
				stored, policyErr := arrowschema.StoredSchema(inSchema)
				a, err := put(1, "auto")
				if policyErr != nil {
					wantCode(t, err, codes.InvalidArgument, `"c`, "send")
					if files := tableFiles(t, s.Root, table); len(files) > 0 {
						t.Fatalf("a refused type left files behind: %v", files)
					}
					_, err = s.Client.GetFlightInfo(testCtx(t), pathDesc(table))
					wantCode(t, err, codes.NotFound)
					return
				}
				if err != nil {
					t.Fatalf("put: %v", err)
				}
				wantAck(t, a, "committed", 0)
				st := stored.Field(1).Type
				for e := int64(2); e <= 3; e++ {
					if _, err := put(e, "auto"); err != nil {
						t.Fatalf("put epoch %d: %v", e, err)
					}
				}
				epochs := []int64{1, 2, 3}
				readTyped(t, &s.flightConn, table, smp, st, epochs, "after the puts")
				if route == "memwal" {
					s.mustAction(t, "flush_memwal", cmd{"table": table}, nil)
					readTyped(t, &s.flightConn, table, smp, st, epochs, "after flush_memwal")
					s.mustAction(t, "fold_memwal_shard", cmd{"table": table}, nil)
					readTyped(t, &s.flightConn, table, smp, st, epochs, "after the fold")
					if _, err := put(4, "direct"); err != nil { // a second base fragment to compact with
						t.Fatalf("put epoch 4: %v", err)
					}
					epochs = append(epochs, 4)
				}
				var rep flightsvc.CompactResult
				s.mustAction(t, "compact", cmd{"table": table}, &rep)
				if rep.FragmentsRemoved == 0 {
					t.Fatalf("compaction rewrote nothing: %+v", rep)
				}
				readTyped(t, &s.flightConn, table, smp, st, epochs, "after compaction")
			})
		}
	}
}

// TestCreateOnPutThatFailsCreatesNothing: a create-on-put whose stream fails - a refused type, a
// client that cancels after the first batch, a corrupt second batch - leaves no table behind
// (GetFlightInfo NotFound, no manifest and no data file), and a good create-on-put of the same
// name then works.
func TestCreateOnPutThatFailsCreatesNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, route := range []string{"direct", "memwal"} {
		create := any(true)
		if route == "memwal" {
			create = cmd{"memwal": cmd{"shards": 1}}
		}
		createCmd := func(table string) cmd {
			return cmd{"table": table, "query_id": "q", "epoch_id": 1, "create": create}
		}
		for _, tc := range []struct {
			name string
			put  func(t *testing.T, s *flightConn, table string) error
		}{
			{"refused type", func(t *testing.T, s *flightConn, table string) error {
				rec := typedBatch(t, typetest.ByID()[arrow.DENSE_UNION], 1)
				defer rec.Release()
				_, err := s.put(testCtx(t), cmdDesc(t, createCmd(table)), rec.Schema(), rec)
				wantCode(t, err, codes.InvalidArgument, `"c"`, "union")
				return nil
			}},
			{"null-type column", func(t *testing.T, s *flightConn, table string) error {
				rec := typedBatch(t, typetest.ByID()[arrow.NULL], 1)
				defer rec.Release()
				_, err := s.put(testCtx(t), cmdDesc(t, createCmd(table)), rec.Schema(), rec)
				wantCode(t, err, codes.InvalidArgument, `"c"`, "null")
				return nil
			}},
			{"cancelled after the first batch", func(t *testing.T, s *flightConn, table string) error {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stream, err := s.Client.DoPut(ctx)
				if err != nil {
					return err
				}
				w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
				w.SetFlightDescriptor(cmdDesc(t, createCmd(table)))
				b := batch(idRange(0, 100)...)
				defer b.Release()
				if err := w.Write(b); err != nil {
					return err
				}
				cancel()
				if _, err := stream.Recv(); err == nil {
					t.Fatal("cancelled create-on-put acknowledged")
				}
				return nil
			}},
			{"corrupt second batch", func(t *testing.T, s *flightConn, table string) error {
				stream, err := s.Client.DoPut(testCtx(t))
				if err != nil {
					return err
				}
				cs := &corruptingStream{FlightService_DoPutClient: stream, mutate: func(i int, fd *flight.FlightData) {
					if i == 2 { // 0: schema, 1: a good batch, 2: the truncated one
						fd.DataBody = fd.DataBody[:len(fd.DataBody)/2]
					}
				}}
				w := flight.NewRecordWriter(cs, ipc.WithSchema(rowSchema))
				w.SetFlightDescriptor(cmdDesc(t, createCmd(table)))
				for _, ids := range [][]int64{idRange(0, 50), idRange(50, 50)} {
					b := batch(ids...)
					_ = w.Write(b)
					b.Release()
				}
				w.Close()
				_ = stream.CloseSend()
				_, err = recvAck(stream)
				if err == nil {
					t.Fatal("create-on-put with a corrupt batch acknowledged")
				}
				return nil
			}},
		} {
			table := route + "-" + strings.ReplaceAll(tc.name, " ", "-")
			// A server of its own, stopped before the check: a graceful stop waits for the failed
			// DoPut's handler, so whatever it would have created exists by then.
			ctx, cancel := context.WithCancel(context.Background())
			srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: root, Logger: testLogger(),
				ShutdownGrace: 10 * time.Second, Sink: startServerDefaults()})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx) }()
			conn := &flightConn{Addr: srv.Addr().String(), Client: newClient(t, srv.Addr().String())}
			if err := tc.put(t, conn, table); err != nil {
				t.Fatalf("%s/%s: %v", route, tc.name, err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if files := tableFiles(t, root, table); len(files) > 0 {
				t.Fatalf("%s/%s: the failed create-on-put left files: %v", route, tc.name, files)
			}
			s := startServer(t, flightsvc.Config{Root: root})
			_, err = s.Client.GetFlightInfo(testCtx(t), pathDesc(table))
			wantCode(t, err, codes.NotFound)
			wantAck(t, s.mustPut(t, createCmd(table), idRange(0, 5)), "committed", 0)
			s.wantIDs(t, table, idRange(0, 5))
		}
	}
}

// startServerDefaults is the sink configuration startServer gives its servers.
func startServerDefaults() streaming.Options {
	return streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}}
}

// TestLargeListReadsBack: a large_list<int64> table (and large_utf8, large_binary, a list of
// lists) reads back after 20 epochs, through compaction and after a restart. Before, every DoGet
// and the compaction panicked in a goroutine and killed the server (pqarrow reads large_list's
// child as "element", and stamping the table's "item" type on it panicked).
func TestLargeListReadsBack(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	samples := []typetest.Sample{
		{Name: "large_list", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int64), JSON: `[[1,null],null,[]]`},
		{Name: "large_utf8", Type: arrow.BinaryTypes.LargeString, JSON: `["a",null,"b"]`},
		{Name: "large_binary", Type: arrow.BinaryTypes.LargeBinary, JSON: `["YQ==",null,""]`},
		{Name: "list_of_large_list", Type: arrow.ListOf(arrow.LargeListOf(arrow.PrimitiveTypes.Int64)), JSON: `[[[1],null],null,[]]`},
	}
	var epochs []int64
	for e := int64(1); e <= 20; e++ {
		epochs = append(epochs, e)
	}
	s := startServer(t, flightsvc.Config{Root: root})
	for _, smp := range samples {
		for _, e := range epochs {
			rec := typedBatch(t, smp, e)
			_, err := s.put(testCtx(t), cmdDesc(t, epochCmd(smp.Name, "q", e)), rec.Schema(), rec)
			rec.Release()
			if err != nil {
				t.Fatalf("%s: put epoch %d: %v", smp.Name, e, err)
			}
		}
		readTyped(t, &s.flightConn, smp.Name, smp, smp.Type, epochs, smp.Name+" after 20 epochs")
		s.mustAction(t, "compact", cmd{"table": smp.Name}, nil)
		readTyped(t, &s.flightConn, smp.Name, smp, smp.Type, epochs, smp.Name+" after compaction")
	}
	s2 := startServer(t, flightsvc.Config{Root: root}) // the store reopened by another server
	for _, smp := range samples {
		readTyped(t, &s2.flightConn, smp.Name, smp, smp.Type, epochs, smp.Name+" after a restart")
	}
}
