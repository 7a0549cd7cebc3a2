package arrowschema

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// expansionBombs are batches a few kilobytes (or megabytes) big whose stored form is hundreds of
// megabytes: the conversion must refuse them within its budget instead of allocating that much.
func expansionBombs(t *testing.T, mem memory.Allocator) map[string]arrow.RecordBatch {
	t.Helper()
	big := strings.Repeat("x", 1<<20) // 1 MiB value
	one := func(name string, arr arrow.Array) arrow.RecordBatch {
		defer arr.Release()
		sc := arrow.NewSchema([]arrow.Field{{Name: "c", Type: arr.DataType(), Nullable: true}}, nil)
		return array.NewRecordBatch(sc, []arrow.Array{arr}, int64(arr.Len()))
	}
	out := map[string]arrow.RecordBatch{}

	// A dictionary of one 1 MiB string, and 1,000 indices that all name it: 4 KB -> 1 GB.
	db := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
	for i := 0; i < 1000; i++ {
		if err := db.AppendString(big); err != nil {
			t.Fatal(err)
		}
	}
	out["dictionary"] = one("dictionary", db.NewArray())
	db.Release()

	// One run of 100 million rows of an int64: 16 bytes of runs -> 800 MB.
	rb := array.NewRunEndEncodedBuilder(mem, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64)
	rb.Append(100_000_000)
	rb.ValueBuilder().(*array.Int64Builder).Append(7)
	out["run_end_encoded"] = one("run_end_encoded", rb.NewArray())
	rb.Release()

	// 1,000 string views of one 1 MiB region: 16 KB of views + 1 MiB -> 1 GB.
	vb := array.NewStringViewBuilder(mem)
	for i := 0; i < 1000; i++ {
		vb.Append(big) // the builder copies; the expansion is what the cast must hold
	}
	out["utf8_view"] = one("utf8_view", vb.NewArray())
	vb.Release()
	return out
}

func TestStoreBatchRefusesExpansionBombs(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	const limit = 64 << 20
	for name, rec := range expansionBombs(t, mem) {
		t.Run(name, func(t *testing.T) {
			defer rec.Release()
			stored, err := StoredSchema(rec.Schema())
			if err != nil {
				t.Fatal(err)
			}
			out, err := StoreBatch(context.Background(), mem, stored, rec, limit)
			if err == nil {
				out.Release()
				t.Fatalf("a %s batch that expands past %d bytes was converted", name, limit)
			}
			if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), `"c"`) {
				t.Fatalf("got %v, want ErrBatchTooLarge naming column c", err)
			}
			// The same batch sliced to a few rows fits.
			small := rec.NewSlice(0, 3)
			defer small.Release()
			out, err = StoreBatch(context.Background(), mem, stored, small, limit)
			if err != nil {
				t.Fatalf("3 rows of %s: %v", name, err)
			}
			out.Release()
		})
	}
}
