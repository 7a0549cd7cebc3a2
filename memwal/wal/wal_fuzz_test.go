package wal

// Fuzz targets for the WAL entries a shard reads back from storage (Arrow IPC streams with the
// put metadata in the schema); memwal fuzzes shard manifests. A corrupt entry must give an error
// wrapping ErrCorrupt, never a panic or a leaked buffer, and what the writer writes must read
// back as written.
//
// `go test` runs the seeds (f.Add and testdata/fuzz/<Name>/) as ordinary tests; `make fuzz` runs
// each target for a fixed time.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/flight-sink/flight-sink/internal/epochid"
)

const fuzzWALKey = "t/_mem_wal/s/wal/00000000000000000007.arrow"

// fuzzWALEntries returns encoded entries of every shape a shard writes: data with and without
// epoch identities, several batches per put, an empty put, and a fence.
func fuzzWALEntries(t testing.TB) [][]byte {
	mk := func(pos uint64, puts []Put) []byte {
		b, err := EncodeEntry(pos, 3, rowsSchema, puts, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := makeRows(1, 3, "a", 1), makeRows(10, 2, "b", 2), makeRows(20, 1, "c", 2)
	defer a.Release()
	defer b.Release()
	defer c.Release()
	fence, err := EncodeEntry(7, 4, nil, nil, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{
		mk(7, []Put{{Epoch: &epochid.ID{QueryID: "q", EpochID: 1}, Batches: []arrow.RecordBatch{a}, Rows: 3}}),
		mk(7, []Put{
			{Epoch: &epochid.ID{QueryID: "q", EpochID: 2}, Batches: []arrow.RecordBatch{b, c}, Rows: 3},
			{Batches: []arrow.RecordBatch{a}, Rows: 3},
			{Epoch: &epochid.ID{QueryID: "other", EpochID: 0}, Rows: 0},
		}),
		fence,
	}
}

// checkDecodedEntry checks the invariants of a decoded entry and its round trip through
// EncodeEntry, then releases it.
func checkDecodedEntry(t *testing.T, e *Entry, mem *memory.CheckedAllocator) {
	t.Helper()
	defer e.Release()
	if e.Fence {
		if len(e.Puts) != 0 {
			t.Fatalf("fence entry with %d puts", len(e.Puts))
		}
		b, err := EncodeEntry(e.Position, e.WriterEpoch, nil, nil, mem)
		if err != nil {
			t.Fatal(err)
		}
		f2, err := DecodeEntry(fuzzWALKey, b, nil, mem)
		if err != nil {
			t.Fatalf("re-encoded fence does not decode: %v", err)
		}
		f2.Release()
		if !f2.Fence || f2.Position != e.Position || f2.WriterEpoch != e.WriterEpoch {
			t.Fatalf("fence %+v became %+v", e, f2)
		}
		return
	}
	var schema *arrow.Schema
	for _, p := range e.Puts {
		for _, b := range p.Batches {
			if schema == nil {
				schema = b.Schema()
			} else if !schema.Equal(b.Schema()) {
				t.Fatalf("batches of one entry in two schemas: %s and %s", schema, b.Schema())
			}
		}
	}
	if schema == nil {
		return // no batch to learn the schema from; nothing to compare
	}
	b, err := EncodeEntry(e.Position, e.WriterEpoch, schema, e.Puts, mem)
	if err != nil {
		t.Fatalf("re-encode a decoded entry: %v", err)
	}
	e2, err := DecodeEntry(fuzzWALKey, b, schema, mem)
	if err != nil {
		t.Fatalf("re-encoded entry does not decode: %v", err)
	}
	defer e2.Release()
	if e2.Position != e.Position || e2.WriterEpoch != e.WriterEpoch || len(e2.Puts) != len(e.Puts) {
		t.Fatalf("entry at %d epoch %d with %d puts became %d, %d, %d puts",
			e.Position, e.WriterEpoch, len(e.Puts), e2.Position, e2.WriterEpoch, len(e2.Puts))
	}
	for i := range e.Puts {
		p, p2 := e.Puts[i], e2.Puts[i]
		if (p.Epoch == nil) != (p2.Epoch == nil) || (p.Epoch != nil && *p.Epoch != *p2.Epoch) {
			t.Fatalf("put %d identity %v became %v", i, p.Epoch, p2.Epoch)
		}
		if len(p.Batches) != len(p2.Batches) || p.Rows != p2.Rows {
			t.Fatalf("put %d: %d batches %d rows became %d batches %d rows", i, len(p.Batches), p.Rows, len(p2.Batches), p2.Rows)
		}
		for j := range p.Batches {
			if !array.RecordEqual(p.Batches[j], p2.Batches[j]) {
				t.Fatalf("put %d batch %d changed in a round trip", i, j)
			}
		}
	}
}

func FuzzDecodeWALEntry(f *testing.F) {
	for _, b := range fuzzWALEntries(f) {
		f.Add(b)
		f.Add(b[:len(b)*2/3])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, schema := range []*arrow.Schema{nil, rowsSchema} {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			e, err := DecodeEntry(fuzzWALKey, data, schema, mem)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
				}
				// No allocator check here: when a corrupt batch makes arrow-go's reader panic
				// (it recovers and returns an error), arrow-go drops the message body without
				// releasing it. Upstream, and harmless with the Go allocator the server uses.
				continue
			}
			checkDecodedEntry(t, e, mem)
			mem.AssertSize(t, 0)
		}
	})
}

