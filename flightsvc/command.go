package flightsvc

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/flight-sink/flight-sink/streaming"
)

// putCommand is the JSON command of a DoPut CMD descriptor (docs/protocol.md). Unknown fields
// are ignored, so an option such as write_mode can never change what a stream does.
type putCommand struct {
	Table     string               `json:"table"`
	QueryID   *string              `json:"query_id"`
	EpochID   *int64               `json:"epoch_id"`
	Mode      streaming.Mode       `json:"mode"`
	Route     streaming.Route      `json:"route"`
	Lookback  int                  `json:"dedupe_lookback_versions"`
	Partition *streaming.Partition `json:"partition"`
	Create    json.RawMessage      `json:"create"`
	Rows      *int64               `json:"rows"`
}

// decodeJSON decodes a JSON object body into v with a message naming what was being decoded.
func decodeJSON(what string, body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s is not valid JSON: %v", streaming.ErrInvalidRequest, what, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s has trailing data after the JSON object", streaming.ErrInvalidRequest, what)
	}
	return nil
}

// parsePutCommand turns a DoPut command into an epoch request. isEpoch is false for a plain
// append command (no query_id and no epoch_id at all).
func parsePutCommand(body []byte) (req streaming.EpochRequest, isEpoch bool, err error) {
	var c putCommand
	if err := decodeJSON("DoPut command", body, &c); err != nil {
		return req, false, err
	}
	if c.Table == "" {
		return req, false, fmt.Errorf("%w: DoPut command needs \"table\"", streaming.ErrInvalidRequest)
	}
	req = streaming.EpochRequest{Table: c.Table, Mode: c.Mode, Route: c.Route, Lookback: c.Lookback, Partition: c.Partition, ExpectRows: c.Rows}
	if c.EpochID == nil {
		return req, false, fmt.Errorf("%w: DoPut command needs \"epoch_id\" (use a PATH descriptor for a plain append)", streaming.ErrInvalidRequest)
	}
	req.EpochID = *c.EpochID
	if c.QueryID != nil {
		req.QueryID = *c.QueryID
	}
	create, err := parseCreate(c.Create)
	if err != nil {
		return req, false, err
	}
	req.Create = create
	return req, true, nil
}

// parseCreate accepts `true`, `false`, null or an object with primary_key / memwal.
func parseCreate(raw json.RawMessage) (*streaming.CreateSpec, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "false" {
		return nil, nil
	}
	if string(raw) == "true" {
		return &streaming.CreateSpec{}, nil
	}
	var spec streaming.CreateSpec
	if err := decodeJSON("\"create\"", raw, &spec); err != nil {
		return nil, err
	}
	return &spec, nil
}

// ticket is the JSON of a DoGet ticket.
type ticket struct {
	Table   string   `json:"table"`
	Version uint64   `json:"version,omitempty"`
	Columns []string `json:"columns,omitempty"`
}
