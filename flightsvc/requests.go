package flightsvc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Request ids: every call gets one, sent back in the "x-request-id" response header and attached
// to every log line the call writes, so a client's error can be matched to the server's log.

type requestIDKey struct{}

// requestLogger returns the logger of the call in ctx (with its request id), or base.
func requestLogger(ctx context.Context, base *slog.Logger) *slog.Logger {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return base.With("request_id", id)
	}
	return base
}

// newRequestID takes the client's x-request-id when it sent a sane one, else makes one.
func newRequestID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("x-request-id"); len(v) > 0 && len(v[0]) > 0 && len(v[0]) <= 128 {
			return v[0]
		}
	}
	return uuid.NewString()
}

func requestIDUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id := newRequestID(ctx)
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", id))
		return h(context.WithValue(ctx, requestIDKey{}, id), req)
	}
}

// idStream carries the request id in the stream's context.
type idStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *idStream) Context() context.Context { return s.ctx }

func requestIDStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		id := newRequestID(ss.Context())
		_ = ss.SetHeader(metadata.Pairs("x-request-id", id))
		return h(srv, &idStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), requestIDKey{}, id)})
	}
}

// putLimiter bounds the DoPut streams served at once; one over the limit is refused at once with
// ResourceExhausted rather than queued, so a producer backs off instead of timing out.
type putLimiter chan struct{}

func (l putLimiter) acquire() (func(), error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	default:
		putsRefused.Add(context.Background(), 1)
		return nil, fmt.Errorf("%w: %d DoPut streams are already being served (the server's --max-concurrent-puts); retry with backoff", errResourceExhausted, cap(l))
	}
}
