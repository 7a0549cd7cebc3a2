package flightsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// Config configures a flight-sink server.
type Config struct {
	// Listen is the gRPC address. Default 127.0.0.1:8815.
	Listen string
	// HTTPListen is the address of the HTTP endpoints (/metrics, /healthz, /readyz, /status,
	// /status.json); empty disables them.
	HTTPListen string
	// Root is the table root URI (a path, file:// or s3://). Default ./flight-sink-data.
	Root string
	// S3 configures s3:// roots; nil uses the standard AWS environment.
	S3 *objstore.S3Options
	// IcebergVendCredentials, for an S3 root, are read-only credentials the Iceberg REST catalog
	// hands to readers that delegate access to it (docs/iceberg.md, The REST catalog); nil: none.
	IcebergVendCredentials *iceberg.VendedS3Credentials
	// Store, when set, is the store the server keeps its tables in, instead of opening Root
	// (which then only names it in logs): for a store wrapped by the caller, such as a
	// benchmark's faultstore with a fixed latency.
	Store objstore.Store
	// MaxMessageBytes is the gRPC receive limit for one message. Default 256 MiB.
	MaxMessageBytes int
	// MaxConcurrentPuts bounds the DoPut streams served at once; more get ResourceExhausted.
	// Default 64; negative means no limit.
	MaxConcurrentPuts int
	// MaxConcurrentGets bounds the DoGet streams served at once; more get ResourceExhausted
	// (LIMIT_EXCEEDED). A stream whose client stops reading holds what it buffered (a scan batch
	// and the read-ahead, readAheadBytes) until it ends, so this bounds that memory too.
	// Default 64; negative means no limit.
	MaxConcurrentGets int
	// MaxPutBytes bounds the Arrow bytes of one DoPut stream; a larger stream fails with
	// ResourceExhausted and commits nothing. It counts every record and dictionary batch message
	// as it arrives, by its decoded size (the sum of its buffers, a compressed buffer by the
	// uncompressed size it declares), before arrow-go decodes it. 0 (the default) means no limit.
	MaxPutBytes int64
	// MaxDecodedMessageBytes bounds the decoded size of one DoPut message, counted as MaxPutBytes
	// counts: it is what stops a small compressed message from declaring terabytes. A larger one
	// fails the stream with ResourceExhausted. Default (0) 1 GiB.
	MaxDecodedMessageBytes int64
	// PutIdleTimeout fails a DoPut stream that sends no message for this long (before its first
	// message or between two) with DeadlineExceeded, committing nothing and freeing its
	// MaxConcurrentPuts slot. A message must arrive whole within it. Default (0) 60s; negative
	// disables it.
	PutIdleTimeout time.Duration
	// ShutdownGrace is how long a shutdown waits for in-flight calls before cancelling them.
	// Default 30s.
	ShutdownGrace time.Duration
	// ShutdownDelay is how long a shutdown keeps serving after /readyz (and the gRPC health
	// service) turned not-ready, before it drains: the time a load balancer needs to stop sending
	// new calls. 0 (the default) drains at once.
	ShutdownDelay time.Duration
	// StartUnready starts the server when the root's store does not answer at start, not ready
	// (/readyz says why) until it does. Without it NewServer fails with the store's error.
	StartUnready bool
	// AuthTokens, when set, are the bearer tokens a call must carry (any one of them).
	AuthTokens []string
	// TLSCert and TLSKey enable TLS; TLSClientCA additionally requires client certificates
	// signed by that CA (mTLS).
	TLSCert, TLSKey, TLSClientCA string
	// AllowUnauthenticatedRemote permits a non-loopback Listen without AuthTokens. Without it
	// such a configuration is refused, so a server is never open to the network by accident.
	AllowUnauthenticatedRemote bool
	// EndpointBytes is the data size of the fragments one GetFlightInfo endpoint reads: a table
	// is described as one endpoint per group of fragments of about this size, plus one for its
	// MemWAL rows. Default streaming.DefaultEndpointBytes (128 MiB).
	EndpointBytes int64
	// Sink options.
	Sink streaming.Options
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Version is the build's version, reported by the flight_sink_build_info metric. Default
	// "devel".
	Version string
}

// doGetWriteBufferBytes is the gRPC server's write buffer per connection (grpc.WriteBufferSize).
const doGetWriteBufferBytes = 1 << 20

