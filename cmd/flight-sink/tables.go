package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// TablesCmd lists the tables under a root.
type TablesCmd struct {
	Root string `arg:"" name:"ROOT_URI" help:"Table root: ./root, file:///root or s3://bucket/prefix."`
	JSON bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of a table."`
}

// tablesFormatVersion is the version of the --json shape; it changes only when a field changes
// meaning or goes away.
const tablesFormatVersion = 1

// tablesJSON is the --json output.
type tablesJSON struct {
	FormatVersion int             `json:"format_version"`
	Root          string          `json:"root"`
	Tables        []tableLineJSON `json:"tables"`
}

// tableLineJSON is one table of tablesJSON; Error replaces the figures of a table whose latest
// version cannot be read.
type tableLineJSON struct {
	Table      string `json:"table"`
	Version    uint64 `json:"version,omitempty"`
	Rows       int64  `json:"rows"`
	Fragments  int    `json:"fragments"`
	DataBytes  int64  `json:"data_bytes"`
	LastCommit string `json:"last_commit,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Run lists the tables in name order with their latest version, base-table rows, fragments,
// data bytes and last commit time.
func (c *TablesCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	if dir, ok := localDir(c.Root); ok {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("root %s: directory %s does not exist", c.Root, dir)
		}
	}
	store, err := objstore.Open(ctx, c.Root, g.S3Options())
	if err != nil {
		return err
	}
	names, err := engine.ListTables(ctx, store)
	if err != nil {
		return err
	}
	out := tablesJSON{FormatVersion: tablesFormatVersion, Root: store.String(), Tables: []tableLineJSON{}}
	for _, name := range names {
		line := tableLineJSON{Table: name}
		t, err := engine.Open(ctx, store, name, nil)
		var m *engine.Manifest
		if err == nil {
			m, err = t.Latest(ctx)
		}
		if err != nil {
			line.Error = err.Error()
		} else {
			line.Version, line.Rows, line.Fragments, line.DataBytes = m.Version, m.Rows(), len(m.Fragments), m.DataBytes()
			line.LastCommit = timeJSON(m.Timestamp())
		}
		out.Tables = append(out.Tables, line)
	}
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(out.Tables) == 0 {
		_, err := fmt.Fprintf(kctx.Stdout, "no tables in %s\n", out.Root)
		return err
	}
	tw := tabwriter.NewWriter(kctx.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tVERSION\tROWS\tFRAGMENTS\tDATA\tLAST COMMIT")
	for _, l := range out.Tables {
		if l.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\terror: %s\n", l.Table, oneLine(errors.New(l.Error)))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", l.Table, l.Version, l.Rows, l.Fragments, bytesText(l.DataBytes), l.LastCommit)
	}
	return tw.Flush()
}
