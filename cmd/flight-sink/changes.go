package main

import (
	"context"
	"fmt"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/expr"
)

// ChangesCmd prints a table's change feed over a range of versions, read from storage as a
// server reads a change ticket (docs/protocol.md, Change feed).
type ChangesCmd struct {
	Table   string   `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	From    uint64   `required:"" placeholder:"N" help:"The first version whose changes are printed (>= 1)."`
	To      uint64   `placeholder:"M" help:"The last version (inclusive; default: the latest)."`
	Limit   int64    `placeholder:"N" help:"Print at most this many rows; 0 (the default) prints every row."`
	Filter  string   `placeholder:"EXPR" help:"Only changed rows for which EXPR is true (on the table's columns), as read's --filter takes it."`
	Columns []string `placeholder:"COL,..." help:"Print only these table columns, in this order (default: every column); the change columns follow."`
	Format  string   `enum:"table,csv,json" default:"table" help:"Output: table (aligned text), csv (a header line, then RFC 4180 rows; null is empty) or json (one document: format_version, table, from_version, to_version, columns, rows)."`
}

// Validate checks the flags before anything is opened.
func (c *ChangesCmd) Validate() error {
	if c.From < 1 {
		return fmt.Errorf("--from must be >= 1 (versions start at 1), got %d", c.From)
	}
	if c.To != 0 && c.To < c.From {
		return fmt.Errorf("--to %d is before --from %d (leave it out for the latest)", c.To, c.From)
	}
	return validateRowFlags(c.Limit, c.Filter)
}

// Run reads the changes and prints them.
func (c *ChangesCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, err := openTable(ctx, g, c.Table) // fails on a table that does not exist, creating nothing
	if err != nil {
		return err
	}
	o := engine.ChangeOptions{From: c.From, To: c.To, Columns: c.Columns}
	if c.Filter != "" {
		if o.Filter, err = expr.ParseText(c.Filter); err != nil {
			return err
		}
	}
	r, err := t.ResolveChanges(ctx, o)
	if err != nil {
		return err
	}
	rd, err := t.ChangesOf(ctx, r, o)
	if err != nil {
		return err
	}
	defer rd.Release()
	head := struct {
		FormatVersion int    `json:"format_version"`
		Table         string `json:"table"`
		FromVersion   uint64 `json:"from_version"`
		ToVersion     uint64 `json:"to_version"`
	}{formatVersion, t.Name(), r.From, r.To}
	return printRows(kctx, c.Format, head, c.Limit, rd)
}
