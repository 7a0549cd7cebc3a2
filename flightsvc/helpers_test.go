package flightsvc_test

// Shared helpers of the Flight integration suite. Every test talks to a real server on a real
// loopback socket through arrow-go's Flight client: in-process (startServer) or as an OS process
// (startProcess, for kill -9 and several processes on one root).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/flightsvc/servertest"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) {
	code := storetest.Run(m) // a real S3 server for the tests that put a root on S3
	servertest.RemoveBinary()
	os.Exit(code)
}

// testLogger discards server logs unless FLIGHTSVC_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("FLIGHTSVC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// rowSchema is the schema the tests stream: an id that identifies every row, and a payload.
var rowSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// batch builds a rowSchema batch with the given ids; payload is "row-<id>".
func batch(ids ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", id))
	}
	return b.NewRecordBatch()
}

// idRange returns n consecutive ids starting at from.
func idRange(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// ack is the JSON app_metadata of a DoPut PutResult (and the result of commit_epoch).
type ack struct {
	Status  string `json:"status"`
	Table   string `json:"table"`
	QueryID string `json:"query_id"`
	EpochID *int64 `json:"epoch_id"`
	Version uint64 `json:"version"`
	Rows    int64  `json:"rows"`
	Stage   string `json:"stage"`
	Route   string `json:"route"`
	Warning string `json:"warning"`
}

// cmd is a DoPut command or an action body, encoded as JSON.
type cmd map[string]any

// epochCmd is an append-mode epoch command that creates the table on first write.
func epochCmd(table, query string, epoch int64) cmd {
	return cmd{"table": table, "query_id": query, "epoch_id": epoch, "create": true}
}

// cmdDesc returns a CMD descriptor; c is JSON-encoded unless it is already []byte.
func cmdDesc(t testing.TB, c any) *flight.FlightDescriptor {
	t.Helper()
	b, ok := c.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(c); err != nil {
			t.Fatal(err)
		}
	}
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}

func pathDesc(path ...string) *flight.FlightDescriptor {
	return &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path}
}

// newClient dials addr with arrow-go's Flight client.
func newClient(t testing.TB, addr string) flight.Client {
	t.Helper()
	c, err := flight.NewClientWithMiddleware(addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// flightConn is a Flight client on one server, in-process or not.
type flightConn struct {
	Addr   string
	Client flight.Client
}

// testServer is an in-process server on a loopback socket.
type testServer struct {
	flightConn
	Root string
	Srv  *flightsvc.Server
}

// startServer starts an in-process server. Empty cfg.Listen and cfg.Root get a free loopback port
// and a fresh temporary directory. The server stops (gracefully) when the test ends.
func startServer(t testing.TB, cfg flightsvc.Config) *testServer {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	if cfg.Sink.DefaultMaintenance == nil {
		// Most tests count versions (one per epoch); maintenance commits would add Rewrite
		// versions in the background. TestMaintenanceKeepsStreamingTablesSmall runs with it on.
		cfg.Sink.DefaultMaintenance = &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("NewServer: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("server did not stop within 15s")
		}
	})
	addr := srv.Addr().String()
	return &testServer{flightConn: flightConn{Addr: addr, Client: newClient(t, addr)}, Root: cfg.Root, Srv: srv}
}

// testCtx bounds one call.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// put sends one DoPut stream (desc, then batches of schema) the way a client does and returns the
// ack of its single PutResult, or the call's error (a gRPC status).
func (c *flightConn) put(ctx context.Context, desc *flight.FlightDescriptor, schema *arrow.Schema, batches ...arrow.RecordBatch) (ack, error) {
	stream, err := c.Client.DoPut(ctx)
	if err != nil {
		return ack{}, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(desc)
	for _, b := range batches {
		// A send fails (io.EOF) when the server has already answered, e.g. with an error for a
		// bad command; the answer itself comes from Recv below.
		if err := w.Write(b); err != nil {
			break
		}
	}
	w.Close()
	if err := stream.CloseSend(); err != nil {
		return ack{}, err
	}
	return recvAck(stream)
}

// recvAck reads the one PutResult of a DoPut and checks that the stream then ends.
func recvAck(stream flight.FlightService_DoPutClient) (ack, error) {
	res, err := stream.Recv()
	if err != nil {
		return ack{}, err
	}
	var a ack
	if err := json.Unmarshal(res.GetAppMetadata(), &a); err != nil {
		return ack{}, fmt.Errorf("PutResult app_metadata %q is not an ack: %w", res.GetAppMetadata(), err)
	}
	if extra, err := stream.Recv(); err != io.EOF {
		return a, fmt.Errorf("after the ack: got %v, %v; want io.EOF", extra, err)
	}
	return a, nil
}

// putCmd streams one batch per id list under command (JSON-encoded unless []byte).
func (c *flightConn) putCmd(ctx context.Context, t testing.TB, command any, batches ...[]int64) (ack, error) {
	t.Helper()
	recs := make([]arrow.RecordBatch, len(batches))
	for i, ids := range batches {
		recs[i] = batch(ids...)
		defer recs[i].Release()
	}
	return c.put(ctx, cmdDesc(t, command), rowSchema, recs...)
}

// mustPut is putCmd that fails the test on error.
func (c *flightConn) mustPut(t testing.TB, command any, batches ...[]int64) ack {
	t.Helper()
	a, err := c.putCmd(testCtx(t), t, command, batches...)
	if err != nil {
		t.Fatalf("DoPut %v: %v", command, err)
	}
	return a
}

// putEpoch lands epoch e of query q in table (append mode, creating the table) as one batch.
func (c *flightConn) putEpoch(t testing.TB, table, q string, e int64, ids []int64) ack {
	t.Helper()
	return c.mustPut(t, epochCmd(table, q, e), ids)
}

// wantAck checks an ack's status, and its version unless wantVersion is 0.
func wantAck(t testing.TB, a ack, status string, wantVersion uint64) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("ack status %q, want %q (ack %+v)", a.Status, status, a)
	}
	if wantVersion != 0 && a.Version != wantVersion {
		t.Fatalf("ack version %d, want %d (ack %+v)", a.Version, wantVersion, a)
	}
}

