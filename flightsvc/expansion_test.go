package flightsvc_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/flight-sink/flight-sink/flightsvc"
)

// A dictionary column is small on the wire and stored as plain values: 2,000 indices naming one
// 1 MiB string are 2 GB once stored. The server refuses it with ResourceExhausted before it
// expands anything, creates nothing, and keeps serving.
func TestDictionaryExpansionIsBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t, flightsvc.Config{MaxDecodedMessageBytes: 64 << 20})
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{{Name: "tag", Type: dt, Nullable: true}}, nil)
	build := func(rows int, value string) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		db := b.Field(0).(*array.BinaryDictionaryBuilder)
		for i := 0; i < rows; i++ {
			if err := db.AppendString(value); err != nil {
				t.Fatal(err)
			}
		}
		return b.NewRecordBatch()
	}
	bomb := build(2000, strings.Repeat("x", 1<<20))
	defer bomb.Release()
	_, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "dict", "query_id": "q", "epoch_id": 0, "create": true}), sc, bomb)
	wantCode(t, err, codes.ResourceExhausted, "tag")
	if _, err := s.Client.GetFlightInfo(testCtx(t), pathDesc("dict")); codeOf(err) != codes.NotFound {
		t.Fatalf("after a refused create-on-put: GetFlightInfo %v, want NotFound", err)
	}
	ok := build(2000, "small")
	defer ok.Release()
	a, err := s.put(testCtx(t), cmdDesc(t, cmd{"table": "dict", "query_id": "q", "epoch_id": 0, "create": true}), sc, ok)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, a, "committed", 2)
}
