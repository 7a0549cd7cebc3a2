package flightsvc

import (
	"encoding/json"
	"fmt"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/streaming"
)

// parsePutCommand decodes a DoPut command (PutCommand) strictly and converts it into the epoch
// request of streaming.Sink.WriteEpoch, which validates the values (Normalize).
func parsePutCommand(body []byte) (streaming.EpochRequest, error) {
	var c PutCommand
	if err := decodeStrict("DoPut command", body, &c); err != nil {
		return streaming.EpochRequest{}, err
	}
	if c.Table == "" {
		return streaming.EpochRequest{}, invalidf("DoPut command needs \"table\"")
	}
	if c.EpochID == nil {
		return streaming.EpochRequest{}, invalidf("DoPut command needs \"epoch_id\" (use a PATH descriptor for a plain append)")
	}
	lookback, err := lookbackArg(c.Lookback)
	if err != nil {
		return streaming.EpochRequest{}, err
	}
	req := streaming.EpochRequest{Table: c.Table, EpochID: *c.EpochID, Mode: streaming.Mode(c.Mode),
		Route: streaming.Route(c.Route), Lookback: lookback, ExpectRows: c.Rows, MergeSchema: c.MergeSchema != nil && *c.MergeSchema}
	if c.QueryID != nil {
		req.QueryID = *c.QueryID
	}
	if p := c.Partition; p != nil {
		if p.ID == nil {
			return req, invalidf("DoPut command \"partition\" needs \"id\"")
		}
		req.Partition = &streaming.Partition{ID: *p.ID, Attempt: p.Attempt}
	}
	if c.Create.Enabled {
		spec, err := createSpec(c.Create.Spec)
		if err != nil {
			return req, err
		}
		req.Create = &spec
	}
	return req, nil
}

// lookbackArg converts an optional dedupe_lookback_versions to the domain's (0: the server's
// default). A value given explicitly must be in range: 0 is not "absent".
func lookbackArg(l *int) (int, error) {
	if l == nil {
		return 0, nil
	}
	if *l < 1 || *l > streaming.MaxLookback {
		return 0, invalidf("dedupe_lookback_versions must be 1..%d (leave it out for the server's default), got %d", streaming.MaxLookback, *l)
	}
	return *l, nil
}

// getRequest is what a DoGet ticket asks for: a table read, or with changes set a change feed
// read.
type getRequest struct {
	read    streaming.ReadRequest
	changes *changeRequest
}

// parseTicket decodes a DoGet ticket (Ticket) strictly into the read it asks for.
func parseTicket(body []byte) (getRequest, error) {
	var t Ticket
	if err := decodeStrict("ticket", body, &t); err != nil {
		return getRequest{}, err
	}
	if t.Changes != nil {
		c, err := changeTicket(t)
		return getRequest{changes: c}, err
	}
	r, err := readTicket(t)
	return getRequest{read: r}, err
}

// readTicket converts a ticket of a table read into its request.
func readTicket(t Ticket) (streaming.ReadRequest, error) {
	v, err := versionArg(t.Version)
	if err != nil {
		return streaming.ReadRequest{}, err
	}
	cols, filter, err := columnsAndFilter("ticket", t.Columns, t.Filter)
	if err != nil {
		return streaming.ReadRequest{}, err
	}
	r := streaming.ReadRequest{Table: t.Table, Version: v, Columns: cols, Filter: filter, Snapshot: t.Snapshot, MemWAL: t.MemWAL, TableID: t.TableID}
	if t.Fragments != nil {
		r.Fragments = *t.Fragments
		if r.Fragments == nil {
			r.Fragments = []uint64{} // "fragments": [] reads no base fragment
		}
	}
	if t.MemWAL && t.Snapshot == "" {
		return r, invalidf("ticket \"memwal\": true needs the \"snapshot\" of the GetFlightInfo that made it")
	}
	return r, nil
}

// columnsAndFilter checks the "columns" and decodes the "filter" of a ticket or descriptor.
func columnsAndFilter(what string, columns []string, filter json.RawMessage) ([]string, *expr.Predicate, error) {
	if columns != nil && len(columns) == 0 {
		return nil, nil, invalidf("%s \"columns\" must name at least one column (leave it out for every column)", what)
	}
	if len(filter) == 0 || string(filter) == "null" {
		return columns, nil, nil
	}
	p, err := expr.ParsePredicate(filter)
	if err != nil {
		return nil, nil, fmt.Errorf("%s \"filter\": %w", what, err)
	}
	return columns, p, nil
}
