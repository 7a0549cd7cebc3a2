package engine

// Fuzz targets for what the engine decodes from storage: manifests (whole, and the header History
// reads from a prefix) and transaction files. A corrupt or hostile file must give a clean error,
// never a panic, and what the engine writes must read back as written.
//
// `go test` runs the seeds (f.Add and testdata/fuzz/<Name>/) as ordinary tests; `make fuzz` runs
// each target for a fixed time.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/engine/rowset"
)

// fuzzManifest is a valid manifest with every section filled, the seed the mutations start from.
func fuzzManifest(t testing.TB) *Manifest {
	sb, err := arrowschema.EncodeSchema(rowsSchema)
	if err != nil {
		t.Fatal(err)
	}
	return &Manifest{
		FormatVersion: FormatVersion, Version: 7, TimestampNanos: 1_700_000_000_000_000_000,
		Transaction: TransactionSummary{File: makeTransactionKey(6, "0b3c"), ReadVersion: 6, Operation: OpAppend,
			Properties: map[string]string{PropQueryID: "q-1", PropEpochID: "41"}},
		Schema: sb, PrimaryKey: []string{"id"}, Config: map[string]string{"memwal.shards": "2"},
		Fragments: []Fragment{
			{ID: 1, Files: []DataFile{{Path: makeDataKey("a"), SizeBytes: 1234}}, PhysicalRows: 10},
			{ID: 2, Files: []DataFile{{Path: makeDataKey("b"), SizeBytes: 99}}, PhysicalRows: 8,
				DeletionFile: makeDeletionKey(2, 7, "c"), DeletedRows: 2},
		},
		NextFragmentID: 3,
		Streams:        map[string]StreamWatermark{"q-1": {Epoch: 41, Version: 7, TimestampNanos: 5}},
		MemWALMerged:   map[string]uint64{"3b8e6c3a-0000-4000-8000-000000000000": 4},
	}
}

func mustEncodeManifest(t testing.TB, m *Manifest) []byte {
	b, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantManifestError checks that a decode error is one a caller can branch on.
func wantManifestError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorruptManifest) && !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("decode error %q wraps neither ErrCorruptManifest nor ErrUnsupportedFormat", err)
	}
	if err.Error() == "" {
		t.Fatal("empty error message")
	}
}

