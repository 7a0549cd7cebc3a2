package flightsvc_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// reasonOf returns the reason of the flight-sink ErrorInfo a status error carries ("" without one).
func reasonOf(err error) string {
	return statusErrorInfo(err).GetReason()
}

// statusErrorInfo returns the flight-sink ErrorInfo of the status err, nil when it has none.
func statusErrorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "flight-sink" {
			return info
		}
	}
	return nil
}

// wantReason checks that err is a status with code and a flight-sink ErrorInfo with reason.
func wantReason(t testing.TB, err error, code codes.Code, reason string) {
	t.Helper()
	wantCode(t, err, code)
	if got := reasonOf(err); got != reason {
		t.Fatalf("%v: reason %q, want %q", err, got, reason)
	}
}

// Real failures through arrow-go's Flight client carry the ErrorInfo reason docs/protocol.md
// names; the status's trailer survives the whole way (DoPut, DoGet, DoAction, ListActions).
func TestErrorReasonsOverFlight(t *testing.T) {
	s := startServer(t, flightsvc.Config{MaxPutBytes: 64 << 10})
	ctx := testCtx(t)
	s.putEpoch(t, "events", "q", 0, []int64{1})

	t.Run("schema change refused", func(t *testing.T) {
		sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.StringBuilder).Append("x")
		rec := b.NewRecordBatch()
		defer rec.Release()
		_, err := s.put(ctx, cmdDesc(t, cmd{"table": "events", "query_id": "q", "epoch_id": 1}), sc, rec)
		wantReason(t, err, codes.InvalidArgument, "SCHEMA_CHANGE_REFUSED") // SCHEMA_MISMATCH: TestMergeSchemaDirect
	})
	t.Run("unknown table", func(t *testing.T) {
		_, err := s.putCmd(ctx, t, cmd{"table": "missing", "query_id": "q", "epoch_id": 0}, []int64{1})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
		_, err = s.get(ctx, map[string]any{"table": "missing"})
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
	})
	t.Run("unknown version", func(t *testing.T) {
		_, err := s.get(ctx, map[string]any{"table": "events", "version": 999})
		wantReason(t, err, codes.NotFound, "VERSION_NOT_FOUND")
	})
	t.Run("bad JSON", func(t *testing.T) {
		_, err := s.putCmd(ctx, t, []byte(`{"table": "events",`), []int64{1})
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		_, err = s.action(ctx, "history", []byte(`{"table": `))
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
	})
	t.Run("invalid table name", func(t *testing.T) {
		_, err := s.putCmd(ctx, t, epochCmd("bad/name", "q", 0), []int64{1})
		wantReason(t, err, codes.InvalidArgument, "INVALID_TABLE_NAME")
	})
	t.Run("invalid predicate", func(t *testing.T) {
		_, err := s.action(ctx, "delete", cmd{"table": "events", "where": cmd{"op": "=", "column": "id", "value": "one"}})
		wantReason(t, err, codes.InvalidArgument, "INVALID_PREDICATE")
	})
	t.Run("unknown action", func(t *testing.T) {
		_, err := s.action(ctx, "optimize_everything", cmd{"table": "events"})
		wantReason(t, err, codes.InvalidArgument, "UNKNOWN_ACTION")
	})
	t.Run("Arrow C++ trailers", func(t *testing.T) {
		// pyarrow hands a client the status details only with these trailers (errors.go).
		stream, err := s.Client.DoAction(ctx, &flight.Action{Type: "table_stats", Body: []byte(`{"table": "missing"}`)})
		if err == nil {
			_, err = stream.Recv()
		}
		wantReason(t, err, codes.NotFound, "TABLE_NOT_FOUND")
		tr := stream.Trailer()
		if got := tr.Get("x-arrow-status"); len(got) != 1 || got[0] != "2" { // Arrow's KeyError
			t.Errorf("x-arrow-status %q, want [\"2\"]", got)
		}
		if got := tr.Get("x-arrow-status-message-bin"); len(got) != 1 || got[0] != status.Convert(err).Message() {
			t.Errorf("x-arrow-status-message-bin %q, want the status message %q", got, status.Convert(err).Message())
		}
	})
	t.Run("malformed IPC", func(t *testing.T) {
		stream, err := s.Client.DoPut(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&flight.FlightData{FlightDescriptor: cmdDesc(t, epochCmd("events", "q", 9)),
			DataHeader: []byte("not a flatbuffer at all")}); err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseSend()
		_, err = recvAck(stream)
		wantReason(t, err, codes.InvalidArgument, "MALFORMED_IPC")
	})
	t.Run("limit exceeded", func(t *testing.T) {
		_, err := s.putCmd(ctx, t, epochCmd("events", "q", 1), idRange(0, 5000), idRange(5000, 5000))
		wantReason(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	})
	t.Run("query reused", func(t *testing.T) {
		s.putEpoch(t, "events", "r", 5, []int64{2})
		_, err := s.putCmd(ctx, t, cmd{"table": "events", "query_id": "r", "epoch_id": 4, "dedupe_lookback_versions": 1}, []int64{3})
		wantReason(t, err, codes.FailedPrecondition, "QUERY_REUSED")
	})
	s.wantIDs(t, "events", []int64{1, 2})
}

// The bearer-token check answers with reasons too, and with no token a client learns it must
// authenticate before anything else runs.
func TestAuthErrorReasons(t *testing.T) {
	s := startServer(t, flightsvc.Config{AuthTokens: []string{"s3cret"}})
	for _, c := range []struct {
		header string
		code   codes.Code
		reason string
	}{
		{"", codes.Unauthenticated, "UNAUTHENTICATED"},
		{"Basic s3cret", codes.Unauthenticated, "UNAUTHENTICATED"},
		{"Bearer wrong", codes.PermissionDenied, "PERMISSION_DENIED"},
	} {
		ctx := testCtx(t)
		if c.header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.header)
		}
		_, err := s.putCmd(ctx, t, epochCmd("t", "q", 0), []int64{1})
		wantReason(t, err, c.code, c.reason)
		_, err = s.action(ctx, "table_stats", cmd{"table": "t"})
		wantReason(t, err, c.code, c.reason)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	if _, err := s.action(ctx, "table_stats", cmd{"table": "t"}); reasonOf(err) != "TABLE_NOT_FOUND" {
		t.Fatalf("with the token: %v, want TABLE_NOT_FOUND (nothing was written without it)", err)
	}
}
