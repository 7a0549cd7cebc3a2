package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/flight-sink/flight-sink/engine/expr"
	"github.com/flight-sink/flight-sink/engine/typetest"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

var floatKeyTypes = []arrow.DataType{arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64}

// floatKeyBatch builds a (k float, v string) batch of keys, row i valued vals[i].
func floatKeyBatch(dt arrow.DataType, keys []typetest.FloatKey, vals []string) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: dt}, {Name: "v", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, k := range keys {
		k.Append(b.Field(0))
		b.Field(1).(*array.StringBuilder).Append(vals[i])
	}
	return b.NewRecordBatch()
}

// TestKeyEncoderFloatClasses: two float keys encode equal exactly when they are of one class
// (-0.0 and 0.0; every NaN), in one batch and across batches.
func TestKeyEncoderFloatClasses(t *testing.T) {
	for _, dt := range floatKeyTypes {
		t.Run(dt.String(), func(t *testing.T) {
			keys := typetest.FloatKeys(dt.ID())
			rec := floatKeyBatch(dt, keys, make([]string, len(keys)))
			defer rec.Release()
			enc, err := expr.NewKeyEncoder(rec, []string{"k"})
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range keys {
				ka, _ := enc.Key(i)
				for j, b := range keys {
					kb, _ := enc.Key(j)
					if same := ka == kb; same != (a.Class == b.Class) {
						t.Errorf("keys %#x (%s) and %#x (%s): equal encodings %v, want %v", a.Bits, a.Class, b.Bits, b.Class, same, !same)
					}
				}
			}
		})
	}
}

// TestUpsertFloatKeyClasses upserts every sample float key, first all in one batch and then one
// row at a time, with and without a primary-key index: the table keeps one row per key class,
// the newest of it.
func TestUpsertFloatKeyClasses(t *testing.T) {
	storetest.ForEach(t, false, func(t *testing.T, store objstore.Store) {
		for _, dt := range floatKeyTypes {
			for _, indexed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/indexed=%v", dt, indexed), func(t *testing.T) {
					ctx := t.Context()
					keys := typetest.FloatKeys(dt.ID())
					sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: dt}, {Name: "v", Type: arrow.BinaryTypes.String}}, nil)
					tbl, err := Create(ctx, store, fmt.Sprintf("fk_%s_%v", dt, indexed), sc, CreateOptions{PrimaryKey: []string{"k"}}, nil)
					if err != nil {
						t.Fatal(err)
					}
					if indexed {
						if _, err := tbl.CreateIndex(ctx, IndexSpec{}); err != nil {
							t.Fatal(err)
						}
					}
					want := make(map[string]string) // class -> newest value
					upsert := func(keys []typetest.FloatKey, tag string) {
						t.Helper()
						vals := make([]string, len(keys))
						for i, k := range keys {
							vals[i] = fmt.Sprintf("%s-%d-%#x", tag, i, k.Bits)
							want[k.Class] = vals[i]
						}
						rec := floatKeyBatch(dt, keys, vals)
						defer rec.Release()
						if _, err := tbl.Upsert(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
							t.Fatal(err)
						}
						if indexed { // the next upsert finds these keys through the index
							if _, err := tbl.OptimizeIndices(ctx, OptimizeIndexOptions{}); err != nil {
								t.Fatal(err)
							}
						}
					}
					upsert(keys, "batch")
					for i, k := range keys {
						upsert([]typetest.FloatKey{k}, fmt.Sprintf("row%d", i))
					}
					got := make(map[string]string)
					recs, err := tbl.ReadAll(ctx, ScanOptions{})
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range recs {
						for i := 0; i < int(r.NumRows()); i++ {
							c := typetest.FloatKeyClass(r.Column(0), i)
							if prev, dup := got[c]; dup {
								t.Errorf("key class %s holds two rows: %q and %q", c, prev, r.Column(1).(*array.String).Value(i))
							}
							got[c] = r.Column(1).(*array.String).Value(i)
						}
						r.Release()
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("rows by key class:\n got %v\nwant %v", got, want)
					}
				})
			}
		}
	})
}

// TestPKSegmentFormat1FloatKeysNotTrusted: a format-1 segment (written before NaN keys were
// canonical) is read, and trusted for an index without float key columns only; for a float key a
// lookup scans its fragments instead.
func TestPKSegmentFormat1FloatKeysNotTrusted(t *testing.T) {
	b := encodePKSegment([]pkEntry{{key: "a", addr: 1}})
	b[4] = 1 // format 1
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crcTable))
	ps, err := decodePKSegment(b)
	if err != nil {
		t.Fatalf("decode a format-1 segment: %v", err)
	}
	for _, tc := range []struct {
		dt   arrow.DataType
		want bool
	}{
		{arrow.PrimitiveTypes.Int64, true},
		{arrow.BinaryTypes.String, true},
		{arrow.PrimitiveTypes.Float32, false},
		{arrow.PrimitiveTypes.Float64, false},
	} {
		m := &Manifest{schema: arrow.NewSchema([]arrow.Field{{Name: "k", Type: tc.dt}}, nil)}
		if got := ps.keysCurrent(m, []string{"k"}); got != tc.want {
			t.Errorf("format-1 segment over a %s key: current %v, want %v", tc.dt, got, tc.want)
		}
	}
}
