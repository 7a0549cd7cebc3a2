package memwal

import (
	"context"
	"testing"

	"github.com/flight-sink/flight-sink/engine/objstore"
)

// walPositions returns the positions of the WAL entries after after that count (a replay would
// read them), in either WAL format.
func walPositions(t testing.TB, store objstore.Store, paths shardPaths, after uint64) []uint64 {
	t.Helper()
	w := &walLog{store: store, shard: "test", paths: paths}
	ps, err := w.list(context.Background(), after)
	if err != nil {
		t.Errorf("list wal: %v", err)
	}
	return ps
}
