package memwal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
)

// A flush that keeps failing (here: every generation file put fails, a permanent error) stops
// the writer after a bounded number of attempts: Flush returns the error instead of waiting for
// ever, later puts fail with it, and a writer opened afterwards on a healthy store replays the
// acknowledged rows from the WAL and flushes them.
func TestFlushPermanentFailureStopsWriter(t *testing.T) {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(local, faultstore.Schedule{
		Seed:    1,
		PerOp:   map[faultstore.Op]faultstore.Rates{faultstore.OpPut: {Error: 1}},
		Match:   func(op faultstore.Op, key string) bool { return strings.HasSuffix(key, genFileExt) },
		Default: faultstore.Rates{},
	})
	tbl := createTable(t, fs, nil)
	s := openShard(t, tbl, testShardID, nil)
	put(t, s, "q", 1, 0, 10, "a")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = s.Flush(ctx) // must not wait for ever (nor for the test's deadline)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with a permanently failing store = %v; want the flusher's error", err)
	}
	if !errors.Is(err, faultstore.ErrInjected) || !strings.Contains(err.Error(), "flush failed") {
		t.Fatalf("Flush error %v does not carry the flush failure", err)
	}
	if s.Err() == nil {
		t.Fatal("writer still working after its flusher gave up")
	}
	rec := makeRows(10, 1, "b", 2)
	defer rec.Release()
	if _, err := s.Put(ctx, nil, rec); err == nil {
		t.Fatal("put on a stopped writer succeeded")
	}
	s.Close()

	fs.SetEnabled(false)
	s2 := openShard(t, tbl, testShardID, nil)
	flush(t, s2)
	if got := len(readMerged(t, tbl, s2)); got != 10 {
		t.Fatalf("after reopening: %d rows, want the 10 acknowledged", got)
	}
}
