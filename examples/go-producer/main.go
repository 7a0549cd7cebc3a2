// Command go-producer streams epochs into a flight-sink server the way a streaming engine would:
// it sends epochs 0..N-1, replays the last one as if after a crash (the server answers
// "duplicate" and writes nothing), and reads the table back with DoGet.
//
//	make run                           # in one terminal
//	go run ./examples/go-producer      # in another
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8815", "flight-sink address")
	table := flag.String("table", "go_events", "table to write (its own name, so the examples run in any order against one server)")
	query := flag.String("query-id", "go-producer", "streaming query id")
	epochs := flag.Int("epochs", 5, "epochs to send")
	rows := flag.Int("rows", 1000, "rows per epoch")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *addr, *table, *query, *epochs, *rows); err != nil {
		fmt.Fprintf(os.Stderr, "go-producer: %v%s\n", err, hint(err, *addr)) // one line: the server's status message names the cause
		os.Exit(1)
	}
}

// hint is what to do about an error that says the server cannot be reached, else "".
func hint(err error, addr string) string {
	if status.Code(err) == codes.Unavailable {
		return fmt.Sprintf(" (is a flight-sink server listening on %s? start one with `make run`, or pass -addr)", addr)
	}
	return ""
}

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "epoch", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload", Type: arrow.BinaryTypes.String},
}, nil)

func epochBatch(epoch int64, rows int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < rows; i++ {
		b.Field(0).(*array.Int64Builder).Append(epoch*int64(rows) + int64(i))
		b.Field(1).(*array.Int64Builder).Append(epoch)
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("event %d of epoch %d", i, epoch))
	}
	return b.NewRecordBatch()
}

// ack is the JSON the server puts in each PutResult.
type ack struct {
	Status  string `json:"status"`
	Version uint64 `json:"version"`
	Rows    int64  `json:"rows"`
}

// putEpoch sends one epoch as one DoPut and returns the server's acknowledgement.
func putEpoch(ctx context.Context, c flight.Client, table, query string, epoch int64, rec arrow.RecordBatch) (ack, error) {
	cmd, _ := json.Marshal(map[string]any{"table": table, "query_id": query, "epoch_id": epoch, "mode": "append", "create": true})
	stream, err := c.DoPut(ctx)
	if err != nil {
		return ack{}, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	if err := w.Write(rec); err != nil {
		return ack{}, err
	}
	if err := w.Close(); err != nil {
		return ack{}, err
	}
	if err := stream.CloseSend(); err != nil {
		return ack{}, err
	}
	res, err := stream.Recv()
	if err != nil {
		return ack{}, err // the server's gRPC status: InvalidArgument, NotFound, ...
	}
	var a ack
	if err := json.Unmarshal(res.AppMetadata, &a); err != nil {
		return ack{}, err
	}
	for { // read to the end of the call
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	return a, nil
}

func run(ctx context.Context, out io.Writer, addr, table, query string, epochs, rows int) error {
	c, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer c.Close()
	var last arrow.RecordBatch
	for e := 0; e < epochs; e++ {
		rec := epochBatch(int64(e), rows)
		a, err := putEpoch(ctx, c, table, query, int64(e), rec)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", e, err)
		}
		fmt.Fprintf(out, "epoch %d: %s at version %d (%d rows)\n", e, a.Status, a.Version, a.Rows)
		if last != nil {
			last.Release()
		}
		last = rec
	}
	if last != nil {
		defer last.Release()
		// Replay the last epoch with the same data, as Spark does after a crash.
		a, err := putEpoch(ctx, c, table, query, int64(epochs-1), last)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		fmt.Fprintf(out, "replay of epoch %d: %s (version %d)\n", epochs-1, a.Status, a.Version)
	}
	ticket, _ := json.Marshal(map[string]any{"table": table})
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return err
	}
	defer rdr.Release()
	var total int64
	for rdr.Next() {
		total += rdr.RecordBatch().NumRows()
	}
	if err := rdr.Err(); err != nil && err != io.EOF {
		return err
	}
	fmt.Fprintf(out, "table %s holds %d rows\n", table, total)
	return nil
}
