package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/engine/partition"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// testInspectCountsMemWALRows (a subtest of TestCLI, which builds bin): inspect counts a MemWAL
// table's acknowledged rows that are only in a memtable, and shows its query's last epoch from
// shard state.
func testInspectCountsMemWALRows(t *testing.T, bin string) {
	ctx := t.Context()
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	sink := streaming.NewSink(store, &streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	defer sink.Close()
	for e := int64(0); e < 2; e++ {
		ids := make([]int64, 2500)
		for i := range ids {
			ids[i] = e*2500 + int64(i)
		}
		rec := makeBatch(t, ids...)
		src, err := array.NewRecordReader(testSchema, []arrow.RecordBatch{rec})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		create := &streaming.CreateSpec{MemWAL: &struct{ Shards int }{Shards: 1}}
		ack, err := sink.WriteEpoch(ctx, streaming.EpochRequest{Table: "mw", QueryID: "q-mw", EpochID: 10 + e, Create: create}, src)
		if err != nil || ack.Route != streaming.RouteMemWAL {
			t.Fatalf("epoch %d: %+v, %v", e, ack, err)
		}
	}
	uri := filepath.Join(root, "mw")
	var d inspectJSON
	out := runCLI(t, bin, nil, "inspect", "--json", uri).mustSucceed(t).stdout
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if d.Rows != 5000 || d.BaseRows != 0 || d.MemWALRows != 5000 {
		t.Errorf("rows %d (base %d, MemWAL %d), want 5000 (0, 5000)", d.Rows, d.BaseRows, d.MemWALRows)
	}
	if wm, ok := d.Streams["q-mw"]; len(d.Streams) != 1 || !ok || wm.Epoch != 11 || !wm.InMemWAL {
		t.Errorf("streams = %+v, want q-mw at epoch 11 in MemWAL", d.Streams)
	}
	txt := runCLI(t, bin, nil, "inspect", uri).mustSucceed(t).stdout
	if !hasRow(txt, "rows:", "5000", "(0", "base,", "5000", "in", "MemWAL", "shards)") || !hasRow(txt, "q-mw", "11", "MemWAL") {
		t.Errorf("inspect text lacks the MemWAL rows or the watermark row:\n%s", txt)
	}

	// A keyed MemWAL table whose 100 keys were each written 3 times: a reader sees 100 rows.
	keyed := &streaming.CreateSpec{PrimaryKey: []string{"id"}, MemWAL: &struct{ Shards int }{Shards: 1}}
	keys := make([]int64, 100)
	for i := range keys {
		keys[i] = int64(i)
	}
	for e := int64(0); e < 3; e++ {
		rec := makeBatch(t, keys...)
		src, err := array.NewRecordReader(testSchema, []arrow.RecordBatch{rec})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.WriteEpoch(ctx, streaming.EpochRequest{Table: "kmw", QueryID: "q-k", EpochID: e, Create: keyed}, src); err != nil {
			t.Fatal(err)
		}
	}
	var k inspectJSON
	if err := json.Unmarshal([]byte(runCLI(t, bin, nil, "inspect", "--json", filepath.Join(root, "kmw")).mustSucceed(t).stdout), &k); err != nil {
		t.Fatal(err)
	}
	if k.Rows != 100 || k.BaseRows != 0 || k.MemWALRows != 100 {
		t.Errorf("keyed MemWAL table: rows %d (base %d, MemWAL %d), want 100 (0, 100): one per key", k.Rows, k.BaseRows, k.MemWALRows)
	}
}

// testInspectShowsPartitions (a subtest of TestCLI): inspect shows a partitioned table's spec
// and each fragment's partition, in JSON and in text.
func testInspectShowsPartitions(t *testing.T, bin string) {
	ctx := t.Context()
	root := t.TempDir()
	store, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	sink := streaming.NewSink(store, &streaming.Options{DefaultMaintenance: &engine.MaintenanceConfig{Mode: engine.MaintenanceOff}})
	defer sink.Close()
	spec, err := partition.ParseSpec([]byte(`[{"column":"id","transform":"truncate[10]"}]`))
	if err != nil {
		t.Fatal(err)
	}
	rec := makeBatch(t, 1, 2, 15)
	src, err := array.NewRecordReader(testSchema, []arrow.RecordBatch{rec})
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.WriteEpoch(ctx, streaming.EpochRequest{Table: "pt", QueryID: "q", EpochID: 0, Create: &streaming.CreateSpec{PartitionBy: spec}}, src); err != nil {
		t.Fatal(err)
	}
	uri := filepath.Join(root, "pt")
	var d inspectJSON
	out := runCLI(t, bin, nil, "inspect", "--json", uri).mustSucceed(t).stdout
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(d.PartitionBy) != 1 || d.PartitionBy[0].Column != "id" || d.PartitionBy[0].Transform != "truncate[10]" {
		t.Errorf("partition_by %+v", d.PartitionBy)
	}
	if len(d.Fragments) != 2 || d.Fragments[0].Partition.String() != "[0]" || d.Fragments[1].Partition.String() != "[10]" {
		t.Errorf("fragments %+v, want partitions [0] and [10]", d.Fragments)
	}
	txt := runCLI(t, bin, nil, "inspect", uri).mustSucceed(t).stdout
	if !hasRow(txt, "partition", "by:", "truncate[10](id)") || !hasRow(txt, "2", "1", "0", "[10]") {
		t.Errorf("inspect text lacks the spec or a fragment's partition:\n%s", txt)
	}
}
