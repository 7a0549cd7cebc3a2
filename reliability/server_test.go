package reliability

// `flight-sink serve` as an OS process the harness can kill -9 and restart on the same root.

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/flightsvc/servertest"
)

// server is one `flight-sink serve` process and a Flight client on it.
type server struct {
	*servertest.Process
	Name   string
	Client flight.Client
}

// startServer launches `flight-sink serve` on root (Flight and HTTP on free loopback ports) and
// connects to it. env is added to the process environment (S3 settings).
func startServer(t testing.TB, name, root string, env ...string) (*server, error) {
	p, err := servertest.Start(t, []string{"--root", root, "--log-level", "info", "--shutdown-grace", "2s"}, env, 60*time.Second)
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
	// Closed only when the test is over: producers may still hold the client of a killed
	// server, and calls on a closed arrow-go client crash instead of failing.
	t.Cleanup(func() { cl.Close() })
	return &server{Process: p, Name: name, Client: cl}, nil
}

// mustStartServer is startServer that fails the test, and stops the process when the test ends.
func mustStartServer(t testing.TB, name, root string, env ...string) *server {
	t.Helper()
	s, err := startServer(t, name, root, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
