package flightsvc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
)

// Direct reads (docs/protocol.md, Direct reads): a GetFlightInfo whose descriptor command asks
// for "direct" gives every base fragment a client can read by itself an endpoint of its own that
// keeps its DoGet ticket and also carries the data file's location and a DirectRead (the
// fragment's deleted rows, the columns to take). Rows only the server can produce stay DoGet-only:
// MemWAL rows, base rows a MemWAL capture supersedes, a filtered read, and fragments the rules
// below leave out.

const (
	// DirectURLTTL is how long a presigned location of a direct read works (S3).
	DirectURLTTL = 15 * time.Minute
	// maxDirectDeletedRuns bounds a DirectRead's deleted runs: a fragment whose deletions are more
	// scattered than this is read by DoGet only, which keeps the FlightInfo small.
	maxDirectDeletedRuns = 4096
)

// directPlanner makes the endpoints of a direct read of one version of a table.
type directPlanner struct {
	tbl     *engine.Table
	loc     objstore.Locator
	m       *engine.Manifest
	frags   map[uint64]engine.Fragment
	columns []int // the table positions of the columns read
}

// newDirectPlanner returns the planner of a direct read of version m of table with columns (nil:
// all), or nil when the table's store has no locations to give.
func (s *Service) newDirectPlanner(ctx context.Context, table string, m *engine.Manifest, columns []string) (*directPlanner, error) {
	tbl, err := s.sink.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	loc, ok := tbl.Store().(objstore.Locator)
	if !ok {
		return nil, nil
	}
	full := m.ArrowSchema()
	var pos []int
	if len(columns) == 0 {
		for i := range full.NumFields() {
			pos = append(pos, i)
		}
	} else {
		for _, c := range columns {
			idx := full.FieldIndices(c)
			if len(idx) == 0 {
				return nil, invalidf("table %s has no column %q", table, c)
			}
			pos = append(pos, idx[0])
		}
	}
	frags := make(map[uint64]engine.Fragment, len(m.Fragments))
	for _, f := range m.Fragments {
		frags[f.ID] = f
	}
	return &directPlanner{tbl: tbl, loc: loc, m: m, frags: frags, columns: pos}, nil
}

// endpoints returns the endpoints of the base fragments ids, in their order: one with a location
// per fragment a client can read directly, and one DoGet-only endpoint per run of the others.
func (d *directPlanner) endpoints(ctx context.Context, t tableVersion, ids []uint64) ([]*flight.FlightEndpoint, error) {
	var out []*flight.FlightEndpoint
	var pending []uint64 // fragments read by DoGet only, not yet in an endpoint
	ticket := func(frags []uint64) ([]byte, error) {
		return json.Marshal(Ticket{Table: t.table, Version: &d.m.Version, Columns: t.columns, Fragments: &frags, TableID: d.m.TableID})
	}
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		tb, err := ticket(pending)
		if err != nil {
			return err
		}
		out = append(out, &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: tb}})
		pending = nil
		return nil
	}
	for _, id := range ids {
		f := d.frags[id]
		dr, location, err := d.describe(ctx, f)
		if err != nil {
			return nil, err
		}
		if dr == nil {
			pending = append(pending, id)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		tb, err := ticket([]uint64{id})
		if err != nil {
			return nil, err
		}
		md, err := json.Marshal(dr)
		if err != nil {
			return nil, err
		}
		out = append(out, &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: tb},
			Location: []*flight.Location{{Uri: location}}, AppMetadata: md})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// describe returns the DirectRead and location of fragment f, or nil when f is read by DoGet
// only: it has several data files, or deletions scattered over more than maxDirectDeletedRuns runs.
func (d *directPlanner) describe(ctx context.Context, f engine.Fragment) (*DirectRead, string, error) {
	if len(f.Files) != 1 {
		return nil, "", nil
	}
	dr := &DirectRead{Format: "parquet", Fragment: f.ID, Rows: f.LiveRows(), FileRows: f.PhysicalRows,
		Columns: d.columns, Deleted: [][2]int64{}}
	if f.DeletionFile != "" {
		dels, err := d.tbl.Deletions(ctx, f)
		if err != nil {
			return nil, "", err
		}
		it := dels.Iterator()
		for it.HasNext() {
			p := int64(it.Next())
			if n := len(dr.Deleted); n > 0 && dr.Deleted[n-1][1] == p {
				dr.Deleted[n-1][1] = p + 1
				continue
			}
			if len(dr.Deleted) == maxDirectDeletedRuns {
				return nil, "", nil
			}
			dr.Deleted = append(dr.Deleted, [2]int64{p, p + 1})
		}
	}
	location, expires, err := d.loc.Locate(ctx, d.tbl.DataFileKey(f.Files[0]), DirectURLTTL)
	if err != nil {
		return nil, "", err
	}
	if !expires.IsZero() {
		dr.Expires = expires.UTC().Format(time.RFC3339)
	}
	return dr, location, nil
}
