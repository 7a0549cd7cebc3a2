package reliability

// Targeted faults: one ambiguous outcome at one chosen moment.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
)

// landedThenUnreadable fails the first put-if-absent of a key containing substr after it landed,
// then the first read of that same key: a commit whose outcome the writer cannot learn.
type landedThenUnreadable struct {
	mu     sync.Mutex
	substr string
	key    string // the key whose create was failed; "" before
	done   bool
}

func (m *landedThenUnreadable) match(op faultstore.Op, key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.done:
		return false
	case m.key == "" && op == faultstore.OpPutIfAbsent && strings.Contains(key, m.substr):
		m.key = key
		return true
	case m.key != "" && op == faultstore.OpGet && key == m.key:
		m.done = true
		return true
	}
	return false
}

// TestFlushAmbiguousCommitIsNotFencing: a flush whose shard-manifest commit lands but reports an
// error (and whose read-back fails too) retries; the retry finds its own generation committed
// and must carry on. Today it takes its own commit for a newer writer's and stops the writer as
// fenced ("flush generation N (manifest is at N+1): writer epoch E is fenced by a newer writer",
// with E the current epoch), so puts fail until the shard is reopened.
func TestFlushAmbiguousCommitIsNotFencing(t *testing.T) {
	ctx := context.Background()
	inner, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &landedThenUnreadable{substr: "/manifest/"}
	fs := faultstore.New(inner, faultstore.Schedule{Seed: 1, Match: m.match, PerOp: map[faultstore.Op]faultstore.Rates{
		faultstore.OpPutIfAbsent: {After: 1}, faultstore.OpGet: {Error: 1}}})
	fs.SetEnabled(false)
	tbl, err := engine.Create(ctx, fs, "w", epochSchema, engine.CreateOptions{Config: map[string]string{memwal.ConfigShards: "1"}}, &engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := memwal.OpenShard(ctx, tbl, memwal.ShardIDs(1)[0], &memwal.Options{MemtableMaxAge: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(e int64) error {
		rec := epochBatch(0, "q", e, 10)
		defer rec.Release()
		_, err := s.Put(ctx, &epochid.ID{QueryID: "q", EpochID: e}, rec)
		return err
	}
	if err := put(0); err != nil {
		t.Fatal(err)
	}
	fs.SetEnabled(true) // the flush's manifest create lands, then fails; its read-back fails
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Flush(fctx); err != nil {
		t.Fatalf("flush after an ambiguous manifest commit: %v", err)
	}
	if st := fs.Stats(); st.Failures() != 2 {
		t.Fatalf("want exactly the two targeted faults, got %s", st)
	}
	if err := put(1); err != nil {
		t.Fatalf("put after the flush: %v", err)
	}
}
