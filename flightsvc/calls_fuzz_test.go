package flightsvc_test

// FuzzCalls: the calls other than DoPut (FuzzDoPut and FuzzDoGet cover it), end to end over a
// real socket. Whatever the body, ticket, descriptor or criteria, the server answers with a
// result or a status, never panics or goes away, and the tables it holds still read.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// fuzzCall is one call FuzzCalls can make; the input's first byte picks it, the rest is its
// argument.
type fuzzCall struct {
	name string
	seed []byte // the argument of its seed input
	run  func(c *flightConn, t *testing.T, arg []byte) error
}

// fuzzCalls are the calls, seeded with the docs/protocol.md request examples (ex, by key).
func fuzzCalls(ex map[string]docExample) []fuzzCall {
	var calls []fuzzCall
	for _, name := range flightsvc.ActionNames() {
		calls = append(calls, fuzzCall{name: "DoAction " + name, seed: ex[name].body,
			run: func(c *flightConn, t *testing.T, arg []byte) error {
				_, err := c.action(testCtx(t), name, arg)
				return err
			}})
	}
	return append(calls,
		fuzzCall{"DoAction <type from input>", []byte("table_stats\x00" + `{"table": "events"}`), func(c *flightConn, t *testing.T, arg []byte) error {
			typ, body, _ := bytes.Cut(arg, []byte{0})
			_, err := c.action(testCtx(t), string(typ), body)
			return err
		}},
		fuzzCall{"DoGet", ex["doget filter"].body, func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.get(testCtx(t), arg)
			return err
		}},
		fuzzCall{"GetFlightInfo CMD", ex["flightinfo filter"].body, flightInfoCMD},
		fuzzCall{"GetFlightInfo CMD direct", ex["flightinfo direct"].body, flightInfoCMD},
		fuzzCall{"GetFlightInfo PATH", []byte("clicks"), func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.Client.GetFlightInfo(testCtx(t), pathDesc(strings.Split(string(arg), "\x00")...))
			return err
		}},
		fuzzCall{"GetSchema CMD", ex["flightinfo"].body, func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.Client.GetSchema(testCtx(t), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: arg})
			return err
		}},
		fuzzCall{"ListFlights", []byte(`{"table": "events"}`), func(c *flightConn, t *testing.T, arg []byte) error {
			stream, err := c.Client.ListFlights(testCtx(t), &flight.Criteria{Expression: arg})
			for err == nil {
				_, err = stream.Recv()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}},
	)
}

// flightInfoCMD calls GetFlightInfo with arg as the descriptor's command.
func flightInfoCMD(c *flightConn, t *testing.T, arg []byte) error {
	_, err := c.Client.GetFlightInfo(testCtx(t), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: arg})
	return err
}

// FuzzCalls runs on a server holding the tables the documented examples name: "events" (keyed
// on id, direct) and "clicks" (keyed, two MemWAL shards), each with rows.
func FuzzCalls(f *testing.F) {
	s := startServer(f, flightsvc.Config{PutIdleTimeout: -1})
	// setup makes the tables; again after a drop_table removed one.
	setup := func(tb testing.TB, table string) {
		switch table {
		case "events":
			s.mustAction(tb, "create_table", cmd{"table": "events", "primary_key": []string{"id"}, "schema": []cmd{
				{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}, nil)
			s.putEpoch(tb, "events", "setup", 0, []int64{1, 2, 3})
			s.putEpoch(tb, "events", "setup", 1, []int64{4, 5})
		case "clicks":
			s.mustPut(tb, cmd{"table": "clicks", "query_id": "setup", "epoch_id": 0,
				"create": cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}}, []int64{1, 2, 3})
		}
	}
	setup(f, "events")
	setup(f, "clicks")

	calls := fuzzCalls(readDocExamples(f)["request"])
	for i, c := range calls {
		if len(c.seed) == 0 {
			f.Fatalf("%s: docs/protocol.md has no request example for its seed", c.name)
		}
		f.Add(append([]byte{byte(i)}, c.seed...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		c := calls[int(b[0])%len(calls)]
		call := fmt.Sprintf("%s %q", c.name, b[1:])
		wantServing(t, call, c.run(&s.flightConn, t, b[1:]))
		for _, table := range []string{"events", "clicks"} {
			_, err := s.get(testCtx(t), cmd{"table": table})
			if err != nil && reasonOf(err) == "TABLE_NOT_FOUND" && strings.Contains(call, "drop_table") {
				setup(t, table) // the input dropped it: a drop must leave the name free
				_, err = s.get(testCtx(t), cmd{"table": table})
			}
			if err != nil {
				t.Fatalf("reading %s after %s: %v", table, call, err)
			}
		}
	})
}
