package flightsvc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/streaming"
)

// The change feed on the wire (docs/protocol.md, Change feed): a ticket or descriptor command
// with "changes" reads engine.Table.Changes instead of a version's rows.

// changeRequest is a decoded change feed read: a range of a table's versions, the columns and
// filter of its rows, and, in a ticket GetFlightInfo made, the table incarnation it was planned
// on.
type changeRequest struct {
	table   string
	opts    engine.ChangeOptions
	columns []string
	filter  json.RawMessage
	tableID string
}

// parseChangeRange checks the "changes" of what (a ticket or a descriptor command) and returns
// the read it asks for.
func parseChangeRange(what, table string, c *ChangeRange, columns []string, filter json.RawMessage, tableID string) (*changeRequest, error) {
	if table == "" {
		return nil, invalidf("%s needs \"table\"", what)
	}
	if c.FromVersion == nil {
		return nil, invalidf("%s \"changes\" needs \"from_version\" (>= 1)", what)
	}
	from := *c.FromVersion
	if from < 1 {
		return nil, invalidf("%s \"changes\" \"from_version\" must be >= 1 (versions start at 1), got %d", what, from)
	}
	r := &changeRequest{table: table, columns: columns, filter: filter, tableID: tableID}
	r.opts.From = uint64(from)
	if c.ToVersion != nil {
		if *c.ToVersion < from {
			return nil, invalidf("%s \"changes\" \"to_version\" %d is before \"from_version\" %d (leave it out for the latest)", what, *c.ToVersion, from)
		}
		r.opts.To = uint64(*c.ToVersion)
	}
	if c.SchemaVersion != nil {
		if *c.SchemaVersion < 1 {
			return nil, invalidf("%s \"changes\" \"schema_version\" must be >= 1, got %d", what, *c.SchemaVersion)
		}
		r.opts.SchemaVersion = uint64(*c.SchemaVersion)
	}
	cols, pred, err := columnsAndFilter(what, columns, filter)
	if err != nil {
		return nil, err
	}
	r.opts.Columns, r.opts.Filter = cols, pred
	return r, nil
}

// changeTicket converts a ticket with "changes" into its read.
func changeTicket(t Ticket) (*changeRequest, error) {
	if t.Version != nil || t.Fragments != nil || t.Snapshot != "" || t.MemWAL {
		return nil, invalidf("ticket \"changes\" reads a range of versions: it takes no \"version\", \"fragments\", \"snapshot\" or \"memwal\"")
	}
	return parseChangeRange("ticket", t.Table, t.Changes, t.Columns, t.Filter, t.TableID)
}

// resolveChanges checks the range of c against its table and resolves it
// (engine.Table.ResolveChanges), refusing a table other than the incarnation c was planned on.
func (s *Service) resolveChanges(ctx context.Context, c *changeRequest) (*engine.Table, engine.ChangeRange, error) {
	tbl, err := s.sink.Table(ctx, c.table)
	if err != nil {
		return nil, engine.ChangeRange{}, err
	}
	r, err := tbl.ResolveChanges(ctx, c.opts)
	if err != nil {
		return nil, r, err
	}
	if c.tableID != "" && r.Schema.TableID != c.tableID {
		return nil, r, fmt.Errorf("%w: table %s was dropped after the read was planned (table id %s, now %s): describe it again",
			engine.ErrTableNotFound, c.table, c.tableID, r.Schema.TableID)
	}
	return tbl, r, nil
}

// readChanges opens the change read c.
func (s *Service) readChanges(ctx context.Context, c *changeRequest) (array.RecordReader, error) {
	tbl, r, err := s.resolveChanges(ctx, c)
	if err != nil {
		return nil, err
	}
	o := c.opts
	o.Allocator = s.getAlloc
	return tbl.ChangesOf(ctx, r, o)
}

// changeSchema is the schema c's reads return.
func (s *Service) changeSchema(ctx context.Context, c *changeRequest) (*arrow.Schema, error) {
	_, r, err := s.resolveChanges(ctx, c)
	if err != nil {
		return nil, err
	}
	sc, err := engine.ChangeSchema(r.Schema.ArrowSchema(), c.opts.Columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", c.table, err)
	}
	return sc, nil
}

// changeFlightInfo describes the change read c as endpoints, each the changes of a run of
// consecutive versions of about endpointBytes of data, in version order; every ticket names the
// resolved range's end as its schema version, so all of them return one schema. A range with
// no version yet (from past the latest) has no endpoint.
func (s *Service) changeFlightInfo(ctx context.Context, c *changeRequest) (*flight.FlightInfo, error) {
	tbl, r, err := s.resolveChanges(ctx, c)
	if err != nil {
		return nil, err
	}
	sc, err := engine.ChangeSchema(r.Schema.ArrowSchema(), c.opts.Columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", c.table, err)
	}
	if c.opts.Filter != nil {
		if err := c.opts.Filter.Validate(r.Schema.ArrowSchema()); err != nil {
			return nil, fmt.Errorf("table %s: descriptor command \"filter\": %w", c.table, err)
		}
	}
	counts, err := tbl.ChangeCounts(ctx, r)
	if err != nil {
		return nil, err
	}
	info := &flight.FlightInfo{
		Schema:           flight.SerializeSchema(sc, s.alloc),
		FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{c.table}},
	}
	target := s.endpointBytes
	if target <= 0 {
		target = streaming.DefaultEndpointBytes
	}
	schemaVersion := int64(r.Schema.Version)
	addEndpoint := func(from, to uint64) error {
		f, t := int64(from), int64(to)
		tb, err := json.Marshal(Ticket{Table: c.table, Columns: c.columns, Filter: c.filter, TableID: r.Schema.TableID,
			Changes: &ChangeRange{FromVersion: &f, ToVersion: &t, SchemaVersion: &schemaVersion}})
		if err != nil {
			return err
		}
		info.Endpoint = append(info.Endpoint, &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: tb}})
		return nil
	}
	var start uint64
	var bytes int64
	for _, vc := range counts {
		if start == 0 {
			start = vc.Version
		}
		info.TotalRecords += vc.Rows
		info.TotalBytes += vc.Bytes
		if bytes += vc.Bytes; bytes >= target {
			if err := addEndpoint(start, vc.Version); err != nil {
				return nil, err
			}
			start, bytes = 0, 0
		}
	}
	if start != 0 {
		if err := addEndpoint(start, r.To); err != nil {
			return nil, err
		}
	}
	if c.opts.Filter != nil {
		info.TotalRecords = -1
	}
	return info, nil
}
