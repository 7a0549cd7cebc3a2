package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/alecthomas/kong"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// ReadCmd prints a table's rows, read from storage as a server reads them.
type ReadCmd struct {
	Table   string   `arg:"" name:"TABLE_URI" help:"Table URI: ./root/table, file:///root/table or s3://bucket/prefix/table."`
	Limit   int64    `default:"100" help:"Print at most this many rows; 0 prints every row."`
	Filter  string   `placeholder:"EXPR" help:"Only rows for which EXPR is true: a text filter (amount > 50 and country = 'NL') or the predicate JSON the server takes ({\"op\": \">\", ...}); docs/protocol.md."`
	Version uint64   `placeholder:"V" help:"Read version V of the base table as it was (default: the latest, with its MemWAL rows not folded yet)."`
	Columns []string `placeholder:"COL,..." help:"Print only these columns, in this order (default: every column)."`
	Format  string   `enum:"table,csv,json" default:"table" help:"Output: table (aligned text), csv (a header line, then RFC 4180 rows; null is empty) or json (one document: format_version, table, version, columns, rows)."`
}

// Validate checks the flags before anything is opened.
func (c *ReadCmd) Validate() error { return validateRowFlags(c.Limit, c.Filter) }

// validateRowFlags checks the --limit and --filter of a verb that prints rows (read, changes).
func validateRowFlags(limit int64, filter string) error {
	if limit < 0 {
		return fmt.Errorf("--limit must be 0 (every row) or positive, got %d", limit)
	}
	if filter != "" {
		if _, err := expr.ParseText(filter); err != nil {
			return err
		}
	}
	return nil
}

// Run reads the table and prints its rows.
func (c *ReadCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	t, err := openTable(ctx, g, c.Table) // fails on a table that does not exist, creating nothing
	if err != nil {
		return err
	}
	var filter *expr.Predicate
	if c.Filter != "" {
		if filter, err = expr.ParseText(c.Filter); err != nil {
			return err
		}
	}
	root, _, err := parseTableURI(c.Table)
	if err != nil {
		return err
	}
	store, err := objstore.Open(ctx, root, g.S3Options())
	if err != nil {
		return err
	}
	// A sink reads as a server does (the base version, less what MemWAL rows supersede, plus
	// them); it claims no shard.
	sink := streaming.NewSink(store, &streaming.Options{})
	defer sink.Close()
	rd, err := sink.Read(ctx, streaming.ReadRequest{Table: t.Name(), Version: c.Version, Columns: c.Columns, Filter: filter})
	if err != nil {
		return err
	}
	defer rd.Release()
	head := struct {
		FormatVersion int    `json:"format_version"`
		Table         string `json:"table"`
		Version       uint64 `json:"version"`
	}{formatVersion, t.Name(), c.Version}
	return printRows(kctx, c.Format, head, c.Limit, rd)
}

// formatVersion is the format_version of the JSON documents the commands print.
const formatVersion = flightsvc.FormatVersion

// printRows prints at most limit rows of rd (0: every row) in format; head holds the JSON
// document's fields before its columns and rows.
func printRows(kctx *kong.Context, format string, head any, limit int64, rd array.RecordReader) error {
	var out rowWriter
	switch format {
	case "csv":
		out = &csvRows{w: csv.NewWriter(kctx.Stdout)}
	case "json":
		out = &jsonRows{w: kctx.Stdout, head: head}
	default:
		out = &textRows{w: tabwriter.NewWriter(kctx.Stdout, 0, 8, 2, ' ', 0)}
	}
	if err := out.begin(rd.Schema()); err != nil {
		return err
	}
	left := limit
	for (limit == 0 || left > 0) && rd.Next() {
		rec := rd.RecordBatch()
		n := rec.NumRows()
		if limit > 0 {
			n = min(n, left)
			left -= n
		}
		for i := range int(n) {
			if err := out.row(rec, i); err != nil {
				return err
			}
		}
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return out.end()
}

// rowWriter prints rows in one output format.
type rowWriter interface {
	begin(schema *arrow.Schema) error
	row(rec arrow.RecordBatch, i int) error
	end() error
}

// cellText renders one value for the text and CSV formats; null is "".
func cellText(col arrow.Array, i int) string {
	if col.IsNull(i) {
		return ""
	}
	return col.ValueStr(i)
}

type textRows struct {
	w *tabwriter.Writer
}

func (o *textRows) begin(schema *arrow.Schema) error {
	for i, f := range schema.Fields() {
		if i > 0 {
			fmt.Fprint(o.w, "\t")
		}
		fmt.Fprint(o.w, f.Name)
	}
	_, err := fmt.Fprintln(o.w)
	return err
}

func (o *textRows) row(rec arrow.RecordBatch, i int) error {
	for c := range int(rec.NumCols()) {
		if c > 0 {
			fmt.Fprint(o.w, "\t")
		}
		v := cellText(rec.Column(c), i)
		if rec.Column(c).IsNull(i) {
			v = "null"
		}
		fmt.Fprint(o.w, v)
	}
	_, err := fmt.Fprintln(o.w)
	return err
}

func (o *textRows) end() error { return o.w.Flush() }

type csvRows struct {
	w   *csv.Writer
	buf []string
}

func (o *csvRows) begin(schema *arrow.Schema) error {
	o.buf = make([]string, schema.NumFields())
	for i, f := range schema.Fields() {
		o.buf[i] = f.Name
	}
	return o.w.Write(o.buf)
}

func (o *csvRows) row(rec arrow.RecordBatch, i int) error {
	for c := range o.buf {
		o.buf[c] = cellText(rec.Column(c), i)
	}
	return o.w.Write(o.buf)
}

func (o *csvRows) end() error {
	o.w.Flush()
	return o.w.Error()
}

// jsonRows writes one JSON document, its rows streamed as they are read: head's fields, then
// the columns and the rows:
//
//	{"format_version": 1, "table": "events", "version": 0, "columns": [{"name", "type"}],
//	 "rows": [{"id": 1, ...}, ...]}
type jsonRows struct {
	w     io.Writer
	head  any      // a struct: the document's fields before "columns"
	names [][]byte // each column's name as a JSON string
	n     int
}

func (o *jsonRows) begin(schema *arrow.Schema) error {
	type column struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	cols := make([]column, schema.NumFields())
	o.names = make([][]byte, schema.NumFields())
	for i, f := range schema.Fields() {
		cols[i] = column{Name: f.Name, Type: f.Type.String()}
		o.names[i], _ = json.Marshal(f.Name)
	}
	head, err := json.Marshal(o.head)
	if err != nil {
		return err
	}
	colsJSON, err := json.Marshal(cols)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.w, "%s,\"columns\":%s,\"rows\":[", head[:len(head)-1], colsJSON)
	return err
}

func (o *jsonRows) row(rec arrow.RecordBatch, i int) error {
	sep := ",\n"
	if o.n == 0 {
		sep = "\n"
	}
	o.n++
	buf := []byte(sep + "{")
	for c := range int(rec.NumCols()) {
		if c > 0 {
			buf = append(buf, ',')
		}
		v, err := json.Marshal(rec.Column(c).GetOneForMarshal(i))
		if err != nil {
			return fmt.Errorf("column %s row %d: %w", rec.ColumnName(c), i, err)
		}
		buf = append(append(append(buf, o.names[c]...), ':'), v...)
	}
	_, err := o.w.Write(append(buf, '}'))
	return err
}

func (o *jsonRows) end() error {
	_, err := fmt.Fprint(o.w, "\n]}\n")
	return err
}
