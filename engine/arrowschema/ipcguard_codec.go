package arrowschema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// IPC body compression codecs (CompressionType in the IPC format's Message.fbs).
const (
	ipcCodecLZ4Frame = 0
	ipcCodecZSTD     = 1
)

// maxCodecWindow bounds the ZSTD window a compressed buffer may use. Arrow writers (arrow-go,
// Arrow C++ and so pyarrow) compress each buffer as one frame at an ordinary level, whose window
// is at most a few MiB; a frame asking for more is refused rather than given the memory.
const maxCodecWindow = 64 << 20

var (
	zstdDecoders = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxCodecWindow))
		if err != nil { // only for invalid options, which these are not
			panic(err)
		}
		return d
	}}
	lz4Decoders = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
)

// checkDecompressed decodes frame, one compressed buffer without its 8-byte length prefix, with
// codec, and requires it to yield exactly declared bytes. arrow-go reads a compressed buffer by
// filling a buffer of the declared length from the codec and ignores whatever the frame holds
// beyond it, so a frame of more (or, in some codec paths, of fewer) bytes would be committed as
// values the client never sent. The decoded bytes are counted, not kept: at most declared+1
// bytes are decoded, whatever the frame claims to hold, and the decoder's memory is its window,
// bounded by maxCodecWindow.
func checkDecompressed(codec byte, frame []byte, declared int64) error {
	var (
		r       io.Reader
		release func()
	)
	switch codec {
	case ipcCodecZSTD:
		d := zstdDecoders.Get().(*zstd.Decoder)
		// A reader the decoder cannot see through: given a bytes.Reader it would decode the whole
		// frame into memory at once, whatever its size.
		if err := d.Reset(struct{ io.Reader }{bytes.NewReader(frame)}); err != nil {
			zstdDecoders.Put(d)
			return fmt.Errorf("zstd frame: %w", err)
		}
		r, release = d, func() { _ = d.Reset(nil); zstdDecoders.Put(d) }
	case ipcCodecLZ4Frame:
		d := lz4Decoders.Get().(*lz4.Reader)
		d.Reset(bytes.NewReader(frame))
		r, release = d, func() { d.Reset(nil); lz4Decoders.Put(d) }
	default:
		return fmt.Errorf("unknown compression codec %d", codec)
	}
	defer release()
	n, err := io.CopyN(io.Discard, r, declared+1)
	switch {
	case n > declared:
		return fmt.Errorf("the frame holds more than the %d bytes its prefix declares", declared)
	case errors.Is(err, io.EOF):
		if n < declared {
			return fmt.Errorf("the frame holds %d bytes, its prefix declares %d", n, declared)
		}
		return nil
	case err != nil:
		return fmt.Errorf("the frame does not decode: %w", err)
	}
	return nil
}
