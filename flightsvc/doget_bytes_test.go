package flightsvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/flightsvc"
)

// dataFileCodecs returns the compression of every column chunk of every data file under the
// table's data directory.
func dataFileCodecs(t testing.TB, root, table string) []compress.Compression {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, table, "data", "*.parquet"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no data files of %s (%v)", table, err)
	}
	var out []compress.Compression
	for _, p := range paths {
		pr, err := file.OpenParquetFile(p, false)
		if err != nil {
			t.Fatal(err)
		}
		md := pr.MetaData()
		for g := range md.NumRowGroups() {
			for c := range md.NumColumns() {
				cc, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, cc.Compression())
			}
		}
		pr.Close()
	}
	return out
}

// TestDataCodecOption: create_table and DoPut's "create" take "data_codec"; the table's data files
// are compressed with it and read back whole over DoGet. An unknown codec is InvalidArgument
// (INVALID_REQUEST) naming the option, and creates nothing.
func TestDataCodecOption(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	want := map[string]compress.Compression{
		"zstd": compress.Codecs.Zstd, "lz4_raw": compress.Codecs.Lz4Raw,
		"snappy": compress.Codecs.Snappy, "none": compress.Codecs.Uncompressed,
		"": compress.Codecs.Zstd, // the default (engine.DefaultDataCodec)
	}
	if want[""] != want[string(engine.DefaultDataCodec)] {
		t.Fatalf("the test's default is not engine.DefaultDataCodec %q", engine.DefaultDataCodec)
	}
	for codec, comp := range want {
		for _, via := range []string{"create_table", "doput"} {
			table := fmt.Sprintf("t_%s_%s", via, codec)
			spec := map[string]any{}
			if codec != "" {
				spec["data_codec"] = codec
			}
			if via == "create_table" {
				spec["table"] = table
				spec["schema"] = []map[string]any{{"name": "id", "type": "int64", "nullable": false}, {"name": "payload", "type": "utf8"}}
				s.mustAction(t, "create_table", spec, nil)
				s.putEpoch(t, table, "q", 0, idRange(0, 3000))
			} else {
				c := epochCmd(table, "q", 0)
				c["create"] = spec
				s.mustPut(t, c, idRange(0, 3000))
			}
			r, err := s.get(testCtx(t), cmd{"table": table})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.IDs, idRange(0, 3000)) || r.Payloads[0] != "row-0" {
				t.Fatalf("%s: read %d rows back, want ids 0..2999", table, len(r.IDs))
			}
			for _, got := range dataFileCodecs(t, s.Root, table) {
				if got != comp {
					t.Fatalf("%s: a column chunk is compressed with %v, want %v", table, got, comp)
				}
			}
		}
	}
	for _, bad := range []string{"brotli", "ZSTD", "gzip"} {
		_, err := s.action(testCtx(t), "create_table", map[string]any{"table": "bad", "data_codec": bad,
			"schema": []map[string]any{{"name": "id", "type": "int64"}}})
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		wantCode(t, err, codes.InvalidArgument, "data_codec", bad)
		c := epochCmd("bad", "q", 0)
		c["create"] = map[string]any{"data_codec": bad}
		_, err = s.putCmd(testCtx(t), t, c, idRange(0, 10))
		wantReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		wantCode(t, err, codes.InvalidArgument, "data_codec", bad)
	}
	if _, err := os.Stat(filepath.Join(s.Root, "bad")); !os.IsNotExist(err) {
		t.Fatalf("a refused create left %s/bad (%v)", s.Root, err)
	}
}

