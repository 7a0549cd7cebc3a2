package flightsvc

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flight-sink/flight-sink/internal/arrowpool"
)

// DoGet encodes each record batch message into its wire bytes once: the IPC body is copied
// straight from the batch's buffers into a pooled buffer that already holds the FlightData
// protobuf framing, and gRPC sends that buffer as it is (getCodec). arrow-go's Flight writer
// instead copies the body into a FlightData, which protobuf copies again into a freshly zeroed
// gRPC buffer: two copies and a clear of every byte a DoGet sends.

// The FlightData fields a DoGet message carries (arrow/flight's Flight.proto).
const (
	flightDataHeaderField protowire.Number = 2 // data_header: the IPC message's flatbuffer
	flightDataBodyField   protowire.Number = 1000
)

// encodedFlightData is one FlightData message in its protobuf wire bytes, in a buffer of
// messagePool; getCodec sends it as it is and gRPC returns the buffer to the pool once written.
type encodedFlightData struct {
	buf *[]byte
}

// getCodec is the server's gRPC codec: protobuf for every message, except that an
// encodedFlightData is already its wire bytes.
type getCodec struct {
	proto encoding.CodecV2
}

func newGetCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(getCodec{proto: encoding.GetCodecV2(grpcproto.Name)})
}

func (c getCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*encodedFlightData); ok {
		return mem.BufferSlice{mem.NewBuffer(m.buf, messagePool)}, nil
	}
	return c.proto.Marshal(v)
}

func (c getCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is the protobuf codec's: the wire format is the same.
func (c getCodec) Name() string { return c.proto.Name() }

// messagePool holds the buffers of encoded messages. They are not zeroed: every byte of a
// message is written before it is sent.
var messagePool = messageBuffers{arrowpool.New()}

// messageBuffers is an arrowpool.Pool as a gRPC mem.BufferPool.
type messageBuffers struct{ pool *arrowpool.Pool }

// Get returns a buffer of length n.
func (m messageBuffers) Get(n int) *[]byte {
	b := m.pool.AllocateDirty(n)
	return &b
}

// Put returns a buffer Get gave out.
func (m messageBuffers) Put(b *[]byte) { m.pool.Free(*b) }

// bodyParts collects the slices an ipc.Payload's body is written as, without copying them.
type bodyParts struct {
	parts [][]byte
	n     int
}

func (b *bodyParts) Write(p []byte) (int, error) {
	b.parts = append(b.parts, p)
	b.n += len(p)
	return len(p), nil
}

// streamPayloadWriter writes the IPC payloads of a DoGet as encodedFlightData messages on a
// gRPC stream. Not safe for concurrent use.
type streamPayloadWriter struct {
	stream grpc.ServerStream
	body   bodyParts
}

func (w *streamPayloadWriter) Start() error { return nil }
func (w *streamPayloadWriter) Close() error { return nil }

// WritePayload encodes payload into one pooled buffer (the only copy of its body) and sends it.
func (w *streamPayloadWriter) WritePayload(payload ipc.Payload) error {
	meta := payload.Meta()
	defer meta.Release()
	w.body.parts, w.body.n = w.body.parts[:0], 0
	if err := payload.SerializeBody(&w.body); err != nil {
		return err
	}
	defer clear(w.body.parts) // keep no reference to the batch's memory
	header := meta.Bytes()
	size := 0
	if len(header) > 0 {
		size += protowire.SizeTag(flightDataHeaderField) + protowire.SizeBytes(len(header))
	}
	if w.body.n > 0 {
		size += protowire.SizeTag(flightDataBodyField) + protowire.SizeBytes(w.body.n)
	}
	buf := messagePool.Get(size)
	b := (*buf)[:0]
	if len(header) > 0 {
		b = protowire.AppendTag(b, flightDataHeaderField, protowire.BytesType)
		b = protowire.AppendBytes(b, header)
	}
	if w.body.n > 0 {
		b = protowire.AppendTag(b, flightDataBodyField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(w.body.n))
		for _, p := range w.body.parts {
			b = append(b, p...)
		}
	}
	if len(b) != size {
		messagePool.Put(buf)
		return fmt.Errorf("encode a DoGet message: wrote %d bytes, expected %d", len(b), size)
	}
	*buf = b
	// On success gRPC owns buf (getCodec wraps it in a buffer it frees into messagePool); on an
	// error before the codec ran it is garbage, which is all a lost pooled buffer costs.
	return w.stream.SendMsg(&encodedFlightData{buf: buf})
}

// newGetWriter returns the IPC writer of a DoGet stream.
func newGetWriter(stream grpc.ServerStream, opts ...ipc.Option) *ipc.Writer {
	return ipc.NewWriterWithPayloadWriter(&streamPayloadWriter{stream: stream}, opts...)
}
