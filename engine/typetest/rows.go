package typetest

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// RowsSchema is the schema of the MemWAL and WAL tests' rows: a key, the value a test checks, and
// the epoch that wrote the row.
var RowsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "val", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "epoch", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// Rows builds a batch of RowsSchema with ids from..from+n-1; val is tag+"-"+id.
func Rows(from, n int64, tag string, epoch int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, RowsSchema)
	defer b.Release()
	for id := from; id < from+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", tag, id))
		b.Field(2).(*array.Int64Builder).Append(epoch)
	}
	return b.NewRecordBatch()
}
