package arrowschema

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// EncodeSchema serialises a schema as an Arrow IPC stream with no batches.
func EncodeSchema(sc *arrow.Schema) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(memory.DefaultAllocator))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return buf.Bytes(), nil
}

func DecodeSchema(b []byte) (*arrow.Schema, error) {
	if err := CheckIPCSchema(b); err != nil {
		return nil, err
	}
	limit := int64(len(b))
	mr := ipc.NewMessageReader(bytes.NewReader(b), ipc.WithMetadataSizeLimit(limit), ipc.WithBodySizeLimit(limit)) // ipc.NewReader ignores the limits
	r, err := ipc.NewReaderFromMessageReader(mr)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	return r.Schema(), nil
}

// CheckAppendSchema verifies that batches of schema in can be written into a table of schema
// table. Columns are matched by name; order may differ. It returns an error wrapping
// ErrSchemaMismatch that names the column and both types when:
//   - a table column is missing from in, or in has a column the table lacks;
//   - a column's type differs;
//   - in's column is nullable where the table's is not (nullability may only narrow toward the table).
//
// On success it returns, for each table column, the index of the matching column of in.
func CheckAppendSchema(table, in *arrow.Schema) ([]int, error) {
	if in.NumFields() != table.NumFields() {
		for _, f := range in.Fields() {
			if _, ok := table.FieldsByName(f.Name); !ok {
				return nil, fmt.Errorf("%w: column %q (%s) is not in the table schema %s", ErrSchemaMismatch, f.Name, f.Type, FieldList(table))
			}
		}
	}
	idx := make([]int, table.NumFields())
	for i, tf := range table.Fields() {
		js := in.FieldIndices(tf.Name)
		if len(js) == 0 {
			return nil, fmt.Errorf("%w: column %q (%s) is missing from the written data", ErrSchemaMismatch, tf.Name, tf.Type)
		}
		if len(js) > 1 {
			return nil, fmt.Errorf("%w: column %q appears %d times in the written data", ErrSchemaMismatch, tf.Name, len(js))
		}
		inf := in.Field(js[0])
		if !SameType(tf.Type, inf.Type) {
			return nil, fmt.Errorf("%w: column %q has type %s in the table but %s in the written data", ErrSchemaMismatch, tf.Name, tf.Type, inf.Type)
		}
		if inf.Nullable && !tf.Nullable {
			return nil, fmt.Errorf("%w: column %q is not nullable in the table (%s not null) but nullable in the written data (%s)", ErrSchemaMismatch, tf.Name, tf.Type, inf.Type)
		}
		idx[i] = js[0]
	}
	return idx, nil
}

func FieldList(sc *arrow.Schema) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, f := range sc.Fields() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", f.Name, f.Type)
	}
	b.WriteByte(']')
	return b.String()
}

// ProjectSchema returns the schema of columns of full, in that order, with full's metadata
// (full itself when columns is empty); an unknown column is ErrSchemaMismatch naming it.
func ProjectSchema(full *arrow.Schema, columns []string) (*arrow.Schema, error) {
	if len(columns) == 0 {
		return full, nil
	}
	fields := make([]arrow.Field, len(columns))
	for i, c := range columns {
		js := full.FieldIndices(c)
		if len(js) == 0 {
			return nil, fmt.Errorf("%w: no column %q in %s", ErrSchemaMismatch, c, FieldList(full))
		}
		fields[i] = full.Field(js[0])
	}
	md := full.Metadata()
	return arrow.NewSchema(fields, &md), nil
}
