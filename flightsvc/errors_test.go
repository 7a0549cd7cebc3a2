package flightsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
)

// errorInfoOf returns the ErrorInfo detail of a status error (nil when it has none).
func errorInfoOf(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

var upperSnake = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)

// Every row of the table is reachable: its sentinel, wrapped the way callers wrap it, comes out of
// toStatus with the row's code and reason (a row shadowed by an earlier one fails here). A reason
// has one code, and a code at most one default reason.
func TestErrorReasonsTable(t *testing.T) {
	codeOfReason := map[string]codes.Code{}
	defaults := map[codes.Code]string{}
	for _, r := range errorReasons {
		t.Run(r.reason+"/"+r.err.Error(), func(t *testing.T) {
			if !upperSnake.MatchString(r.reason) {
				t.Errorf("reason %q is not UPPER_SNAKE", r.reason)
			}
			if c, ok := codeOfReason[r.reason]; ok && c != r.code {
				t.Errorf("reason %s has two codes: %v and %v", r.reason, c, r.code)
			}
			codeOfReason[r.reason] = r.code
			if r.codeDefault {
				if d, ok := defaults[r.code]; ok {
					t.Errorf("code %v has two default reasons: %s and %s", r.code, d, r.reason)
				}
				defaults[r.code] = r.reason
			}
			err := toStatus(fmt.Errorf("table t: doing something: %w", r.err))
			st, _ := status.FromError(err)
			info := errorInfoOf(err)
			if st.Code() != r.code || info == nil || info.Reason != r.reason || info.Domain != errorDomain {
				t.Fatalf("toStatus(%v) = %v %q, info %v; want %v with reason %s", r.err, st.Code(), st.Message(), info, r.code, r.reason)
			}
			if !strings.Contains(st.Message(), "table t: doing something") {
				t.Errorf("message %q lost the error's context", st.Message())
			}
		})
	}
}

// Errors outside the table, gRPC's own statuses and statuses that already carry a reason.
func TestToStatusEdges(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"unknown error", errors.New("disk on fire"), codes.Internal, "INTERNAL"},
		{"corrupt manifest", fmt.Errorf("read v3: %w", engine.ErrCorruptManifest), codes.DataLoss, "DATA_CORRUPT"},
		{"cancelled stream (gRPC's status)", status.Error(codes.Canceled, "context canceled"), codes.Canceled, "CANCELLED"},
		{"message over the receive limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), codes.ResourceExhausted, "LIMIT_EXCEEDED"},
		{"wrapped gRPC status", fmt.Errorf("recv: %w", status.Error(codes.DeadlineExceeded, "late")), codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{"a code without a default", status.Error(codes.Unavailable, "transport closing"), codes.Unavailable, "INTERNAL"},
		{"already has a reason", toStatus(fmt.Errorf("x: %w", engine.ErrTableNotFound)), codes.NotFound, "TABLE_NOT_FOUND"},
		{"unsupported type before schema mismatch", fmt.Errorf("column c: %w", arrowschema.ErrUnsupportedType), codes.InvalidArgument, "UNSUPPORTED_TYPE"},
		{"idle timeout before deadline", fmt.Errorf("%w: %w", errPutIdleTimeout, context.DeadlineExceeded), codes.DeadlineExceeded, "PUT_IDLE_TIMEOUT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := toStatus(c.err)
			info := errorInfoOf(err)
			if status.Code(err) != c.code || info == nil || info.Reason != c.reason || info.Domain != errorDomain {
				t.Fatalf("toStatus(%v) = %v, info %v; want %v %s", c.err, err, info, c.code, c.reason)
			}
		})
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) != nil")
	}
}

// The error types with structured fields put them in the ErrorInfo's metadata.
func TestErrorMetadata(t *testing.T) {
	for _, c := range []struct {
		err  error
		want map[string]string
	}{
		{fmt.Errorf("commit: %w", &engine.ConflictError{Table: "events", TheirVersion: 7}), map[string]string{"table": "events", "their_version": "7"}},
		{&epochid.CommittedError{QueryID: "q", EpochID: 3, WatermarkEpoch: 5}, map[string]string{"query_id": "q", "epoch_id": "3", "watermark_epoch": "5"}},
		{&epochid.CommittedError{QueryID: "q", EpochID: 3, Shard: "s-1"}, map[string]string{"query_id": "q", "epoch_id": "3", "shard": "s-1"}},
		{&memwal.FencedError{Shard: "s-1"}, map[string]string{"shard": "s-1"}},
	} {
		info := errorInfoOf(toStatus(c.err))
		if info == nil || fmt.Sprint(info.Metadata) != fmt.Sprint(c.want) {
			t.Errorf("%v: metadata %v, want %v", c.err, info.GetMetadata(), c.want)
		}
	}
}

