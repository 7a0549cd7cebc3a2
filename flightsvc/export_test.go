package flightsvc

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/apache/arrow-go/v18/arrow/flight"
)

// DecodeRequest decodes a request body the way the server does, strictly, for the golden test of
// docs/protocol.md. name is "doput" (a DoPut command), "doget" (a ticket), "flightinfo" (a
// descriptor command) or an action name.
func DecodeRequest(name string, body []byte) error {
	switch name {
	case "doput":
		_, err := parsePutCommand(body)
		return err
	case "doget":
		_, err := parseTicket(body)
		return err
	case "flightinfo":
		_, err := tableFromDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: body})
		return err
	}
	act, ok := actions[name]
	if !ok {
		return fmt.Errorf("no action %q", name)
	}
	return act.decode(name, body)
}

// ActionNames lists the actions the server runs, sorted.
func ActionNames() []string {
	names := make([]string, 0, len(actions))
	for n := range actions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// IcebergRESTHandler returns the server's Iceberg REST catalog handler (mounted under /iceberg)
// with the given bearer tokens, for the fuzz target to call without a socket.
func IcebergRESTHandler(s *Server, tokens ...string) http.Handler {
	auth := &tokenAuth{}
	for _, t := range tokens {
		auth.tokens = append(auth.tokens, []byte(t))
	}
	return icebergCatalog(s.svc, auth)
}

// ReadAheadPeaks makes every DoGet stream closed from now on send the most bytes of batches it
// held at once (read, queued and being sent) to peaks, until the returned func is called.
func ReadAheadPeaks(peaks chan<- int64) (stop func()) {
	report := func(p int64) { peaks <- p }
	readAheadPeak.Store(&report)
	return func() { readAheadPeak.Store(nil) }
}

// ReadAheadBytes is the bytes of batches a DoGet reads ahead at most.
const ReadAheadBytes = readAheadBytes
