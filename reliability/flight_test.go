package reliability

// Talking Flight to a server: epochs out (DoPut), actions, and a table back (DoGet).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// epochSchema is what the producers stream: every row names the query and epoch that wrote it, so
// a check can say which epoch was lost or landed twice.
var epochSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "q", Type: arrow.BinaryTypes.String},
	{Name: "epoch", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// epochKey names one epoch of one query.
type epochKey struct {
	Q string
	E int64
}

func (k epochKey) String() string { return fmt.Sprintf("%s/%d", k.Q, k.E) }

// epochRows is how many rows epoch e of q holds: the same on every resend, 1..max.
func epochRows(q string, e int64, max int) int {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", q, e)
	return 1 + int(h.Sum64()%uint64(max))
}

// rowID is the id of row i of epoch e of producer p: unique across the whole test.
func rowID(p int, e int64, i int) int64 { return int64(p)<<40 | e<<16 | int64(i) }

// epochBatch builds epoch e of query q (producer p): the same rows every time it is asked for.
func epochBatch(p int, q string, e int64, maxRows int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, epochSchema)
	defer b.Release()
	n := epochRows(q, e, maxRows)
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(rowID(p, e, i))
		b.Field(1).(*array.StringBuilder).Append(q)
		b.Field(2).(*array.Int64Builder).Append(e)
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d-%d", q, e, i))
	}
	return b.NewRecordBatch()
}

// ack is a DoPut acknowledgement (and the result of commit_epoch).
type ack struct {
	Status  string `json:"status"`
	Table   string `json:"table"`
	QueryID string `json:"query_id"`
	EpochID *int64 `json:"epoch_id"`
	Version uint64 `json:"version"`
	Rows    int64  `json:"rows"`
	Stage   string `json:"stage"`
	Route   string `json:"route"`
}

// doPut streams batches under a CMD descriptor and returns the single ack.
func doPut(ctx context.Context, c flight.Client, command any, batches ...arrow.RecordBatch) (ack, error) {
	cmd, err := json.Marshal(command)
	if err != nil {
		return ack{}, err
	}
	stream, err := c.DoPut(ctx)
	if err != nil {
		return ack{}, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(epochSchema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	for _, b := range batches {
		if err := w.Write(b); err != nil {
			break // the server answered early (an error); Recv below says what
		}
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
	// Drain to the end so the stream's status is read.
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

// storedRow is one row read back.
type storedRow struct {
	ID    int64
	Key   epochKey
	Valid bool // the payload is the one the producer wrote for the id
}

// readTable reads the latest version of table (with its MemWAL rows) through DoGet.
func readTable(ctx context.Context, c flight.Client, table string) ([]storedRow, error) {
	tk, err := json.Marshal(map[string]any{"table": table})
	if err != nil {
		return nil, err
	}
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: tk})
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	idx := func(name string) int {
		if js := rdr.Schema().FieldIndices(name); len(js) == 1 {
			return js[0]
		}
		return -1
	}
	ic, qc, ec, pc := idx("id"), idx("q"), idx("epoch"), idx("payload")
	if ic < 0 || qc < 0 || ec < 0 || pc < 0 {
		return nil, fmt.Errorf("table %s has schema %s, want the epoch schema", table, rdr.Schema())
	}
	var out []storedRow
	for rdr.Next() {
		rec := rdr.RecordBatch()
		ids := rec.Column(ic).(*array.Int64)
		qs := rec.Column(qc).(*array.String)
		es := rec.Column(ec).(*array.Int64)
		ps := rec.Column(pc).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			k := epochKey{Q: qs.Value(i), E: es.Value(i)}
			id := ids.Value(i)
			want := fmt.Sprintf("%s-%d-%d", k.Q, k.E, id&0xffff)
			out = append(out, storedRow{ID: id, Key: k, Valid: !ps.IsNull(i) && ps.Value(i) == want})
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return out, nil
}

// retryable reports whether a call failed in a way a crash or restart explains (the server died,
// was not up yet, or answered "try again"), as opposed to a request the server refused.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown,
		codes.ResourceExhausted:
		return true
	}
	return false
}