// EnsureDefaults fills unset fields and returns c.
func (c *Config) EnsureDefaults() *Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8815"
	}
	if c.Root == "" {
		c.Root = "./flight-sink-data"
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 256 << 20
	}
	if c.MaxConcurrentPuts == 0 {
		c.MaxConcurrentPuts = 64
	}
	if c.MaxConcurrentGets == 0 {
		c.MaxConcurrentGets = 64
	}
	if c.MaxDecodedMessageBytes <= 0 {
		c.MaxDecodedMessageBytes = arrowschema.DefaultMaxIPCMessageBytes
	}
	if c.Sink.MaxStoredBatchBytes <= 0 {
		// One limit for what a message may decode to and what its batch may expand to.
		c.Sink.MaxStoredBatchBytes = c.MaxDecodedMessageBytes
	}
	if c.PutIdleTimeout == 0 {
		c.PutIdleTimeout = 60 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Version == "" {
		c.Version = "devel"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Sink.Logger == nil {
		c.Sink.Logger = c.Logger
	}
	if c.Sink.Engine.Logger == nil {
		c.Sink.Engine.Logger = c.Logger
	}
	return c
}

// Server is a running flight-sink gRPC server.
type Server struct {
	stopTracing func(context.Context)
	cfg         Config
	grpc        *grpc.Server
	lis         net.Listener
	svc         *Service
	sink        *streaming.Sink // the svc's Sink, which the server closes at shutdown
	http        *httpServer     // nil when HTTPListen is empty
	health      *health.Server
	ready       *readiness
}

// recoverUnary turns a panic in one call into an Internal error for that call only. It is the
// outermost interceptor, so every error a call returns passes toStatus here and carries its
// ErrorInfo reason, whichever layer made it, plus the trailers Arrow C++ clients need to hand
// that reason to their caller (arrowStatusTrailer).
func recoverUnary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("panic in request", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				resp, err = nil, panicStatus(info.FullMethod)
			}
			if err != nil {
				_ = grpc.SetTrailer(ctx, arrowStatusTrailer(err)) // fails only once the status is sent
			}
		}()
		resp, err = h(ctx, req)
		return resp, toStatus(err)
	}
}

// recoverStream is recoverUnary for streaming calls.
func recoverStream(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("panic in request", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = panicStatus(info.FullMethod)
			}
			if err != nil {
				ss.SetTrailer(arrowStatusTrailer(err))
			}
		}()
		return toStatus(h(srv, ss))
	}
}

// logUnary logs every failed call with logCallError. It runs inside requestIDUnary, so its lines
// carry the call's request id.
func logUnary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		logCallError(ctx, logger, info.FullMethod, err)
		return resp, err
	}
}

// logStream is logUnary for streaming calls.
func logStream(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		logCallError(ss.Context(), logger, info.FullMethod, err)
		return err
	}
}

// logCallError logs a failed call by whose problem it is: WARN for the server's (its store did
// not answer, a bug), INFO for a refusal under the server's limits (--max-concurrent-puts, MemWAL
// backpressure), DEBUG for the client's own mistakes and cancellations.
func logCallError(ctx context.Context, logger *slog.Logger, method string, err error) {
	if err == nil {
		return
	}
	st, _ := status.FromError(toStatus(err))
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.Reason
		}
	}
	callErrors.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("method", method), attribute.String("reason", reason)))
	attrs := []any{"method", method, "code", st.Code().String(), "reason", reason, "err", st.Message()}
	logger = requestLogger(ctx, logger)
	switch st.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss:
		logger.WarnContext(ctx, "call failed", attrs...)
	case codes.ResourceExhausted, codes.Aborted:
		logger.InfoContext(ctx, "call refused", attrs...)
	default:
		logger.DebugContext(ctx, "call failed: client error", attrs...)
	}
}

// panicStatus is the status of a call that panicked.
func panicStatus(method string) error {
	return toStatus(fmt.Errorf("%w in %s (the server logged it and keeps serving)", errInternal, method))
}

