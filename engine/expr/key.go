package expr

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// Primary-key equality. Two rows have the same primary key exactly when their encoded keys
// (KeyEncoder) are equal. Every place that decides key equality — an upsert and the index it reads
// and writes (pk.idx keys are these bytes), the MemWAL's newest-row-per-key merge and its routing
// of a key to a shard — uses this one encoding, so a fold and a merged read never disagree.
//
// Values compare as Go's == compares them, except floating-point keys: -0.0 and 0.0 are the same
// key, and every NaN (any sign or payload, float32 or float64) is the same key, so a key read back
// is always found again. Float32 values are encoded as the float64 they convert to.

// canonicalNaN is the bit pattern every NaN key is encoded as: the quiet NaN that Arrow C++,
// NumPy and Java write, so the keys of most existing NaN rows are already canonical.
const canonicalNaN = 0x7ff8000000000000

// floatKeyBits returns the key bits of f: -0.0 folded into 0.0 and every NaN into canonicalNaN.
func floatKeyBits(f float64) uint64 {
	switch {
	case f != f:
		return canonicalNaN
	case f == 0:
		return 0 // -0.0 == 0.0
	}
	return math.Float64bits(f)
}

// KeyEncoder turns the primary-key columns of a batch's rows into comparable strings: per column
// a fixed-width (integers, floats, bools) or length-prefixed (strings, binaries, the canonical
// string form of any other type) encoding of the value, so distinct keys never collide and equal
// keys (see floatKeyBits) always do. The encoding is part of the primary-key index file format
// (index_segment.go): changing it needs a new segment format number.
//
// A KeyEncoder reuses one buffer: it is not safe for concurrent use.
type KeyEncoder struct {
	parts []func(dst []byte, i int) []byte
	cols  []arrow.Array
	buf   []byte
}

// NewKeyEncoder returns an encoder of the key columns key of rec. It fails (ErrSchemaMismatch)
// when a key column is missing from rec.
func NewKeyEncoder(rec arrow.RecordBatch, key []string) (*KeyEncoder, error) {
	e := &KeyEncoder{}
	for _, name := range key {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("%w: primary key column %q is missing", arrowschema.ErrSchemaMismatch, name)
		}
		f, arr := rec.Schema().Field(idx[0]), rec.Column(idx[0])
		e.cols = append(e.cols, arr)
		k, kerr := kindOf(f)
		if kerr != nil || k == kindDecimal {
			// Any other type: its canonical string form, length-prefixed.
			e.parts = append(e.parts, func(dst []byte, i int) []byte {
				s := arr.ValueStr(i)
				dst = binary.AppendUvarint(dst, uint64(len(s)))
				return append(dst, s...)
			})
			continue
		}
		get, err := literalGetter(arr, k)
		if err != nil {
			return nil, err
		}
		switch k {
		case kindInt:
			e.parts = append(e.parts, func(dst []byte, i int) []byte { return binary.BigEndian.AppendUint64(dst, uint64(get(i).i)) })
		case kindUint:
			e.parts = append(e.parts, func(dst []byte, i int) []byte { return binary.BigEndian.AppendUint64(dst, get(i).u) })
		case kindFloat:
			e.parts = append(e.parts, func(dst []byte, i int) []byte { return binary.BigEndian.AppendUint64(dst, floatKeyBits(get(i).f)) })
		case kindString:
			e.parts = append(e.parts, func(dst []byte, i int) []byte {
				s := get(i).s
				dst = binary.AppendUvarint(dst, uint64(len(s)))
				return append(dst, s...)
			})
		case kindBool:
			e.parts = append(e.parts, func(dst []byte, i int) []byte {
				if get(i).b {
					return append(dst, 1)
				}
				return append(dst, 0)
			})
		}
	}
	return e, nil
}

// AppendKey appends row i's encoded key to dst; ok is false (and dst is returned as given) when
// a key column of the row is null: a null key equals no key.
func (e *KeyEncoder) AppendKey(dst []byte, i int) (_ []byte, ok bool) {
	for _, c := range e.cols {
		if c.IsNull(i) {
			return dst, false
		}
	}
	for _, part := range e.parts {
		dst = part(dst, i)
	}
	return dst, true
}

// Key returns row i's encoded key; ok is false when a key column of the row is null.
func (e *KeyEncoder) Key(i int) (string, bool) {
	var ok bool
	if e.buf, ok = e.AppendKey(e.buf[:0], i); !ok {
		return "", false
	}
	return string(e.buf), true
}
