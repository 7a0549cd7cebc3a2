package wal

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// rowsSchema: a key, the value a test checks, and the epoch that wrote the row (memwal's tests
// use the same).
var rowsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "val", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "epoch", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// makeRows builds a batch of rowsSchema with ids from..from+n-1; val is tag+"-"+id.
func makeRows(from, n int64, tag string, epoch int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowsSchema)
	defer b.Release()
	for id := from; id < from+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", tag, id))
		b.Field(2).(*array.Int64Builder).Append(epoch)
	}
	return b.NewRecordBatch()
}

// testShardID is the shard id the tests name (any string does: the WAL only puts it in messages).
const testShardID = "6f1c9a52-3b0e-4d1a-9a57-0c2d8e4f7b61"

// testPrefix is the WAL directory of testShardID in table "events".
const testPrefix = "events/_mem_wal/" + testShardID + "/" + Dir

// benchEpochRows is the rows of one epoch in the benchmarks (memwal's BenchmarkEpochPut's).
const benchEpochRows = 1000
