package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/memwal"
)

// InspectCmd describes one version of a table from its manifest.
type InspectCmd struct {
	Table   string `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	Version uint64 `env:"FLIGHT_SINK_INSPECT_VERSION" placeholder:"N" help:"Version to describe; 0 (the default) describes the latest."`
	JSON    bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON instead of text."`
}

// inspectJSON is the --json output; the text output shows the same facts. Its streams are
// table_stats' (flightsvc.Streams).
type inspectJSON struct {
	FormatVersion int    `json:"format_version"`
	Table         string `json:"table"`
	URI           string `json:"uri"`
	Version       uint64 `json:"version"`
	LatestVersion uint64 `json:"latest_version"`
	// ManifestFormatVersion is the format version of the version's manifest.
	ManifestFormatVersion int               `json:"manifest_format_version"`
	Timestamp             string            `json:"timestamp"`
	Operation             engine.Operation  `json:"operation"`
	ReadVersion           uint64            `json:"read_version"`
	Properties            map[string]string `json:"properties,omitempty"`
	TransactionFile       string            `json:"transaction_file"`
	Schema                []fieldJSON       `json:"schema"`
	PrimaryKey            []string          `json:"primary_key"`
	// PartitionBy is the table's partition spec, as table_stats has it (absent: unpartitioned).
	PartitionBy []flightsvc.PartitionField `json:"partition_by,omitempty"`
	Config      map[string]string          `json:"config"`
	// Rows is BaseRows + MemWALRows; MemWAL rows are counted only at the latest version.
	Rows           int64             `json:"rows"`
	BaseRows       int64             `json:"base_rows"`
	MemWALRows     int64             `json:"memwal_rows"`
	PhysicalRows   int64             `json:"physical_rows"`
	DeletedRows    int64             `json:"deleted_rows"`
	DataBytes      int64             `json:"data_bytes"`
	NextFragmentID uint64            `json:"next_fragment_id"`
	Fragments      []fragmentJSON    `json:"fragments"`
	Streams        flightsvc.Streams `json:"streams"`
}

type fieldJSON struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

type fragmentJSON struct {
	ID           uint64 `json:"id"`
	Rows         int64  `json:"rows"`
	PhysicalRows int64  `json:"physical_rows"`
	DeletedRows  int64  `json:"deleted_rows"`
	DeletionFile string `json:"deletion_file,omitempty"`
	// Partition is the fragment's partition tuple, one value per partition_by field.
	Partition partition.Tuple `json:"partition,omitempty"`
	Bytes     int64           `json:"bytes"`
	Files     []fileJSON      `json:"files"`
}

type fileJSON struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
}

// Run prints the description.
func (c *InspectCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, latest, err := openTableLatest(ctx, g, c.Table)
	if err != nil {
		return err
	}
	m := latest
	if c.Version != 0 && c.Version != latest.Version {
		if m, err = t.Manifest(ctx, c.Version); err != nil {
			return err
		}
	}
	var state memwal.TableState
	if m.Version == latest.Version { // the shards hold today's rows, not an older version's
		shards, err := memwal.StoredShards(t, m)
		if err != nil {
			return err
		}
		// One snapshot of the latest version and its shards (a fold meanwhile moves it on).
		if state, err = memwal.ReadLatestTableState(ctx, t, shards); err != nil {
			return err
		}
		m = state.Manifest
		latest = m
	} else if state, err = memwal.ReadTableState(ctx, t, m, nil); err != nil {
		return err
	}
	d := describe(t, m, latest.Version, state)
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return writeInspectText(kctx.Stdout, d)
}

