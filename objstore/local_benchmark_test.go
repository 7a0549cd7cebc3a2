package objstore_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// BenchmarkLocalPut stores files the size of a 1,000-row epoch's data file and of a large
// epoch's, with the write-back started every 8 MiB (as Put does) and without (the whole file
// written, then synced), side by side.
func BenchmarkLocalPut(b *testing.B) {
	for _, size := range []int{32 << 10, 82 << 20} {
		data := make([]byte, size)
		rng := rand.NewChaCha8([32]byte{7})
		_, _ = rng.Read(data)
		for _, wb := range []bool{true, false} {
			b.Run(fmt.Sprintf("size=%dKiB/writeback=%v", size>>10, wb), func(b *testing.B) {
				if !wb {
					defer objstore.SetWritebackChunk(math.MaxInt64)()
				}
				s, err := objstore.NewLocal(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := s.Put(b.Context(), "data/f", bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
