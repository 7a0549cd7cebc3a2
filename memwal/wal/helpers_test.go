package wal

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/typetest"
)

// rowsSchema and makeRows are typetest's rows: a key, the value a test checks (tag+"-"+id), and
// the epoch that wrote the row.
var rowsSchema = typetest.RowsSchema

func makeRows(from, n int64, tag string, epoch int64) arrow.RecordBatch {
	return typetest.Rows(from, n, tag, epoch)
}

// testShardID is the shard id the tests name (any string does: the WAL only puts it in messages).
const testShardID = "6f1c9a52-3b0e-4d1a-9a57-0c2d8e4f7b61"

// testPrefix is the WAL directory of testShardID in table "events".
const testPrefix = "events/_mem_wal/" + testShardID + "/" + Dir

// benchEpochRows is the rows of one epoch in the benchmarks (memwal's BenchmarkEpochPut's).
const benchEpochRows = 1000