// Validate reports the first setting of c the server refuses to start with: endpoints without
// authentication beyond loopback (unless AllowUnauthenticatedRemote), a blank auth token, half a
// TLS configuration. It reads the defaults, so it runs after EnsureDefaults; it touches neither
// the network nor the filesystem.
func (c *Config) Validate() error {
	if c.HTTPListen != "" && !isLoopback(c.HTTPListen) && !c.AllowUnauthenticatedRemote {
		return fmt.Errorf("refusing to serve the HTTP endpoints (/metrics, /status) on %s: they have no authentication, so only loopback addresses are served (pass --allow-unauthenticated-remote to override)", c.HTTPListen)
	}
	for i, t := range c.AuthTokens {
		// A blank token would otherwise be dropped by newTokenAuth and leave a remote listener open.
		if strings.TrimSpace(t) == "" {
			return fmt.Errorf("auth token %d of %d is empty or blank: give every --auth-token a value (comma-separated tokens must not leave an empty entry)", i+1, len(c.AuthTokens))
		}
	}
	if len(c.AuthTokens) == 0 && !isLoopback(c.Listen) && !c.AllowUnauthenticatedRemote {
		return fmt.Errorf("refusing to listen on %s without --auth-token: only loopback addresses are served unauthenticated (pass --allow-unauthenticated-remote to override)", c.Listen)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("TLS needs both a certificate and a key")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("a client CA (mTLS) needs a server certificate and key")
	}
	return nil
}

// NewServer validates cfg, opens the root and binds the listener; Serve starts answering.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := cfg.Store
	if store == nil {
		var err error
		if store, err = objstore.Open(ctx, cfg.Root, cfg.S3); err != nil {
			return nil, err
		}
	}
	ready := &readiness{store: store}
	if err := ready.check(ctx); err != nil && !cfg.StartUnready {
		return nil, &RootUnavailableError{Root: store.String(), Err: err}
	} else if err != nil {
		cfg.Logger.Warn("root store does not answer: serving, not ready until it does", "root", store.String(), "err", err)
	}
	auth := newTokenAuth(cfg.AuthTokens)
	stopTracing, err := setupTracing(ctx, cfg.Logger)
	if err != nil {
		return nil, err
	}
	opts, err := grpcServerOptions(cfg, auth)
	if err != nil {
		return nil, err
	}
	lis, err := listen(cfg, auth)
	if err != nil {
		return nil, err
	}
	sink := streaming.NewSink(store, &cfg.Sink)
	svc := newConfiguredService(cfg, sink)
	gs, hs := newGRPCServer(opts, svc)
	srv := &Server{cfg: cfg, grpc: gs, lis: lis, svc: svc, sink: sink, stopTracing: stopTracing, health: hs, ready: ready}
	if cfg.HTTPListen != "" {
		if srv.http, err = newHTTPServer(cfg.HTTPListen, svc, auth, ready); err != nil {
			lis.Close()
			return nil, err
		}
	}
	return srv, nil
}

// newTokenAuth is the authenticator of the tokens (Config.Validate refused blank ones); with none
// it lets every call through.
func newTokenAuth(tokens []string) *tokenAuth {
	auth := &tokenAuth{}
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			auth.tokens = append(auth.tokens, []byte(t))
		}
	}
	return auth
}

// grpcServerOptions are the gRPC server's limits, codec, interceptors and, when cfg sets a
// certificate, its TLS credentials (read from disk here).
func grpcServerOptions(cfg Config, auth *tokenAuth) ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		// Stop waits for handlers to return: after a shutdown no epoch is still mid-commit.
		grpc.WaitForHandlers(true),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		// DoGet sends batches of megabytes: gRPC's default 32 KiB write buffer flushes each in
		// dozens of writes (a syscall each); one buffer of a megabyte per connection takes a
		// batch in a few.
		grpc.WriteBufferSize(doGetWriteBufferBytes),
		// DoGet's record batch messages reach gRPC already encoded (doget_codec.go).
		newGetCodec(),
		// Recovery is outermost so a panic anywhere, auth included, stays in its call.
		grpc.ChainUnaryInterceptor(recoverUnary(cfg.Logger), requestIDUnary(), logUnary(cfg.Logger), auth.unary()),
		grpc.ChainStreamInterceptor(recoverStream(cfg.Logger), requestIDStream(), logStream(cfg.Logger), auth.stream()),
	}
	if cfg.TLSCert != "" {
		creds, err := serverTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	return opts, nil
}

