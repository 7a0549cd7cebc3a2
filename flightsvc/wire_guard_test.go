package flightsvc_test

// Malformed and abusive DoPut messages, sent as hand-built FlightData over a real connection.
// Before the wire guard, most of them killed the server process (a Go "fatal error: out of
// memory" or stack overflow, which no recover catches) or were committed. Each must now be
// refused with InvalidArgument (ResourceExhausted for sizes), commit nothing, and leave the
// server serving.

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// nestedSchema is a schema message of one column nested depth levels deep around an int64
// leaf, written directly: every field shares one vtable, so 1.5 million levels take about 32 MB.
// With fanout 1 it is a list of list of ... int64. With fanout n > 1 each level is a struct whose
// n children are one and the same table, the next level: a few hundred bytes then describe
// n^depth fields.
func nestedSchema(depth, fanout int) []byte {
	b := make([]byte, 0, 80+(17+4*fanout)*depth)
	u16 := func(vs ...int) {
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint16(b, uint16(v))
		}
	}
	u32 := func(v int) { b = binary.LittleEndian.AppendUint32(b, uint32(v)) }
	put32 := func(p, v int) { binary.LittleEndian.PutUint32(b[p:], uint32(v)) }
	u32(0) // root offset, patched below
	mv := len(b)
	u16(10, 0, 4, 6, 8) // Message vtable: version, header_type, header
	m := len(b)
	put32(0, m)
	u32(m - mv)
	u16(int(ipcV5))
	b = append(b, hdrSchema, 0)
	mHeader := len(b)
	u32(0)
	sv := len(b)
	u16(8, 0, 0, 4) // Schema vtable: fields
	s := len(b)
	put32(mHeader, s-mHeader)
	u32(s - sv)
	sFields := len(b)
	u32(0)
	fv := len(b)
	u16(16, 0, 0, 0, 4, 5, 0, 9) // the one Field vtable: type_type at 4, type at 5, children at 9
	put32(sFields, len(b)-sFields)
	u32(1) // the schema's fields: one, the table right after
	u32(4)
	nested := typeList
	if fanout > 1 {
		nested = typeStruct
	}
	var typeRefs []int // type offsets to patch: to the nested type's table, the last to the int's
	for i := 0; i < depth; i++ {
		f := len(b)
		u32(f - fv)
		if i < depth-1 {
			b = append(b, nested)
		} else {
			b = append(b, typeInt)
		}
		typeRefs = append(typeRefs, len(b))
		u32(0)
		u32(4) // children: the vector right after this table
		if i == depth-1 {
			u32(0)
			continue
		}
		u32(fanout)
		for j := 0; j < fanout; j++ {
			u32(4 * (fanout - j)) // each child: the table right after the vector
		}
	}
	nv := len(b)
	u16(4, 0)
	nt := len(b)
	u32(nt - nv)
	iv := len(b)
	u16(8, 0, 4, 8)
	it := len(b)
	u32(it - iv)
	u32(64)
	b = append(b, 1)
	for i, p := range typeRefs {
		if i < len(typeRefs)-1 {
			put32(p, nt-p)
		} else {
			put32(p, it-p)
		}
	}
	return b
}

// structNested is a field nested depth structs deep around an int64 leaf.
func structNested(name string, depth int) fbT {
	f := int64Field("leaf")
	for i := 0; i < depth; i++ {
		f = fbT{fieldName: name, fieldNullable: true, fieldTypeType: typeStruct, fieldType: fbT{}, fieldChildren: fbTV{items: []fbT{f}}}
	}
	return f
}

// wireCase is one abusive DoPut stream and the answer it must get.
type wireCase struct {
	name  string
	table string // the table the stream writes ("t": rowSchema)
	msgs  []wireMsg
	code  codes.Code
	say   string // the status message mentions it
}

