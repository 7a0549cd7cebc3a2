package memwal

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// keyEncoder turns the primary-key columns of a row into a byte string that is equal for two
// rows exactly when their keys are equal: each column writes a null marker, then a fixed-width
// or length-prefixed value.
type keyEncoder struct {
	cols []func(buf []byte, row int) []byte
}

// newKeyEncoder returns an encoder of the key columns pk of rec.
func newKeyEncoder(rec arrow.RecordBatch, pk []string) (*keyEncoder, error) {
	enc := &keyEncoder{}
	for _, name := range pk {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("memwal: primary key column %q is not in the batch schema", name)
		}
		enc.cols = append(enc.cols, columnEncoder(rec.Column(idx[0])))
	}
	return enc, nil
}

// appendKey appends the key of row to buf.
func (k *keyEncoder) appendKey(buf []byte, row int) []byte {
	for _, c := range k.cols {
		buf = c(buf, row)
	}
	return buf
}

func columnEncoder(col arrow.Array) func([]byte, int) []byte {
	u64 := func(get func(int) uint64) func([]byte, int) []byte {
		return func(buf []byte, i int) []byte {
			if col.IsNull(i) {
				return append(buf, 0)
			}
			return binary.BigEndian.AppendUint64(append(buf, 1), get(i))
		}
	}
	bytesOf := func(get func(int) []byte) func([]byte, int) []byte {
		return func(buf []byte, i int) []byte {
			if col.IsNull(i) {
				return append(buf, 0)
			}
			v := get(i)
			buf = binary.AppendUvarint(append(buf, 1), uint64(len(v)))
			return append(buf, v...)
		}
	}
	switch a := col.(type) {
	case *array.Int8:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Int16:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Int32:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Int64:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Uint8:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Uint16:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Uint32:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Uint64:
		return u64(a.Value)
	case *array.Float32:
		return u64(func(i int) uint64 { return uint64(math.Float32bits(a.Value(i))) })
	case *array.Float64:
		return u64(func(i int) uint64 { return math.Float64bits(a.Value(i)) })
	case *array.Boolean:
		return u64(func(i int) uint64 {
			if a.Value(i) {
				return 1
			}
			return 0
		})
	case *array.Date32:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Date64:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Timestamp:
		return u64(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.String:
		return bytesOf(func(i int) []byte { return []byte(a.Value(i)) })
	case *array.LargeString:
		return bytesOf(func(i int) []byte { return []byte(a.Value(i)) })
	case *array.Binary:
		return bytesOf(a.Value)
	case *array.LargeBinary:
		return bytesOf(a.Value)
	case *array.FixedSizeBinary:
		return bytesOf(a.Value)
	default:
		// Any other type: its canonical string form, which is unique per value for the types
		// that make sense as keys.
		return bytesOf(func(i int) []byte { return []byte(col.ValueStr(i)) })
	}
}
