package flightsvc_test

// Limits of a DoPut stream that hold against a client that plays against them: dictionaries
// count toward --max-put-bytes, idle streams give their slot back, and nesting is bounded
// alike at create and at read.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestPutByteLimitCountsDictionaries: a stream whose bytes are nearly all dictionary values
// (1 MB of them behind 400 bytes of indices) is past a 64 KiB --max-put-bytes. Before, only the
// indices counted and it landed.
func TestPutByteLimitCountsDictionaries(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxPutBytes: 64 << 10})
	wantAck(t, s.putEpoch(t, "t", "good", 0, idRange(0, 5)), "committed", 2)
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "tag", Type: dt, Nullable: true}}, nil)
	err := s.putSchema(testCtx(t), t, epochCmd("dict", "q", 0), sc, func(b *array.RecordBuilder) {
		pad := strings.Repeat("d", 10_000)
		for i := 0; i < 100; i++ {
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString(fmt.Sprint(pad, i)); err != nil {
				t.Fatal(err)
			}
		}
	})
	wantCode(t, err, codes.ResourceExhausted, "max-put-bytes")
	wantNoRows(t, s, "dict")
	wantAck(t, s.putEpoch(t, "t", "good", 1, idRange(5, 5)), "committed", 3)
}

// TestPutIdleTimeoutFreesSlots: with --max-concurrent-puts 2, a stream that never sends a
// message and one that stops after its schema each fail with DeadlineExceeded once
// --put-idle-timeout passes, commit nothing, and a third put then lands. Before, both held
// their slot for as long as they liked.
func TestPutIdleTimeoutFreesSlots(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxConcurrentPuts: 2, PutIdleTimeout: 200 * time.Millisecond})
	wantAck(t, s.putEpoch(t, "t", "good", 0, idRange(0, 5)), "committed", 2)
	ctx := testCtx(t)
	silent, err := s.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := s.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stalled, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, epochCmd("t", "stalled", 0)))
	b := batch(100, 101)
	defer b.Release()
	if err := w.Write(b); err != nil { // the schema and one batch, then nothing
		t.Fatal(err)
	}
	_, err = recvAck(silent)
	wantCode(t, err, codes.DeadlineExceeded, "put-idle-timeout", "first message")
	_, err = recvAck(stalled)
	wantCode(t, err, codes.DeadlineExceeded, "put-idle-timeout", "next message")
	if v := s.version(t, "t"); v != 2 {
		t.Fatalf("an idle stream committed: version %d", v)
	}
	wantAck(t, s.putEpoch(t, "t", "good", 1, idRange(5, 5)), "committed", 3)
	s.wantIDs(t, "t", idRange(0, 10))
}

// TestCreateNestingLimit: a table whose schema nests arrowschema.MaxSchemaDepth levels is created by
// a DoPut, lands its rows, and another server on the root (which reads the stored schema
// afresh, as after a restart) reads them back. One level more is InvalidArgument at create and
// creates nothing. Before, a schema nested 100 deep was created and then unreadable.
func TestCreateNestingLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	nested := func(levels int) (*arrow.Schema, string) {
		var dt arrow.DataType = arrow.PrimitiveTypes.Int64
		js := "7"
		for i := 0; i < levels; i++ {
			dt = arrow.StructOf(arrow.Field{Name: "f", Type: dt, Nullable: true})
			js = `{"f": ` + js + `}`
		}
		return arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "deep", Type: dt, Nullable: true}}, nil), js
	}
	put := func(table string, levels int) error {
		sc, js := nested(levels)
		id, _, err := array.FromJSON(memory.DefaultAllocator, sc.Field(0).Type, strings.NewReader("[1]"))
		if err != nil {
			t.Fatal(err)
		}
		defer id.Release()
		deep, _, err := array.FromJSON(memory.DefaultAllocator, sc.Field(1).Type, strings.NewReader("["+js+"]"))
		if err != nil {
			t.Fatal(err)
		}
		defer deep.Release()
		rec := array.NewRecordBatch(sc, []arrow.Array{id, deep}, 1)
		defer rec.Release()
		a, err := s.put(testCtx(t), cmdDesc(t, epochCmd(table, "q", 0)), sc, rec)
		if err == nil && a.Rows != 1 {
			t.Fatalf("%d levels: ack %+v, want 1 row", levels, a)
		}
		return err
	}
	// levels structs around the leaf: the column and the leaf are levels 1 and levels+1.
	if err := put("deepest", arrowschema.MaxSchemaDepth-1); err != nil {
		t.Fatalf("%d levels: %v", arrowschema.MaxSchemaDepth, err)
	}
	other := startServer(t, flightsvc.Config{Root: s.Root})
	if ids := other.readIDs(t, "deepest"); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("another server reads ids %v from the deepest table", ids)
	}
	for _, levels := range []int{arrowschema.MaxSchemaDepth, 100} {
		table := fmt.Sprintf("deep%d", levels)
		wantCode(t, put(table, levels), codes.InvalidArgument, "nested deeper than 64")
		_, err := s.action(testCtx(t), "table_stats", cmd{"table": table})
		wantCode(t, err, codes.NotFound)
	}
}

// TestPutIdleTimeoutAppMetadataOnly: with --max-concurrent-puts 2, two streams that send only
// app_metadata messages, over and over, make no progress toward a batch: each fails with
// PUT_IDLE_TIMEOUT, commits nothing, and a put then lands in the freed slots.
func TestPutIdleTimeoutAppMetadataOnly(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxConcurrentPuts: 2, PutIdleTimeout: 300 * time.Millisecond})
	wantAck(t, s.putEpoch(t, "t", "good", 0, idRange(0, 5)), "committed", 2)
	ctx := testCtx(t)
	errs := make(chan error, 2)
	for i := range 2 {
		stream, err := s.Client.DoPut(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			first := &flight.FlightData{FlightDescriptor: cmdDesc(t, epochCmd("t", fmt.Sprintf("meta%d", i), 0)), AppMetadata: []byte("hello")}
			more := &flight.FlightData{AppMetadata: []byte("still here")}
			for fd := first; ; fd = more {
				if stream.Send(fd) != nil { // the server answered
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			_, err := recvAck(stream)
			errs <- err
		}()
	}
	for range 2 {
		wantReason(t, <-errs, codes.DeadlineExceeded, "PUT_IDLE_TIMEOUT")
	}
	if v := s.version(t, "t"); v != 2 {
		t.Fatalf("an app_metadata-only stream committed: version %d", v)
	}
	wantAck(t, s.putEpoch(t, "t", "good", 1, idRange(5, 5)), "committed", 3)
}