func FuzzDecodeManifest(f *testing.F) {
	good := mustEncodeManifest(f, fuzzManifest(f))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format_version":1,"version":1,"schema":"AAAA"}`))
	f.Add([]byte(`{"format_version":99,"version":1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[1,2,3]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const key = "t/fuzz.manifest" // not a version key: the version check is exercised below
		m, err := decodeManifest(key, data)
		if err != nil {
			wantManifestError(t, err)
			return
		}
		if m.SchemaFile != "" && len(m.Schema) == 0 {
			return // the schema is in a file a table reads (Table.Manifest)
		}
		if m.ArrowSchema() == nil {
			t.Fatal("decoded manifest has no schema")
		}
		// Round trip: what the engine writes for m decodes to the same manifest, under its own
		// version key, and the header History reads from it agrees.
		b := mustEncodeManifest(t, m)
		vkey := "t/" + makeManifestKey(m.Version)
		m2, err := decodeManifest(vkey, b)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, b)
		}
		if b2 := mustEncodeManifest(t, m2); !bytes.Equal(b, b2) {
			t.Fatalf("encode/decode is not stable:\n%s\n%s", b, b2)
		}
		if !m.ArrowSchema().Equal(m2.ArrowSchema()) {
			t.Fatalf("schema changed in a round trip: %s vs %s", m.ArrowSchema(), m2.ArrowSchema())
		}
		h, err := decodeManifestHeader(vkey, b)
		if err != nil {
			t.Fatalf("header of a valid manifest: %v", err)
		}
		if h.Version != m.Version || h.TimestampNanos != m.TimestampNanos || h.FormatVersion != m.FormatVersion ||
			!reflect.DeepEqual(normalizeSummary(h.Transaction), normalizeSummary(m.Transaction)) {
			t.Fatalf("header %+v disagrees with manifest %+v", h, m)
		}
		// A manifest under another version's key is corrupt, never silently accepted.
		if _, err := decodeManifest("t/"+makeManifestKey(m.Version+1), b); !errors.Is(err, ErrCorruptManifest) {
			t.Fatalf("manifest of version %d under the key of %d: %v", m.Version, m.Version+1, err)
		}
	})
}

func normalizeSummary(s TransactionSummary) TransactionSummary {
	if len(s.Properties) == 0 {
		s.Properties = nil
	}
	return s
}

func FuzzDecodeManifestHeader(f *testing.F) {
	good := mustEncodeManifest(f, fuzzManifest(f))
	f.Add(good, uint16(len(good)))
	f.Add(good, uint16(40))
	f.Add(good, uint16(0))
	f.Add([]byte(`{"format_version":1,"version":3,"timestamp_nanos":4,"transaction":{"file":"x","operation":"Append"}}`), uint16(200))
	f.Add([]byte(`{"transaction":[]}`), uint16(100))
	f.Add([]byte(`"string"`), uint16(8))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		const key = "t/_versions/00000000000000000001.manifest"
		// Any bytes: a header, a clean error, or "read more".
		if _, err := decodeManifestHeader(key, data); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			wantManifestError(t, err)
		}
		// A prefix of a manifest the engine wrote: either "read more" or exactly its header,
		// which is what History relies on when it reads the first 8 KiB.
		m, err := decodeManifest("t/fuzz.manifest", data)
		if err != nil {
			return
		}
		full := mustEncodeManifest(t, m)
		n := int(cut) % (len(full) + 1)
		h, err := decodeManifestHeader(key, full[:n])
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("prefix of %d/%d bytes of a valid manifest: %v", n, len(full), err)
			}
			return
		}
		if h.Version != m.Version || h.TimestampNanos != m.TimestampNanos ||
			!reflect.DeepEqual(normalizeSummary(h.Transaction), normalizeSummary(m.Transaction)) {
			t.Fatalf("header from a %d-byte prefix %+v disagrees with the manifest %+v", n, h, m)
		}
	})
}

// fuzzTransactions are valid transactions of every shape the engine writes.
func fuzzTransactions(t testing.TB) []*Transaction {
	kept, err := rowset.EncodeBitmap(bitmapOfRange(5))
	if err != nil {
		t.Fatal(err)
	}
	return []*Transaction{
		{ID: "a", ReadVersion: 3, Operation: OpAppend, Properties: map[string]string{PropQueryID: "q", PropEpochID: "9"},
			Fragments: []Fragment{{Files: []DataFile{{Path: makeDataKey("x"), SizeBytes: 10}}, PhysicalRows: 4}}},
		{ID: "b", ReadVersion: 4, Operation: OpDelete, Deleted: rowset.New(rowset.Address(1, 0), rowset.Address(1, 3), rowset.Address(9, 1<<20))},
		{ID: "c", ReadVersion: 5, Operation: OpRewrite, Rewrite: &ChangeOfAddress{Groups: []RewriteGroup{
			{Old: []RewrittenFragment{{ID: 1, PhysicalRows: 5, Kept: kept}}, NewFragments: 1}}},
			Fragments: []Fragment{{Files: []DataFile{{Path: makeDataKey("y")}}, PhysicalRows: 5}}},
		{ID: "d", ReadVersion: 6, Operation: OpAppend, MemWALMerged: map[string]uint64{"s": 3}, MemWALMergedFrom: map[string]uint64{"s": 1}},
		{ID: "e", ReadVersion: 1, Operation: OpOverwrite, Schema: []byte{1, 2, 3}},
	}
}

func FuzzDecodeTransaction(f *testing.F) {
	for _, txn := range fuzzTransactions(f) {
		b, err := encodeTransaction(txn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"deleted":"AAAAAAAAAAA="}`))
	f.Add([]byte(`{"deleted":"/////////////w=="}`))
	f.Add([]byte(`{"rewrite":{"groups":[{"old":[{"kept":"OjAAAA=="}]}]}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const key = "t/_transactions/1-x.txn"
		txn, err := decodeTransaction(key, data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		b, err := encodeTransaction(txn)
		if err != nil {
			// A decoded row set may hold a fragment id no row address can carry; encoding refuses
			// it cleanly rather than writing something else.
			return
		}
		txn2, err := decodeTransaction(key, b)
		if err != nil {
			t.Fatalf("re-encoded transaction does not decode: %v\n%s", err, b)
		}
		b2, err := encodeTransaction(txn2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encode/decode is not stable (%v):\n%s\n%s", err, b, b2)
		}
		if txn.Deleted.Len() != txn2.Deleted.Len() {
			t.Fatalf("deleted rows %d became %d", txn.Deleted.Len(), txn2.Deleted.Len())
		}
		// What Commit derives from the properties must survive the trip too.
		e1, ok1 := txn.Epoch()
		e2, ok2 := txn2.Epoch()
		if e1 != e2 || ok1 != ok2 {
			t.Fatalf("epoch identity %v/%v became %v/%v", e1, ok1, e2, ok2)
		}
	})
}

// FuzzDecodeManifestSchema mutates the Arrow IPC schema inside an otherwise valid manifest: the
// base64 text of the JSON field hides it from byte-level mutation in FuzzDecodeManifest.
func FuzzDecodeManifestSchema(f *testing.F) {
	good := fuzzManifest(f)
	f.Add(good.Schema)
	f.Add(good.Schema[:len(good.Schema)/2])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, schema []byte) {
		m := fuzzManifest(t)
		m.Schema = schema
		b := mustEncodeManifest(t, m)
		key := "t/" + makeManifestKey(m.Version)
		got, err := decodeManifest(key, b)
		if err != nil {
			wantManifestError(t, err)
			return
		}
		// Whatever schema was accepted must survive the engine's own encoding.
		sb, err := arrowschema.EncodeSchema(got.ArrowSchema())
		if err != nil {
			t.Fatalf("encode an accepted schema %s: %v", got.ArrowSchema(), err)
		}
		sc, err := arrowschema.DecodeSchema(sb)
		if err != nil || !sc.Equal(got.ArrowSchema()) {
			t.Fatalf("schema %s did not survive a round trip: %v, %v", got.ArrowSchema(), sc, err)
		}
	})
}

// oomSchema is an Arrow IPC schema message (found by FuzzDecodeManifestSchema) whose fields
// vector claims about 2^31 entries in a 264-byte buffer: arrow-go's ipc reader sizes a slice by
// the claim and the runtime dies with "fatal error: out of memory", which no recover catches.
const oomSchema = "\xff\xff\xff\xff\xf0\x00\x00\x00\x10\x00\x00\x00\x00\x00\n\x00\f\x00\n\x00\t\x00\x04\x00\n\x00\x00\x00\x10\x00\x00\x00\x00\x01\x04\x00\b\x00\b\x00\x00\x00\x04\x00\b\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x8c\x00\x00\x00L\x00\x00\x00\x04\x00\x00\x00\xcc\xff\xff\xff\x10\x00\x00\x00\x18\x00\x00\x00\x00\x00\x03\x01\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x06\x00\b\x00\x06\x00\x06\x00\x00\x00\x00\x00\x02\x00\x05\x00\x00\x00score\x00\x00\x00\x10\x00\x14\x00\x10\x00\x0f\x00\x0e\x00\b\x00\x00\x00\x04\x00\x10\x00\x00\x00\x10\x00\x00\x00\x14\x00\x00\x00\x00\x00\x05\x01\x10\x00\x00\x00\x00\x00\x00\x00\x04\x00\x04\x00\x04\x00\x00\x00\x04\x00\x00\x00name\x00\x00\x00\x00\x10\x00\x14\x00\x10\x00\x00\x00\x0f\x00\b\x00\x00\x00\x04\x00\x10\x00\x00\x00\x10\x00\x00\x00\x18\x00\x00\x00\x00\x00\x00\x02\xa3\xadN\xb44\xea\xc7\x1c\x00\x00\x00\x00\x00\x00\x00\b\x00\f\x00\b\x00\a\x00\b\x00\x00\x00\x00\x00\x00\x01@\x00\x00\x00\x02\x00\x00\x00id\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"

// TestCorruptManifestSchemaIsAnError decodes a manifest whose schema bytes are corrupt in a child
// process: a corrupt manifest must be an ErrCorruptManifest, not the death of the process (and
// with it every table the server holds).
func TestCorruptManifestSchemaIsAnError(t *testing.T) {
	if os.Getenv(corruptSchemaChildEnv) == "1" {
		m := fuzzManifest(t)
		m.Schema = []byte(oomSchema)
		_, err := decodeManifest("t/"+makeManifestKey(m.Version), mustEncodeManifest(t, m))
		if !errors.Is(err, ErrCorruptManifest) {
			t.Fatalf("decode: %v, want ErrCorruptManifest", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCorruptManifestSchemaIsAnError$", "-test.count=1")
	cmd.Env = append(os.Environ(), corruptSchemaChildEnv+"=1", helperProcessEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("decoding a corrupt manifest schema: %v\n%s", err, fatalLine(string(out)))
	}
}

const corruptSchemaChildEnv = "FLIGHT_SINK_ENGINE_CORRUPT_SCHEMA_CHILD"

// fatalLine returns the line of a crashed child's output that says why it died.
func fatalLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "panic") || strings.Contains(l, "FAIL:") {
			return l
		}
	}
	return out
}
