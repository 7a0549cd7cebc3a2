package httpcheck

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/streaming"
)

// putWith sends one epoch of ids with an arbitrary command and returns the ack status.
func putWith(t *testing.T, c flight.Client, command map[string]any, ids ...int64) string {
	t.Helper()
	stream, w := openPut(t, c, command, ids...)
	return closePut(t, stream, w)
}

// openPut starts a DoPut with command and sends one batch of ids, leaving the stream open.
func openPut(t *testing.T, c flight.Client, command map[string]any, ids ...int64) (flight.FlightService_DoPutClient, *flight.Writer) {
	t.Helper()
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues(ids, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(ids)))
	defer rec.Release()
	cmd, _ := json.Marshal(command)
	stream, err := c.DoPut(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	return stream, w
}

// closePut ends a DoPut openPut started and returns the ack status.
func closePut(t *testing.T, stream flight.FlightService_DoPutClient, w *flight.Writer) string {
	t.Helper()
	w.Close()
	_ = stream.CloseSend()
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var ack struct{ Status string }
	_ = json.Unmarshal(res.AppMetadata, &ack)
	return ack.Status
}

// The status page shows MemWAL backlog per shard and the table's recent maintenance runs; a
// maintenance run that did something is one INFO line with its steps.
func TestStatusShowsMemWALAndMaintenance(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logBuffer{}
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir(),
		Logger: logs.logger(), Sink: streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceInline}}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	c, err := flight.NewClientWithMiddleware(srv.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for e := int64(0); e < 20; e++ { // 16 small fragments make inline maintenance compact
		putWith(t, c, map[string]any{"table": "maintained", "query_id": "q", "epoch_id": e, "create": true}, e)
	}
	putWith(t, c, map[string]any{"table": "fast", "query_id": "q", "epoch_id": 0, "create": map[string]any{"memwal": map[string]any{"shards": 1}}}, 1, 2, 3)
	page := get(t, "http://"+srv.HTTPAddr().String()+"/status")
	for _, want := range []string{"Table maintained", "recent maintenance", "compaction", "Table fast", "MemWAL shard", `<td class="num">3</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("/status lacks %q:\n%s", want, page)
		}
	}
	compactions := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct {
			Level, Msg, Table string
			Ran               []string
			Compaction        *struct {
				FragmentsRemoved int `json:"fragments_removed"`
			}
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "table maintenance run" || rec.Level != "INFO" {
			continue
		}
		if rec.Table == "" || len(rec.Ran) == 0 {
			t.Errorf("an INFO maintenance line without its table or steps: %s", line)
		}
		if rec.Compaction != nil && rec.Compaction.FragmentsRemoved > 0 {
			compactions++
		}
	}
	if compactions == 0 {
		t.Errorf("no INFO \"table maintenance run\" line reports the compaction:\n%s", logs)
	}
}
