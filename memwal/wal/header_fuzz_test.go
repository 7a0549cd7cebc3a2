package wal

import (
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// FuzzDecodeWALHeader: the header decoder of the read-only view takes the same bytes as
// DecodeEntry behind the same guard. Any input is an error wrapping ErrCorrupt or a header,
// never a panic; and an entry the full decoder accepts has the header the full decoder reads.
func FuzzDecodeWALHeader(f *testing.F) {
	for _, b := range fuzzWALEntries(f) {
		f.Add(b)
		f.Add(b[:len(b)*2/3])
		f.Add(b[:len(b)/3])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeader(fuzzWALKey, data)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("header decode error %q does not wrap ErrCorrupt", err)
		}
		full, ferr := DecodeEntry(fuzzWALKey, data, nil, memory.NewGoAllocator())
		if ferr != nil {
			return
		}
		defer full.Release()
		if err != nil {
			t.Fatalf("DecodeEntry accepts an entry whose header is refused: %v", err)
		}
		if h.Position != full.Position || h.WriterEpoch != full.WriterEpoch || h.Fence != full.Fence || len(h.Puts) != len(full.Puts) {
			t.Fatalf("header %+v, entry %+v", h, full)
		}
		for i, p := range full.Puts {
			hp := h.Puts[i]
			if hp.Rows != p.Rows || len(hp.Batches) != 0 || (hp.Epoch == nil) != (p.Epoch == nil) || (p.Epoch != nil && *hp.Epoch != *p.Epoch) {
				t.Fatalf("put %d: header %+v, entry %+v", i, hp, p)
			}
		}
	})
}
