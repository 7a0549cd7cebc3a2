package model

// Talking Flight to the servers: epochs out (DoPut), actions, and reads back (DoGet,
// GetFlightInfo), every row in the model's canonical form.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
)

// server is one `flight-sink serve` process on the run's root and a Flight client on it.
type server struct {
	*servertest.Process
	name   string
	client flight.Client
}

// startServer launches a server on root and connects to it.
// maintenance is the servers' --maintenance mode.
func startServer(tb testing.TB, name, root, maintenance string) (*server, error) {
	p, err := servertest.Start(tb, []string{"--root", root, "--log-level", "info", "--shutdown-grace", "2s",
		"--memwal-lease-ttl", "3s", "--maintenance", maintenance}, nil, 60*time.Second)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	cl, err := flight.NewClientWithMiddleware(p.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		p.Kill9()
		return nil, fmt.Errorf("dial %s: %w", p.Addr, err)
	}
	return &server{Process: p, name: name, client: cl}, nil
}

// ack is a DoPut acknowledgement.
type ack struct {
	Status  string `json:"status"`
	EpochID *int64 `json:"epoch_id"`
	Version uint64 `json:"version"`
	Rows    int64  `json:"rows"`
	Route   string `json:"route"`
}

// doPut streams rec under command and returns the ack.
func doPut(ctx context.Context, c flight.Client, command any, rec arrow.RecordBatch) (ack, error) {
	cmd, err := json.Marshal(command)
	if err != nil {
		return ack{}, err
	}
	stream, err := c.DoPut(ctx)
	if err != nil {
		return ack{}, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rec.Schema()))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	if rec.NumRows() > 0 {
		_ = w.Write(rec) // an early answer (an error) is read below
	}
	w.Close()
	if err := stream.CloseSend(); err != nil {
		return ack{}, err
	}
	res, err := stream.Recv()
	if err != nil {
		return ack{}, err
	}
	var a ack
	if err := json.Unmarshal(res.GetAppMetadata(), &a); err != nil {
		return ack{}, fmt.Errorf("PutResult app_metadata %q is not an ack: %w", res.GetAppMetadata(), err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return a, fmt.Errorf("after the ack: %w", err)
		}
	}
	return a, nil
}

// action runs a DoAction and decodes its result into out (when not nil).
func action(ctx context.Context, c flight.Client, typ string, body, out any) error {
	b, err := servertest.Action(ctx, c, typ, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s result %s: %w", typ, b, err)
	}
	return nil
}

// readResult is what a read returned: its schema and its rows, canonical, by column name.
type readResult struct {
	schema *arrow.Schema
	rows   []row
}

// canonicalRows appends the rows of rec to out, each a column name to canonical value map.
func canonicalRows(rec arrow.RecordBatch, out []row) []row {
	for i := 0; i < int(rec.NumRows()); i++ {
		r := row{}
		for j, f := range rec.Schema().Fields() {
			r[f.Name] = canonical(rec.Column(j), i)
		}
		out = append(out, r)
	}
	return out
}

// doGet reads a ticket whole.
func doGet(ctx context.Context, c flight.Client, ticket []byte) (readResult, error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return readResult{}, err
	}
	rdr, err := flight.NewRecordReader(stream, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return readResult{}, err
	}
	defer rdr.Release()
	res := readResult{schema: rdr.Schema()}
	for rdr.Next() {
		res.rows = canonicalRows(rdr.RecordBatch(), res.rows)
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return readResult{}, err
	}
	return res, nil
}

// readIPCFile reads an Arrow IPC file (what the Python reader writes) whole.
func readIPCFile(path string) (readResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return readResult{}, err
	}
	defer f.Close()
	rdr, err := ipc.NewFileReader(f)
	if err != nil {
		return readResult{}, fmt.Errorf("%s: %w", path, err)
	}
	defer rdr.Close()
	res := readResult{schema: rdr.Schema()}
	for i := 0; i < rdr.NumRecords(); i++ {
		rec, err := rdr.RecordBatchAt(i)
		if err != nil {
			return readResult{}, err
		}
		res.rows = canonicalRows(rec, res.rows)
		rec.Release()
	}
	return res, nil
}

// buildBatch builds a record batch of the columns cols (in that order) from one JSON value per
// row per column, in the types a stream sends.
func buildBatch(cols []column, values [][]string, n int) (arrow.RecordBatch, error) {
	fields := make([]arrow.Field, len(cols))
	arrs := make([]arrow.Array, len(cols))
	defer func() {
		for _, a := range arrs {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, c := range cols {
		fields[i] = arrow.Field{Name: c.name, Type: c.typ.send, Nullable: c.nullable}
		a, err := buildColumn(c.typ.send, values[i])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.name, err)
		}
		arrs[i] = a
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(n)), nil
}