// describe gathers what inspect reports about manifest m and the table's state with it.
func describe(t *engine.Table, m *engine.Manifest, latest uint64, state memwal.TableState) *inspectJSON {
	d := &inspectJSON{
		Table: t.Name(), URI: t.URI(), Version: m.Version, LatestVersion: latest, FormatVersion: flightsvc.FormatVersion,
		ManifestFormatVersion: m.FormatVersion,
		Timestamp:             timeJSON(m.Timestamp()), Operation: m.Transaction.Operation, ReadVersion: m.Transaction.ReadVersion,
		Properties: m.Transaction.Properties, TransactionFile: m.Transaction.File,
		PrimaryKey: m.PrimaryKey, PartitionBy: flightsvc.PartitionFields(m.PartitionSpec), Config: m.Config, Rows: state.Rows(), BaseRows: state.BaseRows, MemWALRows: state.MemWALRows,
		NextFragmentID: m.NextFragmentID,
		Schema:         []fieldJSON{}, Fragments: []fragmentJSON{}, Streams: flightsvc.StreamsOf(state.Streams),
	}
	if d.PrimaryKey == nil {
		d.PrimaryKey = []string{}
	}
	if d.Config == nil {
		d.Config = map[string]string{}
	}
	for _, f := range m.ArrowSchema().Fields() {
		d.Schema = append(d.Schema, fieldJSON{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	for _, f := range m.Fragments {
		fj := fragmentJSON{ID: f.ID, Rows: f.LiveRows(), PhysicalRows: f.PhysicalRows,
			DeletedRows: f.DeletedRows, DeletionFile: f.DeletionFile, Partition: f.Partition, Files: []fileJSON{}}
		for _, df := range f.Files {
			fj.Files = append(fj.Files, fileJSON{Path: df.Path, SizeBytes: df.SizeBytes})
		}
		fj.Bytes = f.DataBytes()
		d.PhysicalRows += f.PhysicalRows
		d.DeletedRows += f.DeletedRows
		d.DataBytes += fj.Bytes
		d.Fragments = append(d.Fragments, fj)
	}
	return d
}

func writeInspectText(out io.Writer, d *inspectJSON) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	latest := "latest"
	if d.Version != d.LatestVersion {
		latest = fmt.Sprintf("latest is %d", d.LatestVersion)
	}
	ts, _ := time.Parse(time.RFC3339Nano, d.Timestamp)
	fmt.Fprintf(w, "table:\t%s\n", d.Table)
	fmt.Fprintf(w, "uri:\t%s\n", d.URI)
	fmt.Fprintf(w, "version:\t%d (%s), committed %s\n", d.Version, latest, timeText(ts))
	fmt.Fprintf(w, "operation:\t%s (read version %d) %s\n", d.Operation, d.ReadVersion, propertiesText(d.Properties))
	fmt.Fprintf(w, "rows:\t%d", d.Rows)
	if d.MemWALRows > 0 {
		fmt.Fprintf(w, " (%d base, %d in MemWAL shards)", d.BaseRows, d.MemWALRows)
	}
	if d.DeletedRows > 0 {
		fmt.Fprintf(w, " (%d physical, %d deleted)", d.PhysicalRows, d.DeletedRows)
	}
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "fragments:\t%d\n", len(d.Fragments))
	fmt.Fprintf(w, "data bytes:\t%d (%s)\n", d.DataBytes, bytesText(d.DataBytes))
	pk := "-"
	if len(d.PrimaryKey) > 0 {
		pk = strings.Join(d.PrimaryKey, ", ")
	}
	fmt.Fprintf(w, "primary key:\t%s\n", pk)
	if len(d.PartitionBy) > 0 {
		fields := make([]string, len(d.PartitionBy))
		for i, f := range d.PartitionBy {
			fields[i] = fmt.Sprintf("%s(%s)", f.Transform, f.Column)
		}
		fmt.Fprintf(w, "partition by:\t%s\n", strings.Join(fields, ", "))
	}
	fmt.Fprintf(w, "config:\t%s\n", propertiesText(d.Config))
	fmt.Fprintf(w, "manifest format version:\t%d\n", d.ManifestFormatVersion)
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nschema:\n")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, f := range d.Schema {
		null := "not null"
		if f.Nullable {
			null = "nullable"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", f.Name, f.Type, null)
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nfragments:\n")
	if len(d.Fragments) == 0 {
		fmt.Fprintf(out, "  (none)\n")
	} else {
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "  ID\tROWS\tDELETED\tPARTITION\tFILE\tSIZE\n")
		for _, f := range d.Fragments {
			deleted := fmt.Sprint(f.DeletedRows)
			if f.DeletionFile != "" {
				deleted += " (" + f.DeletionFile + ")"
			}
			for i, df := range f.Files {
				if i == 0 {
					part := "-"
					if f.Partition != nil {
						part = f.Partition.String()
					}
					fmt.Fprintf(w, "  %d\t%d\t%s\t%s\t%s\t%s\n", f.ID, f.Rows, deleted, part, df.Path, bytesText(df.SizeBytes))
				} else {
					fmt.Fprintf(w, "  \t\t\t\t%s\t%s\n", df.Path, bytesText(df.SizeBytes))
				}
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "\nstreaming watermarks:\n")
	if len(d.Streams) == 0 {
		fmt.Fprintf(out, "  (none)\n")
		return nil
	}
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  QUERY ID\tEPOCH\tVERSION\tCOMMITTED\n")
	for _, q := range slices.Sorted(maps.Keys(d.Streams)) {
		s := d.Streams[q]
		version, when := fmt.Sprint(s.Version), "in MemWAL (not flushed yet)"
		if s.InMemWAL {
			version = "MemWAL"
		}
		if !s.Timestamp.IsZero() {
			when = timeText(s.Timestamp)
		}
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\n", q, s.Epoch, version, when)
	}
	return w.Flush()
}