// listen binds cfg.Listen and says in the log when it serves without authentication.
func listen(cfg Config, auth *tokenAuth) (net.Listener, error) {
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if len(auth.tokens) == 0 {
		if isLoopback(cfg.Listen) {
			cfg.Logger.Info("no auth token configured: serving unauthenticated on loopback only", "addr", lis.Addr().String())
		} else {
			cfg.Logger.Warn("no auth token configured and listening beyond loopback: anyone who can reach the port can write", "addr", lis.Addr().String())
		}
	}
	return lis, nil
}

// newConfiguredService is the Flight service over sink with cfg's limits.
func newConfiguredService(cfg Config, sink *streaming.Sink) *Service {
	svc := NewService(sink, memory.DefaultAllocator, cfg.Logger)
	if cfg.MaxConcurrentPuts > 0 {
		svc.puts = make(putLimiter, cfg.MaxConcurrentPuts)
	}
	if cfg.MaxConcurrentGets > 0 {
		svc.gets = make(getLimiter, cfg.MaxConcurrentGets)
	}
	svc.maxPutBytes = cfg.MaxPutBytes
	svc.maxDecodedMessageBytes = cfg.MaxDecodedMessageBytes
	svc.putIdleTimeout = cfg.PutIdleTimeout
	svc.endpointBytes = cfg.EndpointBytes
	// The status page reads ages and rates on the clock that stamps commits.
	svc.rates = newTableRates(cfg.Sink.Engine.Now)
	svc.icebergVend = cfg.IcebergVendCredentials
	return svc
}

// newGRPCServer is the gRPC server with the Flight service and the health service (serving)
// registered.
func newGRPCServer(opts []grpc.ServerOption, svc *Service) (*grpc.Server, *health.Server) {
	gs := grpc.NewServer(opts...)
	flight.RegisterFlightServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	return gs, hs
}

// HTTPAddr returns the bound address of the HTTP endpoints, or nil when they are disabled.
func (s *Server) HTTPAddr() net.Addr {
	if s.http == nil {
		return nil
	}
	return s.http.lis.Addr()
}

// Addr returns the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Sink returns the server's sink.
func (s *Server) Sink() *streaming.Sink { return s.sink }

// Serve answers calls until ctx is cancelled, then shuts down: it turns not ready (/readyz and
// the gRPC health service), keeps serving for ShutdownDelay, then drains: in-flight calls get
// ShutdownGrace to finish (an epoch either commits and is acknowledged, or fails and commits
// nothing), after which the rest are cancelled.
func (s *Server) Serve(ctx context.Context) error {
	stopGauges, err := serverGauges(s.cfg.MaxConcurrentPuts, s.cfg.Version, s.ready)
	if err != nil {
		return err
	}
	defer stopGauges()
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(s.lis) }()
	probeCtx, stopProbe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProbe()
	go s.ready.probe(probeCtx, s.health, s.cfg.Logger)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go s.sink.WatchCommits(watchCtx)
	if s.http != nil {
		go func() {
			if err := s.http.serve(); err != nil {
				s.cfg.Logger.Error("http endpoints stopped", "err", err)
			}
		}()
		defer s.http.shutdown(context.Background())
		s.cfg.Logger.Info("http endpoints serving", "addr", s.http.lis.Addr().String(), "paths", "/metrics /healthz /readyz /status")
	}
	s.cfg.Logger.Info("flight-sink serving", "addr", s.lis.Addr().String(), "root", s.cfg.Root)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopWatch() // no publish is scheduled for another process's commit once draining starts
	s.ready.draining.Store(true)
	s.health.Shutdown() // NOT_SERVING from now on
	if s.cfg.ShutdownDelay > 0 {
		s.cfg.Logger.Info("flight-sink shutting down: not ready, serving until the delay is over", "delay", s.cfg.ShutdownDelay)
		time.Sleep(s.cfg.ShutdownDelay)
	}
	s.cfg.Logger.Info("flight-sink shutting down: draining in-flight calls", "grace", s.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace):
		s.cfg.Logger.Warn("shutdown grace expired: cancelling remaining calls")
		s.grpc.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	s.sink.Close()
	s.stopTracing(context.Background())
	s.cfg.Logger.Info("flight-sink stopped")
	return nil
}
