package memwal

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// floatKeyTable is a three-shard MemWAL table keyed by a float column k, with its writers.
type floatKeyTable struct {
	t      *testing.T
	sc     *arrow.Schema
	tbl    *engine.Table
	ids    []string
	shards []*Shard
	want   map[string]string // key class -> newest value
	epoch  int64
}

func newFloatKeyTable(t *testing.T, store objstore.Store, dt arrow.DataType) *floatKeyTable {
	ctx := context.Background()
	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: dt}, {Name: "v", Type: arrow.BinaryTypes.String}}, nil)
	tbl, err := engine.Create(ctx, store, "fk_"+dt.String(), sc,
		engine.CreateOptions{PrimaryKey: []string{"k"}, Config: map[string]string{ConfigShards: "3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := tbl.Latest(ctx)
	ids, err := TableShardIDs(m)
	if err != nil {
		t.Fatal(err)
	}
	ft := &floatKeyTable{t: t, sc: sc, tbl: tbl, ids: ids, want: make(map[string]string)}
	for _, id := range ids {
		ft.shards = append(ft.shards, openShard(t, tbl, id, nil))
	}
	return ft
}

// put writes keys as one epoch, routed by key.
func (ft *floatKeyTable) put(keys ...typetest.FloatKey) {
	ft.t.Helper()
	ft.epoch++
	b := array.NewRecordBuilder(memory.DefaultAllocator, ft.sc)
	defer b.Release()
	for i, k := range keys {
		v := fmt.Sprintf("e%d-%d-%#x", ft.epoch, i, k.Bits)
		k.Append(b.Field(0))
		b.Field(1).(*array.StringBuilder).Append(v)
		ft.want[k.Class] = v
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	parts, err := PartitionByKey(context.Background(), rec, []string{"k"}, len(ft.shards))
	if err != nil {
		ft.t.Fatal(err)
	}
	for i, p := range parts {
		if p == nil {
			continue
		}
		_, err := ft.shards[i].Put(context.Background(), &epochid.ID{QueryID: "q", EpochID: ft.epoch}, p)
		p.Release()
		if err != nil {
			ft.t.Fatal(err)
		}
	}
}

// fold flushes every shard and folds it into the base table.
func (ft *floatKeyTable) fold() {
	ft.t.Helper()
	for i, s := range ft.shards {
		flush(ft.t, s)
		if _, err := NewFolder(ft.tbl, nil).FoldShard(context.Background(), ft.ids[i]); err != nil {
			ft.t.Fatal(err)
		}
	}
}

// check reads rec batches and requires one row per key class, the newest.
func (ft *floatKeyTable) check(what string, recs []arrow.RecordBatch) {
	ft.t.Helper()
	got := make(map[string]string)
	for _, r := range recs {
		for i := 0; i < int(r.NumRows()); i++ {
			c, v := typetest.FloatKeyClass(r.Column(0), i), r.Column(1).(*array.String).Value(i)
			if prev, dup := got[c]; dup {
				ft.t.Errorf("%s: key class %s holds two rows: %q and %q", what, c, prev, v)
			}
			got[c] = v
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ft.want) {
		ft.t.Errorf("%s: rows by key class:\n got %v\nwant %v", what, got, ft.want)
	}
}

func (ft *floatKeyTable) checkMerged(what string) {
	ft.t.Helper()
	readers := make([]ShardReader, len(ft.shards))
	for i, s := range ft.shards {
		readers[i] = s
	}
	r, err := ScanMerged(context.Background(), ft.tbl, readers, engine.ScanOptions{})
	if err != nil {
		ft.t.Fatal(err)
	}
	defer r.Release()
	var recs []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		defer rec.Release()
		recs = append(recs, rec)
	}
	if err := r.Err(); err != nil {
		ft.t.Fatal(err)
	}
	ft.check(what, recs)
}

func (ft *floatKeyTable) checkBase(what string) {
	ft.t.Helper()
	recs, err := ft.tbl.ReadAll(context.Background(), engine.ScanOptions{})
	if err != nil {
		ft.t.Fatal(err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	ft.check(what, recs)
}

// TestFloatKeyClassesAgree: -0.0 and 0.0, and NaNs of any payload, are one key to the routing, a
// merged read of separate puts, the fold's upsert and a merged read over a folded base: each
// keeps one row per key class, the newest.
func TestFloatKeyClassesAgree(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		for _, dt := range []arrow.DataType{arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64} {
			t.Run(dt.String(), func(t *testing.T) {
				keys := typetest.FloatKeys(dt.ID())
				ft := newFloatKeyTable(t, store, dt)
				for _, k := range keys {
					ft.put(k) // one epoch a key: the newest of a class is its last sample
				}
				ft.checkMerged("merged read of the puts")
				ft.fold()
				ft.checkBase("base after the fold")
				ft.checkMerged("merged read after the fold")
				for i := len(keys) - 1; i >= 0; i-- {
					ft.put(keys[i]) // now the first sample of a class is the newest
				}
				ft.checkMerged("merged read of new puts over the folded base")
				ft.fold()
				ft.checkBase("base after the second fold")
			})
		}
	})
}

// TestPartitionByKeyFloatKeyClasses: every sample of a key class is routed to one shard.
func TestPartitionByKeyFloatKeyClasses(t *testing.T) {
	for _, dt := range []arrow.DataType{arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64} {
		sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: dt}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		for _, k := range typetest.FloatKeys(dt.ID()) {
			k.Append(b.Field(0))
		}
		rec := b.NewRecordBatch()
		b.Release()
		parts, err := PartitionByKey(context.Background(), rec, []string{"k"}, 64)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		shardOf := make(map[string]int)
		for s, p := range parts {
			if p == nil {
				continue
			}
			for i := 0; i < int(p.NumRows()); i++ {
				c := typetest.FloatKeyClass(p.Column(0), i)
				if prev, ok := shardOf[c]; ok && prev != s {
					t.Errorf("%s: key class %s routed to shards %d and %d", dt, c, prev, s)
				}
				shardOf[c] = s
			}
			p.Release()
		}
	}
}

// TestTableShardIDsLimit: a table config is read up to MaxShards shards, by count or by list,
// and refused beyond (the create spec's limit is the same constant).
func TestTableShardIDsLimit(t *testing.T) {
	list := func(n int) string { return strings.Join(ShardIDs(n), ",") }
	for _, tc := range []struct {
		config map[string]string
		want   int // -1: refused
	}{
		{map[string]string{ConfigShards: strconv.Itoa(MaxShards)}, MaxShards},
		{map[string]string{ConfigShards: strconv.Itoa(MaxShards + 1)}, -1},
		{map[string]string{ConfigShardIDs: list(MaxShards)}, MaxShards},
		{map[string]string{ConfigShardIDs: list(MaxShards + 1)}, -1},
	} {
		ids, err := TableShardIDs(&engine.Manifest{Config: tc.config})
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("%d shards read, want refused", len(ids))
		case tc.want >= 0 && (err != nil || len(ids) != tc.want):
			t.Errorf("%d shards, %v; want %d", len(ids), err, tc.want)
		}
	}
}