// FuzzDecodeWALEntryMetadata builds well-formed Arrow IPC streams whose WAL metadata (kind,
// position, writer epoch, the puts JSON) is fuzzed: byte-level mutation of a whole entry rarely
// produces a stream that gets as far as the metadata.
func FuzzDecodeWALEntryMetadata(f *testing.F) {
	f.Add(kindData, "7", "3", `[{"query_id":"q","epoch_id":1,"batches":2,"rows":3}]`, uint8(2))
	f.Add(kindData, "7", "3", `[{"batches":1,"rows":1},{"query_id":"q","epoch_id":9,"batches":0,"rows":0}]`, uint8(1))
	f.Add(kindFence, "7", "4", "", uint8(0))
	f.Add(kindData, "7", "3", `[{"batches":-1,"rows":0}]`, uint8(1))
	f.Add(kindData, "-1", "x", `{}`, uint8(0))
	f.Fuzz(checkWALMetadata)
}

// checkWALMetadata is FuzzDecodeWALEntryMetadata's property: an entry built with the given
// metadata and nbatches%8 batches decodes to consistent puts, or is corrupt.
func checkWALMetadata(t *testing.T, kind, pos, epoch, puts string, nbatches uint8) {
	{
		md := arrow.NewMetadata([]string{metaKind, metaWriterEpoch, metaPosition, metaPuts}, []string{kind, epoch, pos, puts})
		schema := arrow.NewSchema(rowsSchema.Fields(), &md)
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
		for i := 0; i < int(nbatches%8); i++ {
			rec := makeRows(int64(i)*10, int64(i%3)+1, "f", int64(i))
			rb := array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
			err := w.Write(rb)
			rb.Release()
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		e, err := DecodeEntry(fuzzWALKey, buf.Bytes(), rowsSchema, mem)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
			}
		} else {
			// Every put owns whole batches and claims the rows it holds: replay counts them.
			for i, p := range e.Puts {
				var rows int64
				for _, b := range p.Batches {
					rows += b.NumRows()
				}
				if rows != p.Rows {
					e.Release()
					t.Fatalf("put %d claims %d rows and holds %d (puts %s)", i, p.Rows, rows, puts)
				}
			}
			if p, err := strconv.ParseUint(pos, 10, 64); err != nil || p != e.Position {
				e.Release()
				t.Fatalf("position %q decoded as %d", pos, e.Position)
			}
			checkDecodedEntry(t, e, mem)
		}
		mem.AssertSize(t, 0)
	}
}

// TestWALEntryMetadataMustAccountForEveryRow: a corrupt entry whose puts do not own every batch,
// or claim other row counts than they hold, is ErrCorrupt. Today the unowned batches are dropped
// without a word (and their buffers leak), and a put's row count is taken on trust.
func TestWALEntryMetadataMustAccountForEveryRow(t *testing.T) {
	t.Run("unowned batches", func(t *testing.T) { checkWALMetadata(t, kindData, "7", "3", `[{"batches":1,"rows":1}]`, 3) })
	t.Run("rows claim", func(t *testing.T) { checkWALMetadata(t, kindData, "7", "3", `[{"batches":2,"rows":5}]`, 2) })
}

