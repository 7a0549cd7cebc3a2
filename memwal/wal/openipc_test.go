package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestOpenIPCRefusesImpossibleDecimal: a stored stream whose schema holds a decimal no table can
// hold (decimal256 precision 77, decimal128 scale above its precision) is ErrCorrupt at replay,
// before any row of it is read; a valid decimal opens.
func TestOpenIPCRefusesImpossibleDecimal(t *testing.T) {
	for _, tc := range []struct {
		dt   arrow.DataType
		fail bool
	}{
		{&arrow.Decimal256Type{Precision: 77}, true},
		{&arrow.Decimal128Type{Precision: 5, Scale: 6}, true},
		{&arrow.Decimal128Type{Precision: 5, Scale: -1}, true},
		{&arrow.Decimal128Type{Precision: 38, Scale: 10}, false},
	} {
		sc := arrow.NewSchema([]arrow.Field{{Name: "d", Type: tc.dt, Nullable: true}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		b.Field(0).AppendNull()
		rec := b.NewRecordBatch()
		b.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := OpenIPC("entry", buf.Bytes(), memory.DefaultAllocator)
		if !tc.fail {
			if err != nil {
				t.Fatalf("%s: %v", tc.dt, err)
			}
			r.Release()
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: OpenIPC: %v, want ErrCorrupt", tc.dt, err)
		}
	}
}