// readResult is what a DoGet returned.
type readResult struct {
	Schema   *arrow.Schema
	Rows     int64
	IDs      []int64  // sorted; nil if the id column was not read
	Payloads []string // in stream order; nil if the payload column was not read
}

// get reads a ticket (JSON-encoded unless []byte) to the end.
func (c *flightConn) get(ctx context.Context, tk any) (readResult, error) {
	b, ok := tk.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(tk); err != nil {
			return readResult{}, err
		}
	}
	stream, err := c.Client.DoGet(ctx, &flight.Ticket{Ticket: b})
	if err != nil {
		return readResult{}, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return readResult{}, err
	}
	defer rdr.Release()
	res := readResult{Schema: rdr.Schema()}
	// The id and payload columns are read when they have rowSchema's types; a table of any
	// other schema (the fuzzers create them) reads as rows only.
	idCol, payCol := -1, -1
	if js := rdr.Schema().FieldIndices("id"); len(js) == 1 && rdr.Schema().Field(js[0]).Type.ID() == arrow.INT64 {
		idCol, res.IDs = js[0], []int64{}
	}
	if js := rdr.Schema().FieldIndices("payload"); len(js) == 1 && rdr.Schema().Field(js[0]).Type.ID() == arrow.STRING {
		payCol, res.Payloads = js[0], []string{}
	}
	for rdr.Next() {
		rec := rdr.RecordBatch()
		res.Rows += rec.NumRows()
		if idCol >= 0 {
			res.IDs = append(res.IDs, rec.Column(idCol).(*array.Int64).Int64Values()...)
		}
		if payCol >= 0 {
			col := rec.Column(payCol).(*array.String)
			for i := 0; i < col.Len(); i++ {
				res.Payloads = append(res.Payloads, col.Value(i))
			}
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return readResult{}, err
	}
	slices.Sort(res.IDs)
	return res, nil
}

// readIDs returns the sorted ids of the latest version of table.
func (c *flightConn) readIDs(t testing.TB, table string) []int64 {
	t.Helper()
	r, err := c.get(testCtx(t), cmd{"table": table})
	if err != nil {
		t.Fatalf("DoGet %s: %v", table, err)
	}
	return r.IDs
}

// wantIDs checks that table holds exactly the given ids, each once.
func (c *flightConn) wantIDs(t testing.TB, table string, want ...[]int64) {
	t.Helper()
	var all []int64
	for _, w := range want {
		all = append(all, w...)
	}
	slices.Sort(all)
	got := c.readIDs(t, table)
	if !slices.Equal(got, all) {
		t.Fatalf("table %s: got %d rows, want %d (exactly once each)\n got: %s\nwant: %s",
			table, len(got), len(all), abbrev(got), abbrev(all))
	}
}

