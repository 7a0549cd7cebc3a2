package arrowschema

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// guardTypes is a column of every layout the IPC format has, with two rows of JSON values.
var guardTypes = []struct {
	typ  arrow.DataType
	rows string
}{
	{arrow.Null, `null, null`},
	{arrow.FixedWidthTypes.Boolean, `true, null`},
	{arrow.PrimitiveTypes.Int8, `1, null`},
	{arrow.PrimitiveTypes.Uint64, `1, 2`},
	{arrow.PrimitiveTypes.Float64, `1.5, null`},
	{arrow.FixedWidthTypes.Float16, `1.5, 2`},
	{&arrow.Decimal128Type{Precision: 10, Scale: 2}, `"1.25", null`},
	{&arrow.Decimal32Type{Precision: 5, Scale: 1}, `"1.2", null`},
	{arrow.FixedWidthTypes.Date32, `1, null`},
	{arrow.FixedWidthTypes.Time64us, `1, null`},
	{arrow.FixedWidthTypes.Timestamp_us, `1, null`},
	{arrow.FixedWidthTypes.Duration_ms, `1, null`},
	{arrow.FixedWidthTypes.MonthInterval, `{"months": 1}, null`},
	{arrow.FixedWidthTypes.MonthDayNanoInterval, `{"months": 1, "days": 2, "nanoseconds": 3}, null`},
	{&arrow.FixedSizeBinaryType{ByteWidth: 3}, `"YWJj", null`},
	{arrow.BinaryTypes.String, `"a", null`},
	{arrow.BinaryTypes.LargeBinary, `"YWJj", null`},
	{arrow.BinaryTypes.StringView, `"a string longer than twelve bytes", "short"`},
	{arrow.BinaryTypes.BinaryView, `"YSBzdHJpbmcgbG9uZ2VyIHRoYW4gdHdlbHZlIGJ5dGVz", null`},
	{arrow.ListOf(arrow.PrimitiveTypes.Int32), `[1, 2], null`},
	{arrow.LargeListOf(arrow.BinaryTypes.String), `["a"], []`},
	{arrow.ListViewOf(arrow.PrimitiveTypes.Int32), `[1, 2], null`},
	{arrow.LargeListViewOf(arrow.PrimitiveTypes.Int32), `[1], [2, 3]`},
	{arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Int16), `[1, 2], null`},
	{arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}),
		`{"a": 1, "b": "x"}, null`},
	{arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), `[{"key": "k", "value": 1}], null`},
	{arrow.SparseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, []arrow.UnionTypeCode{0, 1}),
		`[0, 5], [1, "x"]`},
	{arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, []arrow.UnionTypeCode{0, 1}),
		`[0, 5], [1, "x"]`},
	{arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), `"v1", "v1"`},
	{&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, `"v1", null`},
	{arrow.ListOf(&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}), `["v1", "y"], null`},
}

// guardStream writes a record batch of every guardTypes column twice (the second time with
// other dictionary values, a replacement or delta) as an IPC stream with opts.
func guardStream(t *testing.T, opts ...ipc.Option) []byte {
	t.Helper()
	fields := make([]arrow.Field, len(guardTypes))
	for i, g := range guardTypes {
		fields[i] = arrow.Field{Name: g.typ.String(), Type: g.typ, Nullable: true}
	}
	sc := arrow.NewSchema(fields, nil)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, append([]ipc.Option{ipc.WithSchema(sc)}, opts...)...)
	for pass := 0; pass < 2; pass++ {
		cols := make([]arrow.Array, len(guardTypes))
		for i, g := range guardTypes {
			rows := g.rows
			if pass == 1 {
				rows = strings.ReplaceAll(rows, `"v1"`, `"v2"`)
			}
			arr, _, err := array.FromJSON(memory.DefaultAllocator, g.typ, strings.NewReader("["+rows+"]"))
			if err != nil {
				t.Fatalf("column %s: %v", g.typ, err)
			}
			defer arr.Release()
			cols[i] = arr
		}
		rec := array.NewRecordBatch(sc, cols, 2)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestIPCStreamGuardAcceptsRealStreams: every layout arrow-go writes, compressed or not, with
// dictionary replacements or deltas, passes the guard, and arrow-go reads it back.
func TestIPCStreamGuardAcceptsRealStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []ipc.Option
	}{
		{"plain", nil},
		{"zstd", []ipc.Option{ipc.WithZstd()}},
		{"lz4", []ipc.Option{ipc.WithLZ4()}},
		{"dictionary deltas", []ipc.Option{ipc.WithDictionaryDeltas(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := guardStream(t, tc.opts...)
			if err := CheckIPCStream(b, IPCStreamGuard{}); err != nil {
				t.Fatalf("guard refused a stream arrow-go wrote: %v", err)
			}
			r, err := ipc.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			n := 0
			for r.Next() {
				n++
			}
			if r.Err() != nil || n != 2 {
				t.Fatalf("read back %d batches: %v", n, r.Err())
			}
		})
	}
}

