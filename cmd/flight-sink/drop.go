package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// DropCmd deletes a table and every object under it, as the drop_table action does.
type DropCmd struct {
	Table string `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	Yes   bool   `name:"yes" help:"Drop for real: without it the command refuses, naming what it would delete."`
	JSON  bool   `name:"json" env:"FLIGHT_SINK_JSON" help:"Print JSON (the drop_table action's result) instead of text."`
}

// Run drops the table. Servers serving the table's root refuse its writers' next commits and
// find it gone at their next request for it (TABLE_NOT_FOUND). With --yes it reads nothing of
// the table first, so a table too damaged to open is dropped too.
func (c *DropCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	if !c.Yes {
		t, latest, err := openTableLatest(ctx, g, c.Table)
		if errors.Is(err, engine.ErrTableNotFound) {
			return err
		}
		if err != nil {
			return fmt.Errorf("drop %s: would delete the table, which cannot be read (%w), and every file under it; run again with --yes", c.Table, err)
		}
		return fmt.Errorf("drop %s: would delete table %s (version %d, %d rows) and every file under it; run again with --yes",
			c.Table, t.Name(), latest.Version, latest.Rows())
	}
	store, name, err := openTableStore(ctx, g, c.Table)
	if err != nil {
		return err
	}
	v, err := engine.Drop(ctx, store, name)
	if err != nil {
		return err
	}
	out := flightsvc.DropTableResult{FormatVersion: flightsvc.FormatVersion, Table: name, Version: v}
	if c.JSON {
		enc := json.NewEncoder(kctx.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	_, err = fmt.Fprintf(kctx.Stdout, "dropped table %s (%s/%s), newest version %d\n", out.Table, store, name, out.Version)
	return err
}