func abbrev(ids []int64) string {
	if len(ids) <= 40 {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("%v ... %v", ids[:20], ids[len(ids)-20:])
}

// action runs a DoAction and returns the body of its single result.
func (c *flightConn) action(ctx context.Context, typ string, body any) ([]byte, error) {
	return servertest.Action(ctx, c.Client, typ, body)
}

// mustAction runs an action and decodes its JSON result into out (unless out is nil).
func (c *flightConn) mustAction(t testing.TB, typ string, body, out any) {
	t.Helper()
	b, err := c.action(testCtx(t), typ, body)
	if err != nil {
		t.Fatalf("action %s %v: %v", typ, body, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("action %s result %s: %v", typ, b, err)
		}
	}
}

// tableStats is the result of the table_stats action.
type tableStats struct {
	Table     string                               `json:"table"`
	Version   uint64                               `json:"version"`
	Rows      int64                                `json:"rows"`
	Fragments int                                  `json:"fragments"`
	Streams   map[string]flightsvc.StreamWatermark `json:"streams"`
}

// statusJSON decodes the server's /status.json (its HTTPListen must be set) into v and returns
// the body.
func (s *testServer) statusJSON(t testing.TB, v any) []byte {
	t.Helper()
	resp, err := http.Get("http://" + s.Srv.HTTPAddr().String() + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	return body
}

func (c *flightConn) stats(t testing.TB, table string) tableStats {
	t.Helper()
	var s tableStats
	c.mustAction(t, "table_stats", cmd{"table": table}, &s)
	return s
}

func (c *flightConn) version(t testing.TB, table string) uint64 {
	t.Helper()
	return c.stats(t, table).Version
}

// history returns up to limit transactions of table, newest first.
func (c *flightConn) history(t testing.TB, table string, limit int) []flightsvc.HistoryEntry {
	t.Helper()
	var h flightsvc.HistoryResult
	c.mustAction(t, "history", cmd{"table": table, "limit": limit}, &h)
	return h.Versions
}

// wantDenseHistory checks that table's versions run 1..latest with no gap, newest first.
func (c *flightConn) wantDenseHistory(t testing.TB, table string) []flightsvc.HistoryEntry {
	t.Helper()
	latest := c.version(t, table)
	h := c.history(t, table, int(latest)+5)
	if uint64(len(h)) != latest {
		t.Fatalf("history has %d entries, latest version is %d", len(h), latest)
	}
	for i, e := range h {
		if want := latest - uint64(i); e.Version != want || e.Missing {
			t.Fatalf("history[%d] = version %d (missing %v), want version %d", i, e.Version, e.Missing, want)
		}
	}
	return h
}

// wantCode checks that err is a gRPC status with code, a flight-sink ErrorInfo reason (every
// error status the server makes carries one) and, if given, a message containing each of the substrings
// (case-insensitive).
func wantCode(t testing.TB, err error, code codes.Code, substrs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status, want %v", err, code)
	}
	if st.Code() != code {
		t.Fatalf("got %v (%s), want %v", st.Code(), st.Message(), code)
	}
	// The one status without a reason is gRPC's own refusal of a message over
	// --max-message-bytes: gRPC sends it before the handler sees the message (docs/protocol.md).
	grpcLimit := code == codes.ResourceExhausted && strings.HasPrefix(st.Message(), "grpc: received message larger than max")
	if reasonOf(err) == "" && !grpcLimit {
		t.Fatalf("status %v (%s) carries no flight-sink ErrorInfo reason", st.Code(), st.Message())
	}
	for _, s := range substrs {
		if !strings.Contains(strings.ToLower(st.Message()), strings.ToLower(s)) {
			t.Fatalf("message %q does not mention %q", st.Message(), s)
		}
	}
}

// ---- servers as OS processes ----

// procServer is a `flight-sink serve` process (maintenance off) and a client on it.
type procServer struct {
	flightConn
	Root string
	proc *servertest.Process
}

// startProcess runs a server process on root and connects to it. It is stopped when the test ends.
func startProcess(t testing.TB, root string, env ...string) *procServer {
	t.Helper()
	proc, err := servertest.Start(t, []string{"--root", root, "--maintenance", "off"}, env, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	p := &procServer{Root: root, proc: proc}
	p.Addr = proc.Addr
	p.Client = newClient(t, p.Addr)
	return p
}

// stop ends the process: SIGTERM (graceful), then SIGKILL after 10 s.
func (p *procServer) stop() { p.proc.Stop() }

// kill9 kills the process with SIGKILL: no shutdown code runs.
func (p *procServer) kill9() { p.proc.Kill9() }

// codeOf returns the gRPC code of err (Unknown for a non-status error).
func codeOf(err error) codes.Code { return status.Code(err) }

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