// putWideRows writes epochs of rows of rowBytes random letters (incompressible enough that the
// files are as large as the rows) into table, one fragment per epoch, in DoPut batches of 4 MiB.
func putWideRows(t testing.TB, s *testServer, table string, epochs, rows, rowBytes int) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(7, 9))
	payload := make([]byte, rowBytes)
	perBatch := max(1, (4<<20)/rowBytes)
	for e := range epochs {
		var recs []arrow.RecordBatch
		for first := 0; first < rows; first += perBatch {
			b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
			for i := first; i < min(rows, first+perBatch); i++ {
				for j := range payload {
					payload[j] = byte('a' + rnd.IntN(26))
				}
				b.Field(0).(*array.Int64Builder).Append(int64(e*rows + i))
				b.Field(1).(*array.StringBuilder).Append(string(payload))
			}
			recs = append(recs, b.NewRecordBatch())
			b.Release()
		}
		_, err := s.put(testCtx(t), cmdDesc(t, epochCmd(table, "q", int64(e))), rowSchema, recs...)
		for _, r := range recs {
			r.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDoGetMessagesBoundedInBytes: a DoGet of rows of 256 KiB yields record batch messages whose
// bodies stay under the per-message bound (2 MiB plus one row), however many rows a scan batch
// may hold, and every row arrives once.
func TestDoGetMessagesBoundedInBytes(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	putWideRows(t, s, "wide", 1, 96, 256<<10)
	tk, err := json.Marshal(cmd{"table": "wide"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := s.Client.DoGet(testCtx(t), &flight.Ticket{Ticket: tk})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 2<<20 + 256<<10 + 64<<10 // the message bound, one row, the IPC header and padding
	var msgs, largest int
	for {
		fd, err := stream.Recv()
		if err != nil {
			break
		}
		if n := len(fd.DataBody); n > largest {
			largest = n
		}
		msgs++
	}
	t.Logf("96 rows of 256 KiB: %d messages, largest body %d bytes", msgs, largest)
	if largest > bound || largest == 0 {
		t.Fatalf("largest DoGet message body %d bytes, want under %d", largest, bound)
	}
	r, err := s.get(testCtx(t), cmd{"table": "wide"})
	if err != nil || r.Rows != 96 || !slices.Equal(r.IDs, idRange(0, 96)) {
		t.Fatalf("read %d rows (%v), want ids 0..95", r.Rows, err)
	}
}

// liveHeapBytes is the heap held by live objects after two collections (runtime/metrics): the
// second drops the idle buffers of the DoGet allocator's pools (sync.Pool keeps them one
// collection), which are the process's, not a stream's.
func liveHeapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestStalledDoGetsOfWideRowsHeapBounded: two DoGets whose client stops reading after the
// schema, on a table of two 64 MiB fragments of 256 KiB rows (one row group of 256 rows each),
// hold per stream what the design bounds in bytes whatever the width of a row: the scan batch
// being sent and the one being decoded (engine.DefaultScanBatchBytes, 4 MiB, each), the
// read-ahead (8 MiB), the message in gRPC's buffers and a page buffer per column of the file
// reader: under 40 MiB a stream. The server's live heap (runtime/metrics, after a GC) grows by
// less than 2 x 40 MiB while they stall, where batches of 65,536 rows would hold a whole
// fragment per batch and its column chunk beside it. Not parallel, so that the heap is this
// test's.
func TestStalledDoGetsOfWideRowsHeapBounded(t *testing.T) {
	s := startServer(t, flightsvc.Config{MaxConcurrentGets: 2})
	putWideRows(t, s, "wide", 2, 256, 256<<10)
	tk := []byte(`{"table": "wide"}`)
	slow, err := flight.NewClientWithMiddleware(s.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	before := liveHeapBytes()
	stalled, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	for range 2 {
		stream, err := slow.DoGet(stalled, &flight.Ticket{Ticket: tk})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// Let the streams fill what they may buffer: a wait, not a timing assertion.
	time.Sleep(500 * time.Millisecond)
	grown := int64(liveHeapBytes()) - int64(before)
	t.Logf("2 stalled DoGets of a 128 MiB table of 256 KiB rows: live heap grew %d bytes", grown)
	const bound = 2 * 40 << 20
	if grown > bound {
		t.Fatalf("2 stalled DoGets grew the live heap by %d bytes, want under %d", grown, bound)
	}
}

// TestStalledDoGetsOfSmallRowsHoldBounded: DoGets whose clients read one message and stop, of a
// table of 300,000 small rows whose Parquet encoding is many times smaller than their Arrow form
// (200-byte strings of 8 distinct values, dictionary-encoded), each hold at most the read-ahead
// (8 MiB) and two scan batches of up to twice engine.DefaultScanBatchBytes: the server's own
// count of the bytes of the batches a stream holds (read and waiting, queued, being sent), not
// the process's memory. Batches sized by the Parquet estimate alone were 65,536 rows, 14 MB
// each, three of them a stream. Not parallel: every DoGet closed while it runs reports its peak.
func TestStalledDoGetsOfSmallRowsHoldBounded(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	const rows, perBatch = 300_000, 15_000
	var recs []arrow.RecordBatch
	for first := 0; first < rows; first += perBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, rowSchema)
		for i := first; i < first+perBatch; i++ {
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			b.Field(1).(*array.StringBuilder).Append(strings.Repeat(string(rune('a'+i%8)), 200))
		}
		recs = append(recs, b.NewRecordBatch())
		b.Release()
	}
	_, err := s.put(testCtx(t), cmdDesc(t, epochCmd("small", "q", 0)), rowSchema, recs...)
	for _, r := range recs {
		r.Release()
	}
	if err != nil {
		t.Fatal(err)
	}
	slow, err := flight.NewClientWithMiddleware(s.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const streams = 8
	peaks := make(chan int64, 64)
	defer flightsvc.ReadAheadPeaks(peaks)()
	stalled, cancel := context.WithCancel(testCtx(t))
	for range streams {
		stream, err := slow.DoGet(stalled, &flight.Ticket{Ticket: []byte(`{"table": "small"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// Let the streams fill what they may hold: a wait, not a timing assertion.
	time.Sleep(500 * time.Millisecond)
	cancel()
	const bound = flightsvc.ReadAheadBytes + 4*engine.DefaultScanBatchBytes
	for i := range streams {
		p := <-peaks
		t.Logf("stream %d held at most %d bytes of batches", i, p)
		if p > bound {
			t.Fatalf("a stalled DoGet held %d bytes of batches at once, want at most %d", p, bound)
		}
	}
}
