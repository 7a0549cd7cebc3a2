package flightsvc_test

// Compressed record batches (LZ4_FRAME and ZSTD buffer compression) over a real connection: a
// buffer must decode to exactly the length its 8-byte prefix declares, or the batch is refused
// before arrow-go reads it (arrow-go fills a buffer of the declared length and silently drops
// whatever the frame holds beyond it).

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// compressFrame compresses raw as one frame of codec, as Arrow writers do.
func compressFrame(codec uint8, raw []byte) []byte {
	var out bytes.Buffer
	switch codec {
	case codecZSTD:
		w, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err)
		}
		_, _ = w.Write(raw)
		_ = w.Close()
	case codecLZ4:
		w := lz4.NewWriter(&out)
		_, _ = w.Write(raw)
		_ = w.Close()
	}
	return out.Bytes()
}

// zstdZeros is a ZSTD frame that decodes to n zero bytes (n a multiple of 128 KiB), built by
// hand from RLE blocks: 4 bytes per 128 KiB, so 512 MiB of zeros take 16 KiB. Its header
// declares no content size.
func zstdZeros(n int) []byte {
	const block = 128 << 10
	b := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	b = append(b, 0x00, 7<<3) // descriptor: no content size, not single-segment; window 2^17
	for left := n; left > 0; left -= block {
		h := uint32(1<<1 | block<<3) // RLE block of 128 KiB
		if left == block {
			h |= 1 // last block
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 0)
	}
	return b
}

// compressedRowBatch is rowBatch with every non-empty buffer compressed by codec: frame gives
// the frame of buffer i (raw its bytes), declare the length its prefix declares.
func compressedRowBatch(codec uint8, frame func(i int, raw []byte) []byte, declare func(i int, raw []byte) int64) wireMsg {
	_, plain := rowBatch()
	bufs := []ipcBuf{{0, 0}, {0, 16}, {16, 0}, {16, 12}, {32, 10}}
	var body []byte
	var out []ipcBuf
	for i, b := range bufs {
		if b.len == 0 {
			out = append(out, ipcBuf{int64(len(body)), 0})
			continue
		}
		raw := plain[b.off : b.off+b.len]
		start := len(body)
		body = binary.LittleEndian.AppendUint64(body, uint64(declare(i, raw)))
		body = append(body, frame(i, raw)...)
		out = append(out, ipcBuf{int64(start), int64(len(body) - start)})
		for len(body)%8 != 0 {
			body = append(body, 0)
		}
	}
	rb := recordBatch(2, rawNodes(ipcNode{2, 0}, ipcNode{2, 0}), rawBuffers(out...))
	rb[3] = fbT{0: codec, 1: uint8(0)}
	return wireMsg{ipcMessage(hdrRecordBatch, rb, len(body)), body}
}

// codecCases are the compressed batches whose frames do not hold what they declare.
func codecCases() []wireCase {
	schema := wireMsg{header: rowSchemaMessage()}
	declared := func(_ int, raw []byte) int64 { return int64(len(raw)) }
	var cases []wireCase
	for _, c := range []struct {
		name  string
		codec uint8
	}{{"ZSTD", codecZSTD}, {"LZ4", codecLZ4}} {
		codec := c.codec
		more := func(i int, raw []byte) []byte { // the id values, then as many bytes again
			if i == 1 {
				return compressFrame(codec, append(append([]byte{}, raw...), raw...))
			}
			return compressFrame(codec, raw)
		}
		fewer := func(i int, raw []byte) []byte {
			if i == 1 {
				return compressFrame(codec, raw[:8])
			}
			return compressFrame(codec, raw)
		}
		garbage := func(i int, raw []byte) []byte {
			if i == 1 {
				return []byte("not a frame of either codec")
			}
			return compressFrame(codec, raw)
		}
		cases = append(cases,
			wireCase{name: c.name + " frame holds more than it declares", table: "t", code: codes.InvalidArgument,
				say: "holds more than the 16 bytes", msgs: []wireMsg{schema, compressedRowBatch(codec, more, declared)}},
			wireCase{name: c.name + " frame holds fewer bytes than it declares", table: "t", code: codes.InvalidArgument,
				say: "holds 8 bytes, its prefix declares 16", msgs: []wireMsg{schema, compressedRowBatch(codec, fewer, declared)}},
			wireCase{name: c.name + " buffer that is no frame", table: "t", code: codes.InvalidArgument,
				say: "compressed buffer 1", msgs: []wireMsg{schema, compressedRowBatch(codec, garbage, declared)}},
		)
	}
	zeros := func(i int, raw []byte) []byte {
		if i == 1 {
			return zstdZeros(512 << 20)
		}
		return compressFrame(codecZSTD, raw)
	}
	return append(cases, wireCase{name: "ZSTD frame of 512 MiB of zeros declaring 16 bytes", table: "t", code: codes.InvalidArgument,
		say: "holds more than the 16 bytes", msgs: []wireMsg{schema, compressedRowBatch(codecZSTD, zeros, declared)}})
}

// TestDoPutCompressedBatches: a batch compressed with either codec whose frames hold exactly
// what they declare commits its rows, read back exactly once.
func TestDoPutCompressedBatches(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{})
	declared := func(_ int, raw []byte) int64 { return int64(len(raw)) }
	for e, codec := range []uint8{codecZSTD, codecLZ4} {
		frame := func(_ int, raw []byte) []byte { return compressFrame(codec, raw) }
		a, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd("c", "q", int64(e))),
			wireMsg{header: rowSchemaMessage()}, compressedRowBatch(codec, frame, declared))
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		wantAck(t, a, "committed", uint64(e+2))
	}
	s.wantIDs(t, "c", []int64{1, 2, 1, 2})
}

// TestDoPutCompressedFrameAllocation: a ZSTD frame of 512 MiB of zeros declaring 16 bytes is
// refused without the server decoding it: the process allocates less than 64 MiB in all while
// the stream is answered (runtime.MemStats.TotalAlloc, cumulative). Not parallel, so that the
// count is this call's.
func TestDoPutCompressedFrameAllocation(t *testing.T) {
	s := startServer(t, flightsvc.Config{})
	s.putEpoch(t, "t", "setup", 0, []int64{0})
	tc := codecCases()[len(codecCases())-1]
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := s.sendRaw(testCtx(t), t, cmdDesc(t, epochCmd("t", "zeros", 0)), tc.msgs...)
	runtime.ReadMemStats(&after)
	t.Logf("answering a 512 MiB ZSTD zero frame allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
	wantReason(t, err, codes.InvalidArgument, "MALFORMED_IPC")
	const bound = 64 << 20
	if n := after.TotalAlloc - before.TotalAlloc; n > bound {
		t.Fatalf("refusing the frame allocated %d bytes, want under %d", n, bound)
	}
	s.wantIDs(t, "t", []int64{0})
}
