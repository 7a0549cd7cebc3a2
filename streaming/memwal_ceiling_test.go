package streaming

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/memwal"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// unfoldedGenerations reads shard's flushed generations that the base table does not hold yet:
// the shard manifest first, then the base watermark, so a fold landing between the two reads
// can only make the count smaller than it was, never larger.
func unfoldedGenerations(ctx context.Context, store objstore.Store, tbl *engine.Table, shard string) (int, error) {
	sm, err := memwal.NewManifestStore(store, tbl.Name(), shard, nil).ReadLatest(ctx)
	if err != nil {
		return 0, err
	}
	base, err := tbl.Latest(ctx)
	if err != nil {
		return 0, err
	}
	return len(sm.GenerationsAbove(base.MemWALMerged[shard])), nil
}

// Concurrent streams put many small epochs into one MemWAL shard whose memtable seals at every
// put, with no fold to help: maintenance off, or automatic folds disabled. The shard never holds
// more than the fold ceiling plus the puts in flight of unfolded generations, sampled after every
// acknowledged put and all along by a watcher; the puts finish because the stalled ones fold
// themselves, and every row reads back exactly once.
func TestMemWALFoldCeiling(t *testing.T) {
	const ceiling, writers, epochs = 4, 4, 25
	cases := []struct {
		name string
		opts Options
	}{
		{"maintenance off", Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}}},
		{"automatic folds disabled", Options{MemWALFoldGenerations: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
				ctx := t.Context()
				opts := tc.opts
				opts.MemWAL.MemtableMaxRows = 1 // every put seals its memtable: one generation each
				opts.MemWAL.MemtableMaxAge = -1
				opts.MemWAL.MaxUnfoldedGenerations = ceiling
				s := NewSink(store, &opts)
				t.Cleanup(s.Close)
				if a := putKV(t, s, "c", "create", 0, ModeAppend, memwalSpec(1), -1, "create"); a.Status != StatusCommitted {
					t.Fatalf("create: %+v", a)
				}
				tbl, err := s.Table(ctx, "c")
				if err != nil {
					t.Fatal(err)
				}
				shard := memwal.ShardIDs(1)[0]
				const bound = ceiling + writers
				check := func(when string) error {
					n, err := unfoldedGenerations(ctx, store, tbl, shard)
					if err != nil {
						return fmt.Errorf("%s: %w", when, err)
					}
					if n > bound {
						return fmt.Errorf("%s: %d unfolded generations, the ceiling allows %d (+%d puts in flight)", when, n, ceiling, writers)
					}
					return nil
				}

				done := make(chan struct{})
				watcher := make(chan error, 1)
				go func() {
					for {
						select {
						case <-done:
							watcher <- nil
							return
						default:
						}
						if err := check("watcher"); err != nil {
							watcher <- err
							return
						}
					}
				}()
				errs := make(chan error, writers)
				var wg sync.WaitGroup
				for w := range writers {
					wg.Go(func() {
						for e := int64(1); e <= epochs; e++ {
							id := w*1000 + int(e)
							rec := kv(id, "v")
							src, err := array.NewRecordReader(kvSchema, []arrow.RecordBatch{rec})
							rec.Release()
							if err == nil {
								var a Ack
								a, err = s.WriteEpoch(ctx, EpochRequest{Table: "c", QueryID: fmt.Sprintf("q%d", w), EpochID: e, Mode: ModeAppend, Route: RouteMemWAL}, src)
								if err == nil && a.Status != StatusCommitted {
									err = fmt.Errorf("ack %+v", a)
								}
							}
							if err == nil {
								err = check(fmt.Sprintf("after writer %d epoch %d", w, e))
							}
							if err != nil {
								errs <- fmt.Errorf("writer %d epoch %d: %w", w, e, err)
								return
							}
						}
					})
				}
				wg.Wait()
				close(done)
				if err := <-watcher; err != nil {
					t.Error(err)
				}
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if t.Failed() {
					t.FailNow()
				}
				m, err := tbl.Latest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if m.MemWALMerged[shard] == 0 {
					t.Fatalf("%d one-generation puts passed a fold ceiling of %d without a stalled put folding", writers*epochs, ceiling)
				}
				got := readKV(t, s, "c")
				if len(got) != writers*epochs+1 {
					t.Fatalf("%d distinct ids, want %d", len(got), writers*epochs+1)
				}
				for id, vs := range got {
					if len(vs) != 1 {
						t.Fatalf("id %d read %d times", id, len(vs))
					}
				}
				left, err := unfoldedGenerations(ctx, store, tbl, shard)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d puts: fold watermark %d, %d generations unfolded at the end, %d base fragments", writers*epochs, m.MemWALMerged[shard], left, len(m.Fragments))
			})
		})
	}
}
