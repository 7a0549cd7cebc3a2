package typetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
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

// StringIDStream returns an Arrow IPC stream of two rows of one string column "id": well formed,
// and not of RowsSchema (whose "id" is int64), so a writer of RowsSchema's table refuses it.
func StringIDStream(t testing.TB) []byte {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"x", "y"}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
