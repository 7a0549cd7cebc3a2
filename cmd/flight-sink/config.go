package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// ConfigCmd reads and changes a table's maintenance settings, as the get_table_config and
// set_table_config actions do.
type ConfigCmd struct {
	Get ConfigGetCmd `cmd:"" help:"List a table's maintenance settings: each key, its value, and whether the table stores it or it is the default."`
	Set ConfigSetCmd `cmd:"" help:"Change maintenance settings (KEY=VALUE; KEY= restores the default) in one commit; the next maintenance run follows them."`
}

// ConfigGetCmd lists a table's maintenance settings.
type ConfigGetCmd struct {
	Table string `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	JSON  bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON (the get_table_config action's result) instead of a table."`
}

// ConfigSetCmd changes a table's maintenance settings.
type ConfigSetCmd struct {
	Table    string   `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	Settings []string `arg:"" name:"KEY=VALUE" help:"Settings to change, e.g. compaction.max_fragments=128 (keys: flight-sink config get)."`
	JSON     bool     `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON (the set_table_config action's result) instead of a table."`
}

// Run prints the settings of the table's latest version.
func (c *ConfigGetCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, latest, err := openTableLatest(ctx, g, c.Table)
	if err != nil {
		return err
	}
	cfg, err := flightsvc.TableConfigOf(t.Name(), latest)
	if err != nil {
		return err
	}
	return printTableConfig(kctx.Stdout, cfg, c.JSON)
}

// Validate parses the settings before anything is opened.
func (c *ConfigSetCmd) Validate() error {
	_, err := parseSettings(c.Settings)
	return err
}

// Run commits the settings and prints the settings of the version that committed them.
func (c *ConfigSetCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	set, err := parseSettings(c.Settings)
	if err != nil {
		return err
	}
	t, err := openTable(ctx, g, c.Table)
	if err != nil {
		return err
	}
	m, err := t.SetMaintenance(ctx, set, nil)
	if err != nil {
		return err
	}
	cfg, err := flightsvc.TableConfigOf(t.Name(), m)
	if err != nil {
		return err
	}
	return printTableConfig(kctx.Stdout, cfg, c.JSON)
}

// parseSettings splits KEY=VALUE arguments; a key given twice is an error.
func parseSettings(args []string) (map[string]string, error) {
	set := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: setting %q: want KEY=VALUE (KEY= restores the default; keys: %s)",
				engine.ErrInvalidConfig, a, strings.Join(engine.MaintenanceKeys(), ", "))
		}
		if _, dup := set[k]; dup {
			return nil, fmt.Errorf("%w: key %q given twice", engine.ErrInvalidConfig, k)
		}
		set[k] = v
	}
	return set, nil
}

func printTableConfig(w io.Writer, cfg flightsvc.TableConfig, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(cfg)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "table %s, version %d\n", cfg.Table, cfg.Version)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range cfg.Settings {
		src := "default"
		if s.Stored {
			src = "table"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, s.Value, src)
	}
	return tw.Flush()
}
