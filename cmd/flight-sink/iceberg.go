package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/iceberg"
	"github.com/flight-sink/flight-sink/streaming"
)

// IcebergCmd groups the commands on a table's Iceberg metadata (docs/iceberg.md).
type IcebergCmd struct {
	Publish IcebergPublishCmd `cmd:"" help:"Bring a table's Iceberg metadata up to its newest version now (servers do it after every commit)."`
	Status  IcebergStatusCmd  `cmd:"" help:"Show the version a table's Iceberg metadata mirrors and how far it lags."`
}

// IcebergPublishCmd publishes a table's newest version as an Iceberg snapshot.
type IcebergPublishCmd struct {
	Table string `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	JSON  bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of text."`
}

// IcebergStatusCmd shows how far a table's Iceberg metadata lags.
type IcebergStatusCmd struct {
	Table  string        `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	JSON   bool          `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of text."`
	MaxLag time.Duration `name:"max-lag" help:"Exit with status 3 when the oldest acknowledged row Iceberg readers cannot see yet is older than this (0: no check)."`
}

// exitLagExceeded is the exit status of iceberg status --max-lag when the lag exceeds it.
const exitLagExceeded = 3

// icebergPublishJSON is the --json output of iceberg publish (the publish_iceberg action's).
type icebergPublishJSON struct {
	FormatVersion  int    `json:"format_version"`
	Table          string `json:"table"`
	FromVersion    uint64 `json:"from_version"`
	IcebergVersion uint64 `json:"iceberg_version"`
	SnapshotsAdded int    `json:"snapshots_added"`
	MetadataFile   string `json:"metadata_file"`
}

// icebergStatusJSON is the --json output of iceberg status (table_stats' iceberg part).
type icebergStatusJSON struct {
	FormatVersion     int     `json:"format_version"`
	Table             string  `json:"table"`
	Enabled           bool    `json:"enabled"`
	Version           uint64  `json:"version"`
	IcebergVersion    uint64  `json:"iceberg_version"`
	LagVersions       uint64  `json:"lag_versions"`
	LagSeconds        float64 `json:"lag_seconds"`
	MetadataFile      string  `json:"metadata_file"`
	Snapshots         int     `json:"snapshots"`
	CurrentSnapshotID int64   `json:"current_snapshot_id"`
	MissingRows       int64   `json:"missing_rows"`
	MissingSeconds    float64 `json:"missing_seconds"`
}

// Run publishes.
func (c *IcebergPublishCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, err := openTable(ctx, g, c.Table)
	if err != nil {
		return err
	}
	rep, err := iceberg.New(t, nil).Publish(ctx)
	if err != nil {
		return fmt.Errorf("iceberg publish %s: %w", t.Name(), err)
	}
	out := icebergPublishJSON{FormatVersion: flightsvc.FormatVersion, Table: t.Name(), FromVersion: rep.From, IcebergVersion: rep.To, SnapshotsAdded: rep.Snapshots, MetadataFile: rep.MetadataFile}
	if c.JSON {
		return writeJSON(kctx.Stdout, out)
	}
	w := tabwriter.NewWriter(kctx.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table:\t%s\n", out.Table)
	fmt.Fprintf(w, "iceberg version:\t%d (was %d; %d snapshots added)\n", out.IcebergVersion, out.FromVersion, out.SnapshotsAdded)
	fmt.Fprintf(w, "metadata file:\t%s\n", out.MetadataFile)
	return w.Flush()
}

// Run shows the status.
func (c *IcebergStatusCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, err := openTable(ctx, g, c.Table)
	if err != nil {
		return err
	}
	st, err := streaming.StoredIcebergStatus(ctx, t)
	if err != nil {
		return fmt.Errorf("iceberg status %s: %w", t.Name(), err)
	}
	out := icebergStatusJSON{FormatVersion: flightsvc.FormatVersion, Table: t.Name(), Enabled: st.Enabled, Version: st.Version, IcebergVersion: st.IcebergVersion,
		LagVersions: st.LagVersions, LagSeconds: st.LagSeconds, MetadataFile: st.MetadataFile, Snapshots: st.Snapshots,
		CurrentSnapshotID: st.CurrentSnapshotID, MissingRows: st.MissingRows, MissingSeconds: st.MissingSeconds}
	if err := c.print(kctx, out); err != nil {
		return err
	}
	if c.MaxLag > 0 && out.MissingSeconds > c.MaxLag.Seconds() {
		return exitStatusError{code: exitLagExceeded, err: fmt.Errorf("iceberg status %s: %d rows Iceberg readers cannot see, the oldest %.1fs old (--max-lag %v)",
			out.Table, out.MissingRows, out.MissingSeconds, c.MaxLag)}
	}
	return nil
}

// exitStatusError is a command's failure with an exit status of its own (run returns code).
type exitStatusError struct {
	code int
	err  error
}

func (e exitStatusError) Error() string { return e.err.Error() }

func (c *IcebergStatusCmd) print(kctx *kong.Context, out icebergStatusJSON) error {
	if c.JSON {
		return writeJSON(kctx.Stdout, out)
	}
	w := tabwriter.NewWriter(kctx.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table:\t%s (version %d)\n", out.Table, out.Version)
	fmt.Fprintf(w, "publishing:\t%s\n", map[bool]string{true: "on", false: "off (iceberg.publish = false)"}[out.Enabled])
	fmt.Fprintf(w, "iceberg version:\t%d (%d versions behind, %.1fs)\n", out.IcebergVersion, out.LagVersions, out.LagSeconds)
	fmt.Fprintf(w, "metadata file:\t%s\n", out.MetadataFile)
	fmt.Fprintf(w, "snapshots:\t%d (current %d)\n", out.Snapshots, out.CurrentSnapshotID)
	fmt.Fprintf(w, "readers miss:\t%d rows (oldest %.1fs)\n", out.MissingRows, out.MissingSeconds)
	return w.Flush()
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
