package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"text/tabwriter"

	"github.com/alecthomas/kong"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ActionCmd runs one Flight action against a running server: the same maintenance and metadata
// operations as the subcommands that work on a table URI, through the server that owns it.
type ActionCmd struct {
	Server  string        `required:"" env:"FLIGHT_SINK_SERVER" placeholder:"HOST:PORT" help:"Address of a running flight-sink server (grpc:// or grpc+tls:// prefixes allowed)."`
	Token   string        `env:"FLIGHT_SINK_TOKEN" help:"Bearer token, when the server requires one."`
	TLSCA   string        `name:"tls-ca" env:"FLIGHT_SINK_TLS_CA" type:"existingfile" help:"CA file (PEM) to verify a TLS server; implies TLS."`
	Timeout time.Duration `default:"10m" help:"Give up after this long."`
	Name    string        `arg:"" optional:"" name:"ACTION" help:"Action (none: list the server's actions): table_stats, history, epoch_status, compact, cleanup, delete, flush_memwal, fold_memwal_shard (alias compact_memwal_shard), create_table, commit_epoch (docs/protocol.md)."`
	Body    string        `arg:"" optional:"" name:"JSON" help:"Action body, e.g. '{\"table\": \"events\"}'; - reads it from stdin."`
}

// Run sends the action and prints its JSON result, indented, on stdout; without an action it
// lists the server's actions. A failed call is one line: the server's message, its code and its
// ErrorInfo reason.
func (c *ActionCmd) Run(ctx context.Context, kctx *kong.Context) error {
	body := []byte(c.Body)
	if c.Body == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		body = b
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if !json.Valid(body) {
		return fmt.Errorf("the action body is not valid JSON: %s", body)
	}
	addr, useTLS := strings.TrimPrefix(c.Server, "grpc://"), c.TLSCA != ""
	if strings.HasPrefix(addr, "grpc+tls://") {
		addr, useTLS = strings.TrimPrefix(addr, "grpc+tls://"), true
	}
	creds := insecure.NewCredentials()
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLSCA != "" {
			pem, err := os.ReadFile(c.TLSCA)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("%s holds no PEM certificate", c.TLSCA)
			}
			cfg.RootCAs = pool
		}
		creds = credentials.NewTLS(cfg)
	}
	client, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.Token)
	}
	if c.Name == "" {
		return listActions(ctx, client, addr, kctx.Stdout)
	}
	stream, err := client.DoAction(ctx, &flight.Action{Type: c.Name, Body: body})
	if err != nil {
		return callError(c.Name, addr, err)
	}
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return callError(c.Name, addr, err)
		}
		var out bytes.Buffer
		if json.Indent(&out, res.Body, "", "  ") != nil {
			out.Reset()
			out.Write(res.Body)
		}
		out.WriteByte('\n')
		_, _ = kctx.Stdout.Write(out.Bytes())
	}
}

// listActions prints the server's actions, one per line: its type and description.
func listActions(ctx context.Context, client flight.Client, addr string, w io.Writer) error {
	stream, err := client.ListActions(ctx, &flight.Empty{})
	if err != nil {
		return callError("list actions", addr, err)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for {
		a, err := stream.Recv()
		if err == io.EOF {
			return tw.Flush()
		}
		if err != nil {
			return callError("list actions", addr, err)
		}
		fmt.Fprintf(tw, "%s\t%s\n", a.Type, a.Description)
	}
}

// callError renders a failed call to the server at addr as the other commands render errors:
// what failed, the server's message, its gRPC code and its ErrorInfo reason, without gRPC's
// "rpc error: code = ... desc = ..." wrapping.
func callError(what, addr string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ", " + info.Reason
		}
	}
	if st.Code() == codes.Unavailable && reason == "" {
		return fmt.Errorf("%s: no flight-sink server answers at %s (set --server or FLIGHT_SINK_SERVER): %s", what, addr, st.Message())
	}
	return fmt.Errorf("%s: %s (%s%s)", what, st.Message(), st.Code(), reason)
}