// oomWALEntry is a WAL entry (found by FuzzDecodeWALEntry) whose schema flatbuffer claims a
// huge fields vector: arrow-go's ipc reader sizes a slice by the claim and the runtime dies with
// "fatal error: out of memory". Replay reads every WAL entry on each shard open, so one such
// entry would crash the server at every restart.
const oomWALEntry = "\xff\xff\xff\xff\x10\x02\x00\x00\x10\x00\x00\x00\x00\x00\n\x00\x0e\x00\f\x00\v\x00\x04\x00\n\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x01\x04\x00\n\x00\f\x00\x00\x00\b\x00\x04\x00\n\x00\x00\x00\bY\x00\x00$\x01\x00\x00\x00\x00\x00\xe8\x00\x00\x00\xa4\x00\x00\x00l\x00\x00\x00\x04\x00\x00\x000\xff\xff\xff\b\x00\x00\x00@\x00\x00\x004\x00\x00\x00[{\"query_id\":\"q\",\"epoch_id\":1,\"batches\":1,\"rows\":3}]\x00\x00\x00\x00\x17\x00\x00\x00flight_sink.memwal.puts\x00\x94\xff\xff\xff\b\x00\x00\x00\f\x00\x00\x00\x01\x00\x00\x007\x00\x00\x00\x1b\x00\x00\x00flight_sink.memwal.position\x00\xc8\xff\xff\xff\b\x00\x00\x00\f\x00\x00\x00\x01\x00\x00\x003\x00\x00\x00\x1f\x00\x00\x00flight_sink.memwal.writer_epoch\x00\b\x00\f\x00\b\x00\x04\x00\b\x00\x00\x00\b\x00\x00\x00\x10\x00\x00\x00\x04\x00\x00\x00data\x00\x00\x00\x00\x17\x00\x00\x00flight_sink.memwal.kind\x00\x03\x00\x00\x00\x84\x00\x00\x00H\x00\x00\x00\x04\x00\x00\x00\xd0\xff\xff\xff\x10\x00\x00\x00\x10\x00\x00\x00\x00\x00\x02\x01\x14\x00\x00\x00\x00\x00\x00\x00\x88\xff\xff\xff\x00\x00\x00\x01@\x00\x00\x00\x05\x00\x00\x00epoch\x00\x00\x00\x10\x00\x14\x00\x10\x00\x0f\x00\x0e\x00\b\x00\x00\x00\x04\x00\x10\x00\x00\x00\x10\x00\x00\x00\x14\x00\x00\x00\x00\x00\x05\x01\x10\x00\x00\x00\x00\x00\x00\x00\x04\x00\x04\x00\x04\x00\x00\x00\x03\x00\x00\x00val\x00\x10\x00\x14\x00\x10\x00\x00\x00\x0f\x00\b\x00\x00\x00\x04\x00\x10\x00\x00\x00\x10\x00\x00\x00\x18\x00\x00\x00\x00\x00\x00\x02\x1c\x00\x00\x00\x00\x00\x00\x00\b\x00\f\x00\b\x00\a\x00\b\x00\x00\x00\x00\x00\x00\x01@\x00\x00\x00\x02\x00\x00\x00id\x00\x00\xff\xff\xff\xff\xf8\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x00\f\x00\x16\x00\x14\x00\x13\x00\f\x00\x04\x00\f\x00\x00\x00P\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x03\x04\x00"

// TestCorruptWALEntryIsAnError decodes a corrupt WAL entry in a child process: it must be an
// ErrCorrupt, not the death of the process.
func TestCorruptWALEntryIsAnError(t *testing.T) {
	if os.Getenv(corruptWALChildEnv) == "1" {
		_, err := DecodeEntry(fuzzWALKey, []byte(oomWALEntry), nil, memory.DefaultAllocator)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode: %v, want ErrCorrupt", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCorruptWALEntryIsAnError$", "-test.count=1")
	cmd.Env = append(os.Environ(), corruptWALChildEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("decoding a corrupt WAL entry: %v\n%s", err, fatalLine(string(out)))
	}
}

const corruptWALChildEnv = "FLIGHT_SINK_MEMWAL_CORRUPT_WAL_CHILD"

// fatalLine returns the line of a crashed child's output that says why it died.
func fatalLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "panic") || strings.Contains(l, "FAIL:") {
			return l
		}
	}
	return out
}
