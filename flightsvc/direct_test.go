package flightsvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/flightsvc"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// TestDirectEndpoints: a GetFlightInfo with "direct" gives each base fragment an endpoint whose
// location holds the fragment's Parquet file (a file:// path on a local root, a presigned URL
// on S3 that works without credentials) and whose DirectRead, applied to that file, gives exactly
// the rows of the endpoint's DoGet; a plain GetFlightInfo and a filtered one carry no locations.
func TestDirectEndpoints(t *testing.T) {
	t.Parallel()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		directEndpoints(t, startServer(t, flightsvc.Config{}), "file")
	})
	t.Run("s3", func(t *testing.T) {
		t.Parallel()
		uri, opts := storetest.S3(t)
		directEndpoints(t, startServer(t, flightsvc.Config{Root: uri, S3: &opts}), "http")
	})
}

func directEndpoints(t *testing.T, s *testServer, scheme string) {
	ctx := testCtx(t)
	s.putEpoch(t, "d", "q", 0, idRange(0, 10))
	s.putEpoch(t, "d", "q", 1, idRange(10, 10))
	in := func(ids ...int64) cmd { return cmd{"op": "in", "column": "id", "values": ids} }
	s.mustAction(t, "delete", cmd{"table": "d", "where": in(2, 3, 4, 7)}, nil)

	info, err := s.Client.GetFlightInfo(ctx, cmdDesc(t, cmd{"table": "d", "direct": true, "columns": []string{"payload", "id"}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoint) != 2 {
		t.Fatalf("direct GetFlightInfo of 2 fragments: %d endpoints, want 2", len(info.Endpoint))
	}
	var all []int64
	for i, ep := range info.Endpoint {
		if len(ep.Location) != 1 {
			t.Fatalf("endpoint %d: %d locations, want 1", i, len(ep.Location))
		}
		var dr flightsvc.DirectRead
		if err := json.Unmarshal(ep.AppMetadata, &dr); err != nil {
			t.Fatalf("endpoint %d app_metadata %q: %v", i, ep.AppMetadata, err)
		}
		if dr.Format != "parquet" || !slices.Equal(dr.Columns, []int{1, 0}) {
			t.Errorf("endpoint %d: %+v, want format parquet and columns [1 0]", i, dr)
		}
		if i == 0 && !slices.Equal(dr.Deleted, [][2]int64{{2, 5}, {7, 8}}) {
			t.Errorf("endpoint 0 deleted %v, want [[2 5] [7 8]]", dr.Deleted)
		}
		u, err := url.Parse(ep.Location[0].Uri)
		if err != nil || u.Scheme != scheme {
			t.Fatalf("endpoint %d location %q, want a %s URL", i, ep.Location[0].Uri, scheme)
		}
		if scheme == "http" && dr.Expires == "" {
			t.Errorf("endpoint %d: a presigned location without expires", i)
		}
		ids := readDirect(t, u, dr)
		want, err := s.get(ctx, ep.Ticket.Ticket)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want.IDs) || int64(len(ids)) != dr.Rows {
			t.Errorf("endpoint %d: the file with its deletions applied holds %v (rows %d), DoGet returns %v", i, ids, dr.Rows, want.IDs)
		}
		all = append(all, ids...)
	}
	if want := slices.Concat(idRange(0, 2), idRange(5, 2), idRange(8, 12)); !slices.Equal(all, want) {
		t.Errorf("direct reads hold %v, want %v", all, want)
	}

	for _, c := range []cmd{{"table": "d"}, {"table": "d", "direct": true, "filter": cmd{"op": ">", "column": "id", "value": 1}}} {
		info, err := s.Client.GetFlightInfo(ctx, cmdDesc(t, c))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range info.Endpoint {
			if len(ep.Location) != 0 || len(ep.AppMetadata) != 0 {
				t.Errorf("GetFlightInfo %v: an endpoint with a location %v or app_metadata %q", c, ep.Location, ep.AppMetadata)
			}
		}
	}
}

// readDirect reads the file at u (a file:// path, or an http URL fetched without credentials),
// drops dr's deleted rows and returns the "id" column (table position 0).
func readDirect(t *testing.T, u *url.URL, dr flightsvc.DirectRead) []int64 {
	t.Helper()
	var body []byte
	var err error
	if u.Scheme == "file" {
		body, err = os.ReadFile(u.Path)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var req *http.Request
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", u, resp.Status)
			}
			body, err = io.ReadAll(resp.Body)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	pr, err := file.NewParquetReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(body), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if pr.NumRows() != dr.FileRows {
		t.Errorf("file rows %d, DirectRead says %d", pr.NumRows(), dr.FileRows)
	}
	var ids []int64
	var row int64
	for _, chunk := range tbl.Column(0).Data().Chunks() {
		for _, v := range chunk.(*array.Int64).Int64Values() {
			deleted := false
			for _, r := range dr.Deleted {
				deleted = deleted || (row >= r[0] && row < r[1])
			}
			if !deleted {
				ids = append(ids, v)
			}
			row++
		}
	}
	return ids
}

// TestDirectReadPython runs the Python client's direct-read tests (clients/pyspark/tests/
// test_direct_read.py: real pyarrow reading the presigned URLs) against a server on an S3 root.
func TestDirectReadPython(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Python client's tests")
	}
	t.Parallel()
	py := os.Getenv("FLIGHT_SINK_PYTHON")
	if py == "" {
		py = "python3"
	}
	if err := exec.Command(py, "-c", "import pyarrow.flight, pytest, numpy").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s cannot import pyarrow.flight, pytest and numpy: %v", py, err)
		}
		t.Skipf("%s cannot import pyarrow.flight, pytest and numpy (set FLIGHT_SINK_PYTHON to the project virtualenv's python, make pydeps): %v", py, err)
	}
	uri, opts := storetest.S3(t)
	s := startServer(t, flightsvc.Config{Root: uri, S3: &opts})
	dir, err := filepath.Abs("../clients/pyspark")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "s3", "tests/test_direct_read.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLIGHT_SINK_TEST_S3_SERVER=grpc://"+s.Addr, "PYTHONPATH="+filepath.Join(dir, "src"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest test_direct_read.py -k s3: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " passed") || strings.Contains(string(out), "skipped") {
		t.Fatalf("pytest test_direct_read.py -k s3 did not run every S3 case:\n%s", out)
	}
	t.Logf("%s", out)
}
