package httpcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// logBuffer collects a server's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// count returns how many lines have level and msg, and reason when it is not empty.
func (b *logBuffer) count(level, msg, reason string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["level"] == level && rec["msg"] == msg && (reason == "" || rec["reason"] == reason) {
			n++
		}
	}
	return n
}

// readyz returns /readyz's status code and body.
func readyz(t *testing.T, httpAddr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// closedEndpoint returns an http:// URL of a loopback port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return "http://" + addr
}

// unreachableStores are S3 roots whose store does not answer: a closed loopback port, and a
// bucket the test S3 server does not have.
func unreachableStores(t *testing.T) map[string]objstore.S3Options {
	_, missing := storetest.S3(t)
	missing.Bucket = "flight-sink-no-such-bucket"
	return map[string]objstore.S3Options{
		"closed port":    {Bucket: "b", Prefix: "p", Endpoint: closedEndpoint(t), Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", PathStyle: true},
		"missing bucket": missing,
	}
}

// TestReadyzUnreachableStore: a root whose store does not answer fails the start with the root
// and a hint; with StartUnready the server serves, /readyz is 503 naming the store, /healthz is
// 200, the gRPC health service says NOT_SERVING, and a call that needs the store is Unavailable
// with reason STORAGE_UNAVAILABLE (which clients retry).
func TestReadyzUnreachableStore(t *testing.T) {
	for name, opts := range unreachableStores(t) {
		t.Run(name, func(t *testing.T) {
			root := "s3://" + opts.Bucket + "/" + opts.Prefix
			cfg := flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: root, S3: &opts}
			_, err := flightsvc.NewServer(t.Context(), cfg)
			var rerr *flightsvc.RootUnavailableError
			if !errors.As(err, &rerr) || !strings.Contains(err.Error(), root+" does not answer") || !strings.Contains(rerr.Hint(), "--s3-endpoint") {
				t.Fatalf("start on an unreachable store: got %v, want a RootUnavailableError naming %s with a hint", err, root)
			}
			if !errors.Is(err, objstore.ErrUnavailable) {
				t.Errorf("start error %v does not wrap objstore.ErrUnavailable", err)
			}

			logs := &logBuffer{}
			cfg.StartUnready, cfg.Logger = true, logs.logger()
			srv, err := flightsvc.NewServer(t.Context(), cfg)
			if err != nil {
				t.Fatalf("StartUnready: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = srv.Serve(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			httpAddr := srv.HTTPAddr().String()
			code, body := readyz(t, httpAddr)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "store unavailable") || !strings.Contains(body, root) {
				t.Errorf("/readyz = %d %q, want 503 naming the store %s", code, body, root)
			}
			if got := get(t, "http://"+httpAddr+"/healthz"); strings.TrimSpace(got) != "ok" {
				t.Errorf("/healthz = %q, want ok: the process is alive", got)
			}
			conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			hc, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			if err != nil || hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("gRPC health = %v, %v; want NOT_SERVING", hc, err)
			}
			_, err = flight.NewFlightServiceClient(conn).GetFlightInfo(t.Context(), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"t"}})
			st, _ := status.FromError(err)
			reason := ""
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.Reason
				}
			}
			if st.Code() != codes.Unavailable || reason != "STORAGE_UNAVAILABLE" {
				t.Errorf("GetFlightInfo on an unreachable store: %v %q (reason %q), want Unavailable STORAGE_UNAVAILABLE", st.Code(), st.Message(), reason)
			}
			// The storage failure is a WARN with structured fields; a client's mistake is DEBUG.
			_, err = flight.NewFlightServiceClient(conn).GetFlightInfo(t.Context(), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte("{")})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("malformed command: %v", err)
			}
			if n := logs.count("WARN", "call failed", "STORAGE_UNAVAILABLE"); n != 1 {
				t.Errorf("%d WARN lines for the storage failure, want 1:\n%s", n, logs)
			}
			if n := logs.count("DEBUG", "call failed: client error", "INVALID_REQUEST"); n != 1 {
				t.Errorf("%d DEBUG lines for the malformed command, want 1:\n%s", n, logs)
			}
			if n := logs.count("WARN", "root store does not answer: serving, not ready until it does", ""); n != 1 {
				t.Errorf("%d WARN lines for the start on an unreachable store, want 1:\n%s", n, logs)
			}
		})
	}
}

// TestReadyzThroughDrain: on shutdown /readyz turns 503 "draining" and the gRPC health service
// NOT_SERVING while the server still serves: a new call is answered during ShutdownDelay, and an
// epoch in flight when the shutdown began is committed and acknowledged.
func TestReadyzThroughDrain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir(),
		ShutdownDelay: 5 * time.Second, ShutdownGrace: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	httpAddr := srv.HTTPAddr().String()
	if code, body := readyz(t, httpAddr); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Fatalf("/readyz before shutdown = %d %q, want 200 ready", code, body)
	}
	c, err := flight.NewClientWithMiddleware(srv.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := putEpoch(t, c, "drain", "q", 0, 10); s != "committed" {
		t.Fatalf("epoch 0: %s", s)
	}
	// An epoch in flight: its stream is open, its batch sent, not yet closed.
	stream, w := openPut(t, c, map[string]any{"table": "drain", "query_id": "q", "epoch_id": 1}, 100, 101)

	cancel() // what SIGTERM does
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := readyz(t, httpAddr)
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after shutdown began = %d %q, want 503 draining", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hc, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining = %v, %v; want NOT_SERVING", hc, err)
	}
	// Still serving during the delay: a new call is answered.
	if _, err := c.ListActions(t.Context(), &flight.Empty{}); err != nil {
		t.Errorf("a new call while not ready, before the drain: %v", err)
	}
	if s := closePut(t, stream, w); s != "committed" {
		t.Errorf("epoch in flight at shutdown: %s, want committed", s)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not return")
	}
}
