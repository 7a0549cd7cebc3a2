package flightsvc_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// TestFlightInfoAcceptsWhatTicketsServe: for each descriptor command, GetFlightInfo either
// refuses it, or answers endpoints whose every ticket DoGet serves; the rows read add up to its
// total_records where it states one.
func TestFlightInfoAcceptsWhatTicketsServe(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	for e := int64(0); e < 3; e++ {
		s.putEpoch(t, "t", "q", e, idRange(e*10, 3))
	}
	s.mustPut(t, cmd{"table": "m", "query_id": "q", "epoch_id": 0, "create": cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}}, []int64{1, 2, 3})
	for _, tc := range []struct {
		cmd  string
		code codes.Code // OK: served
	}{
		{`{"table": "t"}`, codes.OK},
		{`{"table": "t", "version": 2}`, codes.OK},
		{`{"table": "t", "columns": ["payload"]}`, codes.OK},
		{`{"table": "t", "columns": ["payload"], "filter": {"op": ">", "column": "id", "value": 5}}`, codes.OK},
		{`{"table": "t", "filter": {"op": "in", "column": "id", "values": [1, null]}}`, codes.OK},
		{`{"table": "t", "filter": {"op": "=", "column": "payload", "value": 3}}`, codes.InvalidArgument},
		{`{"table": "t", "columns": []}`, codes.InvalidArgument},
		{`{"table": "t", "columns": ["id", "id"]}`, codes.InvalidArgument},
		{`{"table": "t", "version": 99}`, codes.NotFound},
		{`{"table": "m"}`, codes.OK},
		{`{"table": "m", "version": 1}`, codes.OK},
		{`{"table": "m", "columns": ["id"], "filter": {"op": "is_not_null", "column": "payload"}}`, codes.OK},
	} {
		info, err := s.Client.GetFlightInfo(testCtx(t), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(tc.cmd)})
		if tc.code != codes.OK {
			wantCode(t, err, tc.code)
			continue
		}
		if err != nil {
			t.Errorf("%s: GetFlightInfo: %v", tc.cmd, err)
			continue
		}
		var rows int64
		for i, ep := range info.Endpoint {
			r, err := s.get(testCtx(t), ep.Ticket.Ticket)
			if err != nil {
				t.Errorf("%s: endpoint %d ticket %s: %v", tc.cmd, i, ep.Ticket.Ticket, err)
			}
			rows += r.Rows
		}
		if info.TotalRecords >= 0 && rows != info.TotalRecords {
			t.Errorf("%s: endpoints read %d rows, total_records %d", tc.cmd, rows, info.TotalRecords)
		}
	}
}
