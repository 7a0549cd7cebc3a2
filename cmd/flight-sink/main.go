// Command flight-sink is the flight-sink server and its admin tool. Bare, it prints its help.
//
// Admin subcommands (history, inspect, compact, cleanup) work on a table URI directly, without a
// running server: a table root URI with the table name as its last path element, e.g.
// ./flight-sink-data/events, file:///data/events or s3://bucket/prefix/events. serve runs the
// Arrow Flight server.
//
// Every flag has a matching FLIGHT_SINK_* environment variable. Errors are printed as one line
// on stderr and the process exits with status 1 (130 when interrupted by Ctrl-C or SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/objstore"
)

// Globals are the flags every subcommand accepts. A subcommand's Run method receives them by
// declaring a *Globals parameter (and a context.Context, cancelled on SIGINT/SIGTERM, likewise).
type Globals struct {
	S3Endpoint string `name:"s3-endpoint" env:"FLIGHT_SINK_S3_ENDPOINT" placeholder:"URL" group:"s3" help:"S3 endpoint for s3:// URIs, e.g. http://127.0.0.1:7070 for an S3-compatible server. Default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, then AWS."`
	S3Region   string `name:"s3-region" env:"FLIGHT_SINK_S3_REGION" placeholder:"REGION" group:"s3" help:"S3 region. Default: AWS_REGION / the shared AWS config, then us-east-1."`
	// S3PathStyle shares its variable with objstore.PathStyleEnv, so one setting reaches both the
	// flag and a store opened without options.
	S3PathStyle bool `name:"s3-path-style" env:"FLIGHT_SINK_S3_PATH_STYLE" group:"s3" help:"Address buckets as http://host/bucket (needed by most S3-compatible servers)."`

	Progress string `enum:"auto,always,never" default:"auto" env:"FLIGHT_SINK_PROGRESS" help:"Progress bars on stderr for long work: auto (only on a terminal), always or never."`
}

// S3Options returns the S3 settings of the flags. Bucket and prefix come from each URI, and
// credentials from the AWS default chain.
func (g *Globals) S3Options() *objstore.S3Options {
	return &objstore.S3Options{Endpoint: g.S3Endpoint, Region: g.S3Region, PathStyle: g.S3PathStyle}
}

// CLI is the command line grammar.
type CLI struct {
	Globals

	Tables     TablesCmd     `cmd:"" help:"List the tables under a root with their latest version, rows, fragments, data bytes and last commit."`
	History    HistoryCmd    `cmd:"" help:"List a table's versions, newest first, with their operations and properties."`
	Inspect    InspectCmd    `cmd:"" help:"Describe one version of a table: schema, rows, fragments and files, streaming watermarks, config."`
	Compact    CompactCmd    `cmd:"" help:"Rewrite a table's small fragments, and fragments with many deleted rows, into fewer and denser ones (one Rewrite commit)."`
	Cleanup    CleanupCmd    `cmd:"" help:"Remove a table's expired versions and the files no retained version references."`
	Read       ReadCmd       `cmd:"" help:"Print a table's rows (--filter, --limit, --version, --columns) as a table, CSV or JSON, read from storage as a server reads them."`
	Changes    ChangesCmd    `cmd:"" help:"Print a table's change feed (--from, --to): every row the versions inserted, deleted or updated, with _change_type, _commit_version and _commit_timestamp."`
	Drop       DropCmd       `cmd:"" help:"Delete a table and every file under it (with --yes), as the drop_table action does."`
	Config     ConfigCmd     `cmd:"" help:"Show or change a table's maintenance settings (config get|set TABLE_URI [KEY=VALUE ...]), as the get_table_config and set_table_config actions do."`
	Iceberg    IcebergCmd    `cmd:"" help:"Publish a table as an Apache Iceberg table, or show how far its Iceberg metadata lags (publish|status TABLE_URI)."`
	Serve      ServeCmd      `cmd:"" help:"Serve tables over Arrow Flight."`
	Action     ActionCmd     `cmd:"" help:"Run a Flight action (table_stats, history, compact, cleanup, flush_memwal, ...) against a running server and print its JSON result."`
	Bench      BenchCmd      `cmd:"" help:"Benchmark DoPut throughput, small-epoch rate and ack latency against a local server."`
	Version    VersionCmd    `cmd:"" help:"Print the version of flight-sink (also --version)."`
	Completion CompletionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	Help       HelpCmd       `cmd:"" help:"Print the help of flight-sink, or of a command (help CMD)."`
}

const description = `flight-sink lands streaming micro-batches (Arrow record batches stamped with a query id and an
epoch id) exactly once in versioned, transactional tables on a local disk or S3, and serves them
back over Arrow Flight.

A TABLE_URI is a table root plus the table name as its last path element:
./flight-sink-data/events, file:///data/events or s3://bucket/prefix/events.`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the selected subcommand and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) (code int) {
	// kong ends --help and usage errors with its Exit hook; it returns from run instead.
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = int(c)
		}
	}()
	// --version before any command is `flight-sink version` (a command's own --version, such as
	// inspect's, is that command's flag).
	if len(args) == 1 && args[0] == "--version" {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	// Bare flight-sink prints the help; help CMD is CMD --help.
	if len(args) == 0 {
		args = []string{"--help"}
	} else if args[0] == "help" {
		args = append(append([]string{}, args[1:]...), "--help")
	}
	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("flight-sink"),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit(code)) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.ExplicitGroups([]kong.Group{{
			Key:   "s3",
			Title: "S3 flags (for s3:// URIs)",
			Description: "Credentials come from the standard AWS chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY " +
				"(/ AWS_SESSION_TOKEN), AWS_PROFILE and the shared config files, or an instance role.",
		}}),
	)
	if err != nil {
		// The grammar is static, so this is a programming error.
		fmt.Fprintf(stderr, "flight-sink: internal error: %v\n", err)
		return 1
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "flight-sink: %s (see flight-sink --help)\n", oneLine(err))
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(&cli.Globals)
	if err := kctx.Run(); err != nil {
		if ctx.Err() != nil { // a signal cancelled it, whatever error that made
			fmt.Fprintln(stderr, "flight-sink: interrupted")
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "flight-sink: %s%s\n", oneLine(err), errorHint(err))
		if es := (exitStatusError{}); errors.As(err, &es) {
			return es.code
		}
		return 1
	}
	return 0
}

// errorHint returns what to check after an error, or "": the error's own hint when it has one
// (flightsvc.RootUnavailableError), else for a store that did not answer the settings that
// reach it. One hint at most: the line says its advice once.
func errorHint(err error) string {
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return " (hint: " + h.Hint() + ")"
	}
	if errors.Is(err, objstore.ErrUnavailable) {
		return " (hint: the S3 store did not answer: check that the bucket exists, the credentials " +
			"(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role), and --s3-endpoint, " +
			"--s3-region and --s3-path-style)"
	}
	return ""
}

// kongExit carries kong's exit status out of its Exit hook to run.
type kongExit int

// exitInterrupted is the exit status of a command stopped by SIGINT (Ctrl-C) or SIGTERM: 128 +
// SIGINT, as shells report it.
const exitInterrupted = 130

// oneLine renders err on a single line: wrapped errors from servers may carry newlines.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
