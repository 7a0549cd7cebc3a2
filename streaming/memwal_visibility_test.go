package streaming

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
)

// shardHoldStore is an object store (not *objstore.Local, so MemWAL writes each WAL entry as an
// object) that holds back the WAL entry puts of one shard until released.
type shardHoldStore struct {
	objstore.Store
	mu      sync.Mutex
	shard   string        // hold this shard's WAL puts ("": none)
	held    chan struct{} // closed when a put is held
	release chan struct{}
}

func (s *shardHoldStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if shard, ok := walShard(key); ok {
		s.mu.Lock()
		hold := shard == s.shard
		s.mu.Unlock()
		if hold {
			s.mu.Lock()
			select {
			case <-s.held:
			default:
				close(s.held)
			}
			s.mu.Unlock()
			<-s.release
		}
	}
	return s.Store.PutIfAbsent(ctx, key, data)
}

func (s *shardHoldStore) hold(shard string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shard, s.held, s.release = shard, make(chan struct{}), make(chan struct{})
}

func (s *shardHoldStore) unhold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shard = ""
	close(s.release)
}

// A keyed epoch's parts land in its shards one after the other; a read between the two sees none
// of the epoch, and once the epoch is acknowledged, all of it. The second shard's WAL put is held
// back until the first shard has applied its part, so the read always falls between them.
func TestMemWALKeyedEpochVisibleAtOnce(t *testing.T) {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &shardHoldStore{Store: local}
	s := NewSink(store, nil)
	t.Cleanup(s.Close)
	spec := memwalSpec(2, "id")
	pairs := func(e int) []any {
		var out []any
		for k := 0; k < 32; k++ { // 32 keys: both shards get rows
			out = append(out, k, fmt.Sprintf("e%d", e))
		}
		return out
	}
	putKV(t, s, "k", "q", 0, ModeUpdate, spec, pairs(0)...) // creates the table, claims the shards
	ids := memwal.ShardIDs(2)
	store.hold(ids[1])
	acked := make(chan error, 1)
	go func() {
		_, err := s.WriteEpoch(context.Background(), EpochRequest{Table: "k", QueryID: "q", EpochID: 1, Mode: ModeUpdate, Create: spec},
			kvSource(t, kv(pairs(1)...)))
		acked <- err
	}()
	<-store.held
	// Wait (an order, not a timing: the ceiling only ends a failing run) until shard 0 has applied
	// its part: its writer holds the epoch.
	tbl, err := s.Table(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		w, ok := s.knownShardSet(tbl).Readers()[0].(*memwal.Shard)
		if held, _ := w.EpochCommitted("q", 1); ok && held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("shard 0 never applied its part of epoch 1")
		}
	}
	for k, vs := range readKV(t, s, "k") {
		if len(vs) != 1 || vs[0] != "e0" {
			_ = unhold(store, acked)
			t.Fatalf("a read while one shard's part of epoch 1 is applied and the other's is not: key %d is %v, want [e0] (none of epoch 1)", k, vs)
		}
	}
	if st, err := s.TableState(context.Background(), tbl); err != nil || st.Rows() != 32 {
		_ = unhold(store, acked)
		t.Fatalf("table state rows %d (%v), want 32", st.Rows(), err)
	}
	if err := unhold(store, acked); err != nil {
		t.Fatalf("epoch 1: %v", err)
	}
	for k, vs := range readKV(t, s, "k") {
		if len(vs) != 1 || vs[0] != "e1" {
			t.Fatalf("after epoch 1's ack key %d is %v, want [e1]", k, vs)
		}
	}
}

func unhold(store *shardHoldStore, acked <-chan error) error {
	store.unhold()
	return <-acked
}
