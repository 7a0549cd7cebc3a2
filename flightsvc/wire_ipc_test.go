package flightsvc_test

// A flatbuffer builder for hand-made Arrow IPC messages: the malformed and abusive DoPut
// messages of wire_guard_test.go and the seeds of the wire fuzz targets. Real writers (arrow-go,
// pyarrow) cannot produce them, so they are written table by table here.

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
)

// fbT is a flatbuffer table: values by field id. A value is a scalar (uint8, bool, int16, int32,
// int64) stored inline, or a reference to a table (fbT), a string, a vector of tables (fbTV) or
// a vector of fixed-size elements (fbRaw).
type fbT map[int]any

// fbTV is a vector of tables; claim, when not 0, replaces its length.
type fbTV struct {
	items []fbT
	claim uint32
}

// fbRaw is a vector of n fixed-size elements (structs or scalars), data holding them.
type fbRaw struct {
	n    uint32
	data []byte
}

// fbBuild encodes root as a flatbuffer. Every offset points forward, as a flatbuffer reader
// expects: a table's vtable precedes it, the objects it refers to follow it.
func fbBuild(root fbT) []byte {
	e := &fbEnc{b: make([]byte, 4)}
	binary.LittleEndian.PutUint32(e.b, uint32(e.table(root)))
	return e.b
}

type fbEnc struct{ b []byte }

func (e *fbEnc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *fbEnc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }

func (e *fbEnc) table(t fbT) int {
	nf := 0
	for id := range t {
		nf = max(nf, id+1)
	}
	v := len(e.b)
	e.u16(uint16(4 + 2*nf))
	e.u16(0) // table size: unused by readers
	for range nf {
		e.u16(0)
	}
	tp := len(e.b)
	e.u32(uint32(tp - v))
	type ref struct {
		pos int
		val any
	}
	var refs []ref
	for id := range nf {
		val, ok := t[id]
		if !ok {
			continue
		}
		binary.LittleEndian.PutUint16(e.b[v+4+2*id:], uint16(len(e.b)-tp))
		switch x := val.(type) {
		case uint8:
			e.b = append(e.b, x)
		case bool:
			if x {
				e.b = append(e.b, 1)
			} else {
				e.b = append(e.b, 0)
			}
		case int16:
			e.u16(uint16(x))
		case int32:
			e.u32(uint32(x))
		case int64:
			e.b = binary.LittleEndian.AppendUint64(e.b, uint64(x))
		default:
			refs = append(refs, ref{len(e.b), val})
			e.u32(0)
		}
	}
	for _, r := range refs {
		p := len(e.b)
		switch x := r.val.(type) {
		case fbT:
			p = e.table(x)
		case string:
			e.u32(uint32(len(x)))
			e.b = append(append(e.b, x...), 0)
		case fbTV:
			n := uint32(len(x.items))
			if x.claim != 0 {
				n = x.claim
			}
			e.u32(n)
			slots := len(e.b)
			for range x.items {
				e.u32(0)
			}
			for i, it := range x.items {
				q := e.table(it)
				binary.LittleEndian.PutUint32(e.b[slots+4*i:], uint32(q-(slots+4*i)))
			}
		case fbRaw:
			e.u32(x.n)
			e.b = append(e.b, x.data...)
		default:
			panic("fbBuild: unsupported value")
		}
		binary.LittleEndian.PutUint32(e.b[r.pos:], uint32(p-r.pos))
	}
	return tp
}

// IPC format constants (Message.fbs, Schema.fbs).
const (
	ipcV5           = int16(4)
	hdrSchema       = uint8(1)
	hdrDictionary   = uint8(2)
	hdrRecordBatch  = uint8(3)
	typeNull        = uint8(1)
	typeInt         = uint8(2)
	typeBinary      = uint8(4)
	typeUtf8        = uint8(5)
	typeList        = uint8(12)
	typeStruct      = uint8(13)
	typeUtf8View    = uint8(24)
	codecLZ4        = uint8(0)
	codecZSTD       = uint8(1)
	fieldName       = 0
	fieldNullable   = 1
	fieldTypeType   = 2
	fieldType       = 3
	fieldDictionary = 4
	fieldChildren   = 5
)