// wireCases are the abusive streams of the regression test, also the fuzz targets' seeds.
func wireCases() []wireCase {
	const claim = math.MaxUint32
	schema := wireMsg{header: rowSchemaMessage()}
	good := func() wireMsg {
		rb, body := rowBatch()
		return wireMsg{ipcMessage(hdrRecordBatch, rb, len(body)), body}
	}
	batch := func(mutate func(rb fbT, body []byte) []byte) wireMsg {
		rb, body := rowBatch()
		if b := mutate(rb, body); b != nil {
			body = b
		}
		return wireMsg{ipcMessage(hdrRecordBatch, rb, len(body)), body}
	}
	compressed := func(codec uint8) []wireMsg {
		body := make([]byte, 80)
		binary.LittleEndian.PutUint64(body[0:], 1<<40) // the id column's values "decompress" to 1 TiB
		for _, off := range []int{16, 32} {
			binary.LittleEndian.PutUint64(body[off:], math.MaxUint64) // -1: stored uncompressed
		}
		rb := recordBatch(2, rawNodes(ipcNode{2, 0}, ipcNode{2, 0}),
			rawBuffers(ipcBuf{0, 0}, ipcBuf{0, 16}, ipcBuf{16, 0}, ipcBuf{16, 16}, ipcBuf{32, 16}))
		rb[3] = fbT{0: codec, 1: uint8(0)}
		return []wireMsg{schema, {ipcMessage(hdrRecordBatch, rb, len(body)), body}}
	}
	schemaOnly := func(header []byte) []wireMsg { return []wireMsg{{header: header}, good()} }
	// rowBatch's five buffers, then 99,995 more.
	many := append([]ipcBuf{{0, 0}, {0, 16}, {16, 0}, {16, 12}, {32, 10}}, make([]ipcBuf, 100_000-5)...)
	return append([]wireCase{
		{name: "schema fields vector claims 2^32-1 entries", table: "t", code: codes.InvalidArgument, say: "vector claims",
			msgs: schemaOnly(ipcMessage(hdrSchema, fbT{1: fbTV{items: []fbT{int64Field("id")}, claim: claim}}, 0))},
		{name: "schema custom_metadata claims 2^32-1 entries", table: "t", code: codes.InvalidArgument, say: "vector claims",
			msgs: schemaOnly(ipcMessage(hdrSchema, fbT{1: fbTV{items: []fbT{int64Field("id"), utf8Field("payload")}},
				2: fbTV{items: []fbT{{0: "k", 1: "v"}}, claim: claim}}, 0))},
		{name: "struct children claim 2^32-1 entries", table: "t", code: codes.InvalidArgument, say: "vector claims",
			msgs: schemaOnly(schemaMessage(int64Field("id"), fbT{fieldName: "s", fieldTypeType: typeStruct, fieldType: fbT{},
				fieldChildren: fbTV{items: []fbT{int64Field("x")}, claim: claim}}))},
		{name: "message custom_metadata claims 2^32-1 entries", table: "t", code: codes.InvalidArgument, say: "vector claims",
			msgs: schemaOnly(fbBuild(fbT{0: ipcV5, 1: hdrSchema, 2: fbT{1: fbTV{items: []fbT{int64Field("id")}}},
				4: fbTV{items: []fbT{{0: "k"}}, claim: claim}}))},
		{name: "list nested 1.5 million deep", table: "t", code: codes.InvalidArgument, say: "nested deeper than 64",
			msgs: schemaOnly(nestedSchema(1_500_000, 1))},
		{name: "struct fields sharing their children, 2^60 paths", table: "t", code: codes.InvalidArgument, say: "share their tables",
			msgs: schemaOnly(nestedSchema(61, 2))},
		{name: "struct nested 100 deep", table: "deep", code: codes.InvalidArgument, say: "nested deeper than 64",
			msgs: schemaOnly(schemaMessage(structNested("s", 100)))},
		{name: "record batch before the schema", table: "t", code: codes.InvalidArgument, say: "not a schema",
			msgs: []wireMsg{good()}},
		{name: "truncated message header", table: "t", code: codes.InvalidArgument, say: "too short",
			msgs: []wireMsg{{header: []byte{1, 2, 3}}}},
		{name: "unknown type tag", table: "t", code: codes.InvalidArgument, say: "unknown type tag",
			msgs: schemaOnly(schemaMessage(fbT{fieldName: "x", fieldTypeType: uint8(99), fieldType: fbT{}}))},
		{name: "1 buffer where the schema needs 5", table: "t", code: codes.InvalidArgument, say: "needs 2, 5 and 0",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte {
				rb[0], rb[1], rb[2] = int64(0), rawNodes(ipcNode{0, 0}, ipcNode{0, 0}), rawBuffers(ipcBuf{0, 0})
				return []byte{}
			})}},
		{name: "100,000 buffers where the schema needs 5", table: "t", code: codes.InvalidArgument, say: "lists 2 field nodes, 100000 buffers",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte { rb[2] = rawBuffers(many...); return nil })}},
		{name: "3 field nodes where the schema needs 2", table: "t", code: codes.InvalidArgument, say: "lists 3 field nodes",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte {
				rb[1] = rawNodes(ipcNode{2, 0}, ipcNode{2, 0}, ipcNode{2, 0})
				return nil
			})}},
		{name: "buffer outside the body", table: "t", code: codes.InvalidArgument, say: "outside the 48-byte body",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte {
				rb[2] = rawBuffers(ipcBuf{0, 0}, ipcBuf{0, 16}, ipcBuf{16, 0}, ipcBuf{16, 12}, ipcBuf{40, 1 << 40})
				return nil
			})}},
		{name: "negative buffer offset", table: "t", code: codes.InvalidArgument, say: "outside the 48-byte body",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte {
				rb[2] = rawBuffers(ipcBuf{0, 0}, ipcBuf{-8, 16}, ipcBuf{16, 0}, ipcBuf{16, 12}, ipcBuf{32, 10})
				return nil
			})}},
		{name: "negative node length", table: "t", code: codes.InvalidArgument, say: "length -2",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte {
				rb[0], rb[1] = int64(-2), rawNodes(ipcNode{-2, 0}, ipcNode{-2, 0})
				return nil
			})}},
		{name: "null count above the length", table: "t", code: codes.InvalidArgument, say: "null count 3",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte { rb[1] = rawNodes(ipcNode{2, 0}, ipcNode{2, 3}); return nil })}},
		{name: "column longer than its batch", table: "t", code: codes.InvalidArgument, say: "has 2 rows in a batch of 1",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte { rb[0] = int64(1); return nil })}},
		{name: "ZSTD buffer declares 2^40 decompressed bytes", table: "t", code: codes.ResourceExhausted, say: "declares 1099511627776",
			msgs: compressed(codecZSTD)},
		{name: "LZ4 buffer declares 2^40 decompressed bytes", table: "t", code: codes.ResourceExhausted, say: "declares 1099511627776",
			msgs: compressed(codecLZ4)},
		{name: "unknown compression codec", table: "t", code: codes.InvalidArgument, say: "unknown compression",
			msgs: []wireMsg{schema, batch(func(rb fbT, _ []byte) []byte { rb[3] = fbT{0: uint8(7)}; return nil })}},
		{name: "dictionary batch with an id the schema does not declare", table: "t", code: codes.InvalidArgument, say: "id 7 is not a dictionary",
			msgs: []wireMsg{schema, func() wireMsg {
				rb, body := rowBatch()
				return wireMsg{ipcMessage(hdrDictionary, fbT{0: int64(7), 1: rb}, len(body)), body}
			}()}},
		{name: "second schema message", table: "t", code: codes.InvalidArgument, say: "second schema",
			msgs: []wireMsg{schema, good(), schema}},
		{name: "utf8_view batch claims 2^40 variadic buffers", table: "views", code: codes.InvalidArgument, say: "variadic buffer count 1099511627776",
			msgs: []wireMsg{{header: schemaMessage(fbT{fieldName: "v", fieldNullable: true, fieldTypeType: typeUtf8View, fieldType: fbT{}})},
				func() wireMsg {
					rb := recordBatch(2, rawNodes(ipcNode{2, 0}), rawBuffers(ipcBuf{0, 0}, ipcBuf{0, 32}))
					rb[4] = rawInt64s(1 << 40)
					return wireMsg{ipcMessage(hdrRecordBatch, rb, 32), make([]byte, 32)}
				}()}},
	}, codecCases()...)
}

