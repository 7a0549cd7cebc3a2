package flightsvc_test

// Fuzz targets that feed sequences of FlightData messages into the real DoPut and DoGet handlers
// of one in-process server, over a real loopback gRPC connection. Whatever the bytes, the
// server must answer every call with a status and keep serving: a crash kills the fuzz process,
// a panic caught by the recovery interceptor fails the input.
//
// Input framing: a sequence of messages, each a 4-byte little-endian header length h, a 4-byte
// little-endian body length b, then h header bytes (a flatbuffer Message) and b body bytes; the
// lengths are cut to what remains. At most maxFuzzMessages messages are read.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flight-sink/flight-sink/flightsvc"
)

const maxFuzzMessages = 8

// frameWire encodes msgs in the fuzz input framing.
func frameWire(msgs []wireMsg) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.header)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.body)))
		b = append(append(b, m.header...), m.body...)
	}
	return b
}

// unframeWire decodes a fuzz input into messages.
func unframeWire(b []byte) []wireMsg {
	var msgs []wireMsg
	for len(b) >= 8 && len(msgs) < maxFuzzMessages {
		h, n := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		b = b[8:]
		h = min(h, uint32(len(b)))
		header := b[:h]
		b = b[h:]
		n = min(n, uint32(len(b)))
		msgs = append(msgs, wireMsg{header: header, body: b[:n]})
		b = b[n:]
	}
	return msgs
}

// wireSeeds are the fuzz seeds: the good hand-built stream and every abusive stream of
// wireCases small enough for a corpus file (the 1.5-million-level schema is replaced by one of
// 100 levels).
func wireSeeds() [][]byte {
	rb, body := rowBatch()
	seeds := [][]byte{
		frameWire([]wireMsg{{header: rowSchemaMessage()}, {ipcMessage(hdrRecordBatch, rb, len(body)), body}}),
		frameWire([]wireMsg{{header: nestedSchema(100, 1)}}),
	}
	for _, tc := range wireCases() {
		if b := frameWire(tc.msgs); len(b) <= 64<<10 {
			seeds = append(seeds, b)
		}
	}
	// The column names the read-back helper knows with types it does not expect (a fuzzer found
	// the first: payload as binary), and the same batch body.
	return append(seeds,
		frameWire([]wireMsg{{header: schemaMessage(int64Field("id"), binaryField("payload"))}, {ipcMessage(hdrRecordBatch, rb, len(body)), body}}),
		frameWire([]wireMsg{{header: schemaMessage(int64Field("payload"), utf8Field("id"))}, {ipcMessage(hdrRecordBatch, rb, len(body)), body}}))
}

// fuzzServer is the one server of a fuzz process, its table "t" created with rowSchema.
func fuzzServer(f *testing.F) *testServer {
	s := startServer(f, flightsvc.Config{PutIdleTimeout: -1})
	s.putEpoch(f, "t", "setup", 0, []int64{0})
	for _, seed := range wireSeeds() {
		f.Add(seed)
	}
	return s
}

// wantServing fails the input when err says the server is gone or a handler panicked.
func wantServing(t *testing.T, call string, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.Unavailable:
		t.Fatalf("%s: the server is gone: %v", call, err)
	case st.Code() == codes.Internal && strings.Contains(st.Message(), "keeps serving"):
		t.Fatalf("%s: a handler panicked: %v", call, err)
	}
}

var fuzzEpoch atomic.Int64

// FuzzDoPut sends each input as one DoPut stream to table "t" (rowSchema); every 64th input is
// followed by a good put, which must land.
func FuzzDoPut(f *testing.F) {
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e := fuzzEpoch.Add(1)
		_, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd("t", "fuzz", e)), unframeWire(b)...)
		wantServing(t, "DoPut", err)
		if e%64 == 0 {
			if _, err := s.putCmd(testCtx(t), t, epochCmd("t", "good", e), []int64{e}); err != nil {
				t.Fatalf("a good put after input %d: %v", e, err)
			}
		}
	})
}

// FuzzDoGet sends each input as a DoPut stream that creates its own table, then reads that table
// back with DoGet: whatever the fuzzer gets committed, of whatever schema, must read back or
// fail with a status, never take the server down.
func FuzzDoGet(f *testing.F) {
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		e := fuzzEpoch.Add(1)
		table := fmt.Sprintf("g%d", e)
		_, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd(table, "fuzz", 0)), unframeWire(b)...)
		wantServing(t, "DoPut", err)
		if err != nil {
			return
		}
		_, err = s.get(testCtx(t), cmd{"table": table})
		wantServing(t, "DoGet", err)
		// The table's change feed reads the same data files: an answer or a status.
		_, err = s.get(testCtx(t), cmd{"table": table, "changes": cmd{"from_version": 1}})
		wantServing(t, "DoGet changes", err)
		if _, err := s.get(testCtx(t), cmd{"table": "t"}); err != nil {
			t.Fatalf("reading the setup table after input %d: %v", e, err)
		}
	})
}

// TestWriteWireFuzzSeeds writes the fuzz seeds into testdata/fuzz/<Target>/ when
// FLIGHTSVC_WRITE_FUZZ_SEEDS is set: `FLIGHTSVC_WRITE_FUZZ_SEEDS=1 go test ./flightsvc -run
// TestWriteWireFuzzSeeds` after changing wireCases, then commit the files.
func TestWriteWireFuzzSeeds(t *testing.T) {
	if os.Getenv("FLIGHTSVC_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set FLIGHTSVC_WRITE_FUZZ_SEEDS=1 to rewrite the committed seed corpora")
	}
	for _, target := range []string{"FuzzDoPut", "FuzzDoGet"} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, seed := range wireSeeds() {
			var buf bytes.Buffer
			fmt.Fprintf(&buf, "go test fuzz v1\n[]byte(%q)\n", seed)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