// docReasons reads the reason table of docs/protocol.md's Errors section: rows of
// "| `REASON` | `Code` | when |".
func docReasons(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## Errors\n")
	if start < 0 {
		t.Fatal("docs/protocol.md has no \"## Errors\" section")
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\| `([A-Za-z]+)` \\|")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if prev, ok := got[m[1]]; ok {
			t.Errorf("docs/protocol.md lists reason %s twice (%s, %s)", m[1], prev, m[2])
		}
		got[m[1]] = m[2]
	}
	return got
}

// docs/protocol.md lists exactly the reasons of errorReasons, each with its code.
func TestProtocolDocListsEveryReason(t *testing.T) {
	want := map[string]string{reasonInternal: codes.Internal.String()}
	for _, r := range errorReasons {
		want[r.reason] = r.code.String()
	}
	got := docReasons(t)
	var names []string
	for r := range want {
		names = append(names, r)
	}
	for r := range got {
		if _, ok := want[r]; !ok {
			names = append(names, r)
		}
	}
	slices.Sort(names)
	for _, r := range names {
		if got[r] != want[r] {
			t.Errorf("reason %s: docs/protocol.md says code %q, flightsvc/errors.go %q", r, got[r], want[r])
		}
	}
}

// trailerStream is a grpc.ServerStream that records the trailer an interceptor sets.
type trailerStream struct {
	grpc.ServerStream
	trailer metadata.MD
}

func (s *trailerStream) Context() context.Context  { return context.Background() }
func (s *trailerStream) SetTrailer(md metadata.MD) { s.trailer = metadata.Join(s.trailer, md) }

// The outermost interceptors give every error a call returns its reason, whatever made it (a
// panic, a plain error, a domain sentinel), and the trailers pyarrow needs to read it.
func TestInterceptorsGiveEveryErrorAReason(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name    string
		handler func() error
		code    codes.Code
		reason  string
		arrow   string
	}{
		{"panic", func() error { panic("boom") }, codes.Internal, "INTERNAL", "5"},
		{"plain error", func() error { return errors.New("disk on fire") }, codes.Internal, "INTERNAL", "5"},
		{"sentinel", func() error { return fmt.Errorf("open: %w", engine.ErrTableNotFound) }, codes.NotFound, "TABLE_NOT_FOUND", "2"},
		{"gRPC status", func() error { return status.Error(codes.Canceled, "context canceled") }, codes.Canceled, "CANCELLED", "8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ss := &trailerStream{}
			err := recoverStream(logger)(nil, ss, &grpc.StreamServerInfo{FullMethod: "/test/Stream"},
				func(any, grpc.ServerStream) error { return c.handler() })
			info := errorInfoOf(err)
			if status.Code(err) != c.code || info == nil || info.Reason != c.reason {
				t.Fatalf("stream: %v, info %v; want %v %s", err, info, c.code, c.reason)
			}
			if got := ss.trailer.Get("x-arrow-status"); len(got) != 1 || got[0] != c.arrow {
				t.Errorf("x-arrow-status %q, want %q", got, c.arrow)
			}
			_, err = recoverUnary(logger)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/test/Unary"},
				func(context.Context, any) (any, error) { return nil, c.handler() })
			if info := errorInfoOf(err); status.Code(err) != c.code || info == nil || info.Reason != c.reason {
				t.Fatalf("unary: %v, info %v; want %v %s", err, info, c.code, c.reason)
			}
		})
	}
}

// A message that is not UTF-8 (an error quoting bytes a client sent) keeps its ErrorInfo: gRPC
// cannot marshal a status whose message is not UTF-8 with its details, and would drop them.
func TestToStatusMessageNotUTF8(t *testing.T) {
	err := toStatus(fmt.Errorf("%w: column \"name\" holds \"ok\xff\xfe\"", arrowschema.ErrDataMismatch))
	st, _ := status.FromError(err)
	if !utf8.ValidString(st.Message()) {
		t.Fatalf("message %q is not UTF-8", st.Message())
	}
	if _, merr := proto.Marshal(st.Proto()); merr != nil {
		t.Fatalf("the status cannot be marshalled: %v", merr)
	}
	if info := errorInfoOf(err); info == nil || info.Reason != "SCHEMA_DATA_MISMATCH" {
		t.Fatalf("ErrorInfo %v, want reason SCHEMA_DATA_MISMATCH", info)
	}
	// A status made elsewhere with such a message is made UTF-8 too.
	err = toStatus(status.Error(codes.InvalidArgument, "bad \xff"))
	if st, _ := status.FromError(err); !utf8.ValidString(st.Message()) || errorInfoOf(err) == nil {
		t.Fatalf("a gRPC status with a non-UTF-8 message: %q, info %v", st.Message(), errorInfoOf(err))
	}
}