// TestDoPutWireGuard sends each abusive stream of wireCases over a real connection: each gets
// its code, commits nothing, and a good put still lands after it.
func TestDoPutWireGuard(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	// The hand-built messages are sound: the good stream they are made from commits.
	rb, body := rowBatch()
	a, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd("t", "good", 0)),
		wireMsg{header: rowSchemaMessage()}, wireMsg{ipcMessage(hdrRecordBatch, rb, len(body)), body})
	if err != nil {
		t.Fatalf("the hand-built good stream: %v", err)
	}
	wantAck(t, a, "committed", 2)
	s.wantIDs(t, "t", []int64{1, 2})

	epoch := int64(1)
	for _, tc := range wireCases() {
		t.Run(tc.name, func(t *testing.T) {
			before := s.version(t, "t")
			_, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd(tc.table, "bad", 0)), tc.msgs...)
			wantCode(t, err, tc.code, tc.say)
			reason := map[codes.Code]string{codes.InvalidArgument: "MALFORMED_IPC", codes.ResourceExhausted: "LIMIT_EXCEEDED"}[tc.code]
			wantReason(t, err, tc.code, reason)
			if v := s.version(t, "t"); v != before {
				t.Fatalf("table t went from version %d to %d", before, v)
			}
			if tc.table != "t" {
				wantNoRows(t, s, tc.table)
			}
			// Still serving.
			wantAck(t, s.putEpoch(t, "t", "good", epoch, idRange(epoch*10, 2)), "committed", before+1)
			epoch++
		})
	}
}

// wantNoRows checks that table does not exist or holds no rows.
func wantNoRows(t testing.TB, s *testServer, table string) {
	t.Helper()
	b, err := s.action(testCtx(t), "table_stats", cmd{"table": table})
	if codeOf(err) == codes.NotFound {
		return
	}
	if err != nil {
		t.Fatalf("table_stats %s: %v", table, err)
	}
	var st tableStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Rows != 0 {
		t.Fatalf("table %s holds %d rows, want none", table, st.Rows)
	}
}
