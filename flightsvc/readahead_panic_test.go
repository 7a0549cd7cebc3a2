package flightsvc

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// panickingReader yields n batches, then panics in Next, as a decoder with a bug would.
type panickingReader struct{ failingReader }

func (r *panickingReader) Next() bool {
	if r.i == r.n {
		panic("index out of range in a decoder")
	}
	return r.failingReader.Next()
}

// TestReadAheadPanic: a panic in the source's Next, on the read-ahead goroutine that no
// interceptor covers, ends the read with an Internal error after the batches before it, instead
// of killing the process.
func TestReadAheadPanic(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	src := &panickingReader{failingReader{mem: mem, n: 3}}
	ra := newReadAhead(context.Background(), src)
	n := 0
	for ra.Next() {
		n++
	}
	err := ra.Err()
	ra.Close()
	src.Release()
	if n != 3 || err == nil || !strings.Contains(err.Error(), "index out of range in a decoder") || ra.panicStack == nil {
		t.Fatalf("read %d batches, err %v (stack logged: %v); want 3 and the panic", n, err, ra.panicStack != nil)
	}
	if code := status.Code(toStatus(err)); code != codes.Internal {
		t.Fatalf("code %v, want Internal", code)
	}
}
