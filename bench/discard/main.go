// Command discard is the network bound of bench/peers.py: an Arrow Flight server whose DoPut
// decodes every batch of the stream, drops it and acknowledges with one PutResult. Whatever a real
// sink does beyond that (encode, write, commit) shows up as the gap to this server.
//
//	go build -o /tmp/discard ./bench/discard && /tmp/discard -listen 127.0.0.1:0
//
// It prints "listening on ADDR" on stdout once it serves, and stops on SIGINT/SIGTERM.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
)

type discard struct{ flight.BaseFlightServer }

func (*discard) DoPut(stream flight.FlightService_DoPutServer) error {
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return err
	}
	defer rdr.Release()
	var rows, batches int64
	for rdr.Next() {
		rows += rdr.RecordBatch().NumRows()
		batches++
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	ack, err := json.Marshal(map[string]any{"status": "discarded", "rows": rows, "batches": batches})
	if err != nil {
		return err
	}
	return stream.Send(&flight.PutResult{AppMetadata: ack})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "gRPC listen address")
	flag.Parse()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "discard:", err)
		os.Exit(1)
	}
	// The same message limit as flight-sink's default --max-message-bytes.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(256<<20), grpc.MaxSendMsgSize(256<<20))
	flight.RegisterFlightServiceServer(gs, &discard{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; gs.Stop() }()
	fmt.Printf("listening on %s\n", lis.Addr())
	if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		fmt.Fprintln(os.Stderr, "discard:", err)
		os.Exit(1)
	}
}