// TestIPCStreamGuardLimits: the decoded size of a stream counts its dictionary batches, and a
// stream past MaxStreamBytes, or a message past MaxMessageBytes, is ErrIPCTooLarge.
func TestIPCStreamGuardLimits(t *testing.T) {
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{{Name: "d", Type: dt}}, nil)
	b := array.NewDictionaryBuilder(memory.DefaultAllocator, dt).(*array.BinaryDictionaryBuilder)
	defer b.Release()
	big := strings.Repeat("x", 1000)
	for i := 0; i < 100; i++ { // 100 distinct 1000-byte values, 100 rows: 400 bytes of indices
		_ = b.AppendString(big + string(rune('A'+i%26)) + string(rune('a'+i/26)))
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, int64(col.Len()))
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Close()

	var g IPCStreamGuard
	if err := CheckIPCStream(buf.Bytes(), g); err != nil {
		t.Fatal(err)
	}
	if got := RecordBytes(rec); got < 100_000 {
		t.Fatalf("RecordBytes %d does not count the dictionary's 100 kB", got)
	}
	for _, g := range []IPCStreamGuard{{MaxStreamBytes: 10_000}, {MaxMessageBytes: 10_000}} {
		if err := CheckIPCStream(buf.Bytes(), g); !errors.Is(err, ErrIPCTooLarge) {
			t.Fatalf("%+v: got %v, want ErrIPCTooLarge", g, err)
		}
	}
}

// TestCheckSchemaDepth: the create-time check and the stored-schema guard agree on the deepest
// schema: a column of MaxSchemaDepth levels (the column and MaxSchemaDepth-1 below it) is stored
// and read back; one level more is refused by both.
func TestCheckSchemaDepth(t *testing.T) {
	nested := func(levels int) *arrow.Schema {
		var dt arrow.DataType = arrow.PrimitiveTypes.Int64
		for i := 0; i < levels; i++ {
			if i%2 == 0 {
				dt = arrow.ListOf(dt)
			} else {
				dt = arrow.StructOf(arrow.Field{Name: "f", Type: dt, Nullable: true})
			}
		}
		return arrow.NewSchema([]arrow.Field{{Name: "deep", Type: dt}}, nil)
	}
	for _, tc := range []struct {
		levels int
		ok     bool
	}{{1, true}, {MaxSchemaDepth - 1, true}, {MaxSchemaDepth, false}, {100, false}} {
		sc := nested(tc.levels)
		depthErr := CheckSchemaDepth(sc)
		enc, err := EncodeSchema(sc)
		if err != nil {
			t.Fatal(err)
		}
		_, decodeErr := DecodeSchema(enc)
		if (depthErr == nil) != tc.ok || (decodeErr == nil) != tc.ok {
			t.Fatalf("%d levels: CheckSchemaDepth %v, DecodeSchema %v; want ok=%v", tc.levels, depthErr, decodeErr, tc.ok)
		}
		if !tc.ok && (!errors.Is(depthErr, ErrSchemaMismatch) || !strings.Contains(depthErr.Error(), `"deep"`)) {
			t.Fatalf("%d levels: %v does not wrap ErrSchemaMismatch naming the column", tc.levels, depthErr)
		}
	}
}

// TestIPCSchemaGuardReadsOddVtables: a field whose vtable slot starts inside an odd-sized vtable
// is present, as the flatbuffers runtime arrow-go uses reads it. This schema message (found by
// FuzzDoPut) gives its Schema table a 7-byte vtable whose fields slot starts at byte 6 and points
// at a vector claiming 335,544,320 fields: the guard must refuse it, since arrow-go would
// allocate room for them all before reading one.
func TestIPCSchemaGuardReadsOddVtables(t *testing.T) {
	msg, err := hex.DecodeString("100000000c0000000400060007000b000c000000040001140000000000000000ddffff07000000040006000800000000000400000000000014000000420000000c0000000400080009000a000c0000000a0000000002130000000200000069640008000000040008000800000040000000010c0000000400080009000a000c0000000a000000010514000000070000007061796c6f6164000400000004000000b9")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckIPCSchemaMessage(msg); err == nil || !strings.Contains(err.Error(), "claims 335544320 elements") {
		t.Fatalf("CheckIPCSchemaMessage of a schema claiming 335,544,320 fields: %v, want the vector refused", err)
	}
}
