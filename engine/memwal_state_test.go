package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// Two compactors of one shard in different processes both read merged watermark 0. One folds
// generations 1-3; the other, which also saw generation 4, must be refused rather than fold 1-4
// and count generations 1-3 twice.
func TestMemWALFoldRefusedWhenWatermarkMoved(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		ctx := context.Background()
		tbl := createRowsTable(t, store, "fold", nil)
		first := &Transaction{Operation: OpAppend, MemWALMerged: map[string]uint64{"s": 3}, MemWALMergedFrom: map[string]uint64{"s": 0}}
		if _, err := tbl.Commit(ctx, first); err != nil {
			t.Fatal(err)
		}
		before := latestVersion(t, tbl)
		second := &Transaction{Operation: OpAppend, MemWALMerged: map[string]uint64{"s": 4}, MemWALMergedFrom: map[string]uint64{"s": 0}}
		if _, err := tbl.Commit(ctx, second); !errors.Is(err, ErrGenerationAlreadyMerged) {
			t.Fatalf("fold from a stale watermark: want ErrGenerationAlreadyMerged, got %v", err)
		}
		if latestVersion(t, tbl) != before {
			t.Fatal("a refused fold committed a version")
		}
		third := &Transaction{Operation: OpAppend, MemWALMerged: map[string]uint64{"s": 4}, MemWALMergedFrom: map[string]uint64{"s": 3}}
		m, err := tbl.Commit(ctx, third)
		if err != nil {
			t.Fatal(err)
		}
		if m.MemWALMerged["s"] != 4 {
			t.Fatalf("watermark %d, want 4", m.MemWALMerged["s"])
		}
	})
}
