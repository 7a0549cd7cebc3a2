package flightsvc_test

// Shutdown: an epoch in flight when the server is asked to stop either commits and is
// acknowledged (within ShutdownGrace) or fails and commits nothing.

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// startOwnedServer is startServer with the caller holding the serve context, to stop the server
// mid-test. done receives Serve's result.
func startOwnedServer(t *testing.T, root string, grace time.Duration) (conn *flightConn, stop context.CancelFunc, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: root, ShutdownGrace: grace, Logger: testLogger()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done = make(chan error, 1)
	served := make(chan struct{})
	go func() { done <- srv.Serve(ctx); close(served) }()
	// Wait for Serve at the end, before the root goes: its background maintenance (the Iceberg
	// publish) still writes there until the sink closes.
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
		}
	})
	addr := srv.Addr().String()
	return &flightConn{Addr: addr, Client: newClient(t, addr)}, cancel, done
}

// openEpoch starts a DoPut of epoch e and writes n batches of 10 rows from id from.
func openEpoch(t *testing.T, ctx context.Context, c *flightConn, e, from int64, n int) (flight.FlightService_DoPutClient, *flight.Writer) {
	t.Helper()
	stream, err := c.Client.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rowSchema))
	w.SetFlightDescriptor(cmdDesc(t, epochCmd("t", "q", e)))
	for i := 0; i < n; i++ {
		b := batch(idRange(from+int64(i)*10, 10)...)
		if err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	return stream, w
}

func waitServe(t *testing.T, done chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Serve did not return within %v", within)
	}
}

func TestShutdownDrainsInFlightEpoch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c, stop, done := startOwnedServer(t, root, 10*time.Second)
	wantAck(t, c.putEpoch(t, "t", "q", 0, idRange(0, 10)), "committed", 2)

	stream, w := openEpoch(t, testCtx(t), c, 1, 100, 2)
	time.Sleep(50 * time.Millisecond)
	stop() // shutdown starts while the epoch is half sent
	time.Sleep(100 * time.Millisecond)
	for i := int64(0); i < 2; i++ { // the client finishes within the grace period
		b := batch(idRange(120+i*10, 10)...)
		if err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	w.Close()
	_ = stream.CloseSend()
	a, err := recvAck(stream)
	if err != nil {
		t.Fatalf("in-flight epoch during graceful shutdown: %v", err)
	}
	wantAck(t, a, "committed", 3)
	if a.Rows != 40 {
		t.Fatalf("ack %+v, want 40 rows", a)
	}
	waitServe(t, done, 10*time.Second)

	c2, _, _ := startOwnedServer(t, root, time.Second)
	c2.wantIDs(t, "t", idRange(0, 10), idRange(100, 40))
}

func TestShutdownGraceExpiryCommitsNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c, stop, done := startOwnedServer(t, root, 300*time.Millisecond)
	wantAck(t, c.putEpoch(t, "t", "q", 0, idRange(0, 10)), "committed", 2)

	stream, _ := openEpoch(t, testCtx(t), c, 1, 100, 3)
	time.Sleep(50 * time.Millisecond)
	stop() // the client never finishes: the grace expires and the call is cancelled
	waitServe(t, done, 10*time.Second)
	if _, err := stream.Recv(); err == nil {
		t.Fatal("abandoned epoch acknowledged")
	}

	c2, _, _ := startOwnedServer(t, root, time.Second)
	// Let a handler that outlived Serve (if any) finish before looking.
	time.Sleep(200 * time.Millisecond)
	if v := c2.version(t, "t"); v != 2 {
		t.Fatalf("version %d after an abandoned epoch, want 2", v)
	}
	c2.wantIDs(t, "t", idRange(0, 10))
	wantAck(t, c2.putEpoch(t, "t", "q", 1, idRange(10, 10)), "committed", 3)
}
