package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// CheckIPCSchema verifies the schema message at the start of an Arrow IPC stream before arrow-go
// reads it. arrow-go trusts the flatbuffer: it sizes slices by the vector lengths it finds (a
// corrupt length of 2^31 fields is a "fatal error: out of memory" no recover catches) and follows
// offsets wherever they point (a cycle recurses until the stack overflows, also fatal). This
// check walks every vector the schema reader allocates by (fields, children, custom metadata,
// features, union type ids), requiring each to fit in the message, every offset to point
// forward inside it, and nesting to stay shallow.
func CheckIPCSchema(b []byte) error {
	if len(b) < 8 {
		return errors.New("ipc schema: stream too short")
	}
	p := 0
	if binary.LittleEndian.Uint32(b) == 0xFFFFFFFF { // continuation marker
		p = 4
	}
	n := int(int32(binary.LittleEndian.Uint32(b[p:])))
	p += 4
	if n < 4 || n > len(b)-p {
		return fmt.Errorf("ipc schema: metadata length %d does not fit the %d-byte stream", n, len(b))
	}
	fb := flatbuf{b: b[p : p+n]}
	msg, err := fb.root()
	if err != nil {
		return err
	}
	schema, ok, err := fb.tableField(msg, 2) // Message.header
	if err != nil || !ok {
		return errors.Join(errors.New("ipc schema: message has no header"), err)
	}
	if err := fb.checkKeyValues(schema, 2); err != nil { // Schema.custom_metadata
		return err
	}
	if _, _, err := fb.vectorField(schema, 3, 8); err != nil { // Schema.features
		return err
	}
	return fb.checkFields(schema, 1, 0) // Schema.fields
}

// maxSchemaDepth bounds the nesting of fields (a struct of lists of structs...).
const maxSchemaDepth = 64

type flatbuf struct{ b []byte }

func (f flatbuf) u32(p int) (int, error) {
	if p < 0 || p+4 > len(f.b) {
		return 0, fmt.Errorf("ipc schema: offset %d outside the %d-byte message", p, len(f.b))
	}
	return int(binary.LittleEndian.Uint32(f.b[p:])), nil
}

func (f flatbuf) u16(p int) (int, error) {
	if p < 0 || p+2 > len(f.b) {
		return 0, fmt.Errorf("ipc schema: offset %d outside the %d-byte message", p, len(f.b))
	}
	return int(binary.LittleEndian.Uint16(f.b[p:])), nil
}

// deref follows the forward offset stored at p.
func (f flatbuf) deref(p int) (int, error) {
	off, err := f.u32(p)
	if err != nil {
		return 0, err
	}
	if off == 0 || p+off >= len(f.b) {
		return 0, fmt.Errorf("ipc schema: offset at %d points outside the message", p)
	}
	return p + off, nil
}

func (f flatbuf) root() (int, error) { return f.deref(0) }

// field returns the position of field i of the table at t, or ok=false when it is absent.
func (f flatbuf) field(t, i int) (int, bool, error) {
	soff, err := f.u32(t)
	if err != nil {
		return 0, false, err
	}
	v := t - int(int32(uint32(soff)))
	vsize, err := f.u16(v)
	if err != nil {
		return 0, false, err
	}
	if 4+2*i+2 > vsize {
		return 0, false, nil
	}
	off, err := f.u16(v + 4 + 2*i)
	if err != nil || off == 0 {
		return 0, false, err
	}
	if t+off >= len(f.b) {
		return 0, false, fmt.Errorf("ipc schema: field %d of table %d outside the message", i, t)
	}
	return t + off, true, nil
}

func (f flatbuf) tableField(t, i int) (int, bool, error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, ok, err
	}
	tt, err := f.deref(p)
	return tt, err == nil, err
}

// vectorField returns the start and length of vector field i of table t whose elements are elem
// bytes, checking that it fits in the message.
func (f flatbuf) vectorField(t, i, elem int) (start, n int, err error) {
	p, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, 0, err
	}
	v, err := f.deref(p)
	if err != nil {
		return 0, 0, err
	}
	if n, err = f.u32(v); err != nil {
		return 0, 0, err
	}
	if n > (len(f.b)-v-4)/elem {
		return 0, 0, fmt.Errorf("ipc schema: a vector claims %d elements in a %d-byte message", n, len(f.b))
	}
	return v + 4, n, nil
}

func (f flatbuf) checkString(p int) error {
	s, err := f.deref(p)
	if err != nil {
		return err
	}
	n, err := f.u32(s)
	if err != nil {
		return err
	}
	if n > len(f.b)-s-4 {
		return fmt.Errorf("ipc schema: a string claims %d bytes in a %d-byte message", n, len(f.b))
	}
	return nil
}

// checkKeyValues checks the custom-metadata vector field i of table t.
func (f flatbuf) checkKeyValues(t, i int) error {
	start, n, err := f.vectorField(t, i, 4)
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		kv, err := f.deref(start + 4*k)
		if err != nil {
			return err
		}
		for j := 0; j < 2; j++ { // key, value
			if p, ok, err := f.field(kv, j); err != nil {
				return err
			} else if ok {
				if err := f.checkString(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkFields checks the vector of Field tables at field i of table t, recursively.
func (f flatbuf) checkFields(t, i, depth int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("ipc schema: fields nested deeper than %d", maxSchemaDepth)
	}
	start, n, err := f.vectorField(t, i, 4)
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		fld, err := f.deref(start + 4*k)
		if err != nil {
			return err
		}
		if p, ok, err := f.field(fld, 0); err != nil { // name
			return err
		} else if ok {
			if err := f.checkString(p); err != nil {
				return err
			}
		}
		if err := f.checkKeyValues(fld, 6); err != nil { // custom_metadata
			return err
		}
		// Union (type_type 14) is the one type whose table holds a vector: typeIds, field 1.
		if tt, ok, err := f.field(fld, 2); err != nil {
			return err
		} else if ok && f.b[tt] == 14 {
			if typ, ok, err := f.tableField(fld, 3); err != nil {
				return err
			} else if ok {
				if _, _, err := f.vectorField(typ, 1, 4); err != nil {
					return err
				}
			}
		}
		if err := f.checkFields(fld, 5, depth+1); err != nil { // children
			return err
		}
	}
	return nil
}
