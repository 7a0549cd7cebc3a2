package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestExample runs the example against a real server on a loopback socket.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := flightsvc.NewServer(ctx, flightsvc.Config{Listen: "127.0.0.1:0", Root: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	// Stop the server and wait for Serve before the root goes: its background maintenance (the
	// Iceberg publish) writes there until the sink closes.
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var out bytes.Buffer
	if err := run(ctx, &out, srv.Addr().String(), "events", "example", 3, 100); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"epoch 0: committed at version 2", "epoch 2: committed at version 4", "replay of epoch 2: duplicate (version 4)", "holds 300 rows"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