// ipcMessage wraps a header table in a Message.
func ipcMessage(kind uint8, header fbT, bodyLen int) []byte {
	return fbBuild(fbT{0: ipcV5, 1: kind, 2: header, 3: int64(bodyLen)})
}

func int64Field(name string) fbT {
	return fbT{fieldName: name, fieldNullable: false, fieldTypeType: typeInt, fieldType: fbT{0: int32(64), 1: true}}
}

func utf8Field(name string) fbT {
	return fbT{fieldName: name, fieldNullable: true, fieldTypeType: typeUtf8, fieldType: fbT{}}
}

func binaryField(name string) fbT {
	return fbT{fieldName: name, fieldNullable: true, fieldTypeType: typeBinary, fieldType: fbT{}}
}

// schemaMessage is a schema message of fields.
func schemaMessage(fields ...fbT) []byte {
	return ipcMessage(hdrSchema, fbT{0: int16(0), 1: fbTV{items: fields}}, 0)
}

// rowSchemaMessage is rowSchema (id int64, payload utf8), hand-built.
func rowSchemaMessage() []byte { return schemaMessage(int64Field("id"), utf8Field("payload")) }

// ipcBuf is a buffer of a record batch: its offset and length in the body.
type ipcBuf struct{ off, len int64 }

// ipcNode is a field node: an array's length and null count.
type ipcNode struct{ len, nulls int64 }

func rawNodes(nodes ...ipcNode) fbRaw {
	var b []byte
	for _, n := range nodes {
		b = binary.LittleEndian.AppendUint64(b, uint64(n.len))
		b = binary.LittleEndian.AppendUint64(b, uint64(n.nulls))
	}
	return fbRaw{n: uint32(len(nodes)), data: b}
}

func rawBuffers(bufs ...ipcBuf) fbRaw {
	var b []byte
	for _, x := range bufs {
		b = binary.LittleEndian.AppendUint64(b, uint64(x.off))
		b = binary.LittleEndian.AppendUint64(b, uint64(x.len))
	}
	return fbRaw{n: uint32(len(bufs)), data: b}
}

func rawInt64s(vs ...int64) fbRaw {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return fbRaw{n: uint32(len(vs)), data: b}
}

// recordBatch is a RecordBatch table.
func recordBatch(rows int64, nodes, buffers fbRaw) fbT {
	return fbT{0: rows, 1: nodes, 2: buffers}
}

// rowBatch is a valid rowSchema batch of ids 1 and 2 (payloads "row-1", "row-2"): its header
// table and body. The malformed batches are this one with one thing changed.
func rowBatch() (fbT, []byte) {
	body := make([]byte, 48)
	binary.LittleEndian.PutUint64(body[0:], 1)
	binary.LittleEndian.PutUint64(body[8:], 2)
	binary.LittleEndian.PutUint32(body[16:], 0)
	binary.LittleEndian.PutUint32(body[20:], 5)
	binary.LittleEndian.PutUint32(body[24:], 10)
	copy(body[32:], "row-1row-2")
	rb := recordBatch(2, rawNodes(ipcNode{2, 0}, ipcNode{2, 0}),
		rawBuffers(ipcBuf{0, 0}, ipcBuf{0, 16}, ipcBuf{16, 0}, ipcBuf{16, 12}, ipcBuf{32, 10}))
	return rb, body
}

// wireMsg is one hand-built FlightData: a flatbuffer Message and its body.
type wireMsg struct{ header, body []byte }

// sendRaw sends msgs as one DoPut stream (the first carrying desc), closes it and returns the
// call's answer: the ack, or its error status.
func (c *flightConn) sendRaw(ctx context.Context, t testing.TB, desc *flight.FlightDescriptor, msgs ...wireMsg) (ack, error) {
	t.Helper()
	stream, err := c.Client.DoPut(ctx)
	if err != nil {
		return ack{}, err
	}
	for i, m := range msgs {
		fd := &flight.FlightData{DataHeader: m.header, DataBody: m.body}
		if i == 0 {
			fd.FlightDescriptor = desc
		}
		if err := stream.Send(fd); err != nil {
			break // the server answered already; Recv has its answer
		}
	}
	if err := stream.CloseSend(); err != nil {
		return ack{}, err
	}
	return recvAck(stream)
}
