package flightsvc_test

// FuzzCalls: the calls other than DoPut (FuzzDoPut and FuzzDoGet cover it), end to end over a
// real socket. Whatever the body, ticket, descriptor or criteria, the server answers with a
// result or a status, never panics or goes away, and the tables it holds still read.

import (
	"bytes"
	"errors"
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
	// example is the docs/protocol.md request example (by key) whose body makes a seed, or "".
	example string
	run     func(c *flightConn, t *testing.T, arg []byte) error
}

func fuzzCalls() []fuzzCall {
	var calls []fuzzCall
	for _, name := range flightsvc.ActionNames() {
		calls = append(calls, fuzzCall{name: "DoAction " + name, example: name,
			run: func(c *flightConn, t *testing.T, arg []byte) error {
				_, err := c.action(testCtx(t), name, arg)
				return err
			}})
	}
	return append(calls,
		fuzzCall{"DoAction <type from input>", "", func(c *flightConn, t *testing.T, arg []byte) error {
			typ, body, _ := bytes.Cut(arg, []byte{0})
			_, err := c.action(testCtx(t), string(typ), body)
			return err
		}},
		fuzzCall{"DoGet", "doget filter", func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.get(testCtx(t), arg)
			return err
		}},
		fuzzCall{"GetFlightInfo CMD", "flightinfo filter", func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.Client.GetFlightInfo(testCtx(t), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: arg})
			return err
		}},
		fuzzCall{"GetFlightInfo PATH", "", func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.Client.GetFlightInfo(testCtx(t), pathDesc(strings.Split(string(arg), "\x00")...))
			return err
		}},
		fuzzCall{"GetSchema CMD", "flightinfo", func(c *flightConn, t *testing.T, arg []byte) error {
			_, err := c.Client.GetSchema(testCtx(t), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: arg})
			return err
		}},
		fuzzCall{"ListFlights", "", func(c *flightConn, t *testing.T, arg []byte) error {
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

// FuzzCalls runs on a server holding the tables the documented examples name: "events" (keyed
// on id, direct) and "clicks" (keyed, two MemWAL shards), each with rows.
func FuzzCalls(f *testing.F) {
	s := startServer(f, flightsvc.Config{PutIdleTimeout: -1})
	s.mustAction(f, "create_table", cmd{"table": "events", "primary_key": []string{"id"}, "schema": []cmd{
		{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}}, nil)
	s.putEpoch(f, "events", "setup", 0, []int64{1, 2, 3})
	s.putEpoch(f, "events", "setup", 1, []int64{4, 5})
	s.mustPut(f, cmd{"table": "clicks", "query_id": "setup", "epoch_id": 0,
		"create": cmd{"primary_key": []string{"id"}, "memwal": cmd{"shards": 2}}}, []int64{1, 2, 3})

	calls := fuzzCalls()
	ex := readDocExamples(f)["request"]
	for i, c := range calls {
		arg := []byte(`{"table": "events"}`)
		if e, ok := ex[c.example]; ok {
			arg = e.body
		}
		switch c.name {
		case "DoAction <type from input>":
			arg = append([]byte("table_stats\x00"), arg...)
		case "GetFlightInfo PATH":
			arg = []byte("clicks")
		}
		f.Add(append([]byte{byte(i)}, arg...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		c := calls[int(b[0])%len(calls)]
		err := c.run(&s.flightConn, t, b[1:])
		t.Logf("%s %q: %v", c.name, b[1:], err)
		wantServing(t, c.name, err)
		for _, table := range []string{"events", "clicks"} {
			if _, err := s.get(testCtx(t), cmd{"table": table}); err != nil {
				t.Fatalf("reading %s after %s %q: %v", table, c.name, b[1:], err)
			}
		}
	})
}
