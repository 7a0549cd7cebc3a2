package parquetfile

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
)

// Parquet shapes. pqarrow cannot encode a fixed_size_list with a null row ("lists with non-zero
// length null components are not supported": the null row still owns its slots of the child
// array), although it reads one back. Parquet stores a fixed-size list as a plain LIST group, so
// a file of such a schema is written here in its Parquet shape, every fixed_size_list replaced by
// a list whose null rows are empty, with the table's own Arrow schema stored as ARROW:schema: a
// reader (ours, pqarrow's) restores the fixed-size lists from it.

// ArrowSchemaKey is the Parquet key-value metadata key of the serialized Arrow schema, as pqarrow
// writes and reads it.
const ArrowSchemaKey = "ARROW:schema"

// ArrowSchemaValue serializes schema the way pqarrow.WithStoreSchema stores it, field ids
// (PARQUET:field_id) included, as pyarrow stores them: the Parquet schema's nodes carry them too,
// but arrow-rs's Parquet reader (iceberg-rust's) takes each field's metadata from the stored
// schema alone, and iceberg-rust, finding no ids there, matches a file's columns to the table's
// by position (field id N is column N), which misreads a file lacking a column.
func ArrowSchemaValue(schema *arrow.Schema, mem memory.Allocator) (string, error) {
	var ser bytes.Buffer
	iw := ipc.NewWriter(&ser, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	if err := iw.Close(); err != nil {
		return "", fmt.Errorf("serialize arrow schema: %w", err)
	}
	return base64.StdEncoding.EncodeToString(ser.Bytes()), nil
}

// ParquetShape returns the schema pqarrow encodes files of schema in, and whether it differs.
func ParquetShape(schema *arrow.Schema) (*arrow.Schema, bool) {
	fields := schema.Fields()
	changed := false
	for i, f := range fields {
		if t, ok := shapeType(f.Type); ok {
			fields[i].Type, changed = t, true
		}
	}
	if !changed {
		return schema, false
	}
	md := schema.Metadata()
	return arrow.NewSchema(fields, &md), true
}

// shapeType is ParquetShape of one type.
func shapeType(dt arrow.DataType) (arrow.DataType, bool) {
	shapeField := func(f arrow.Field) (arrow.Field, bool) {
		t, ok := shapeType(f.Type)
		f.Type = t
		return f, ok
	}
	switch t := dt.(type) {
	case *arrow.FixedSizeListType:
		f, _ := shapeField(t.ElemField())
		return arrow.ListOfField(f), true
	case *arrow.ListType:
		if f, ok := shapeField(t.ElemField()); ok {
			return arrow.ListOfField(f), true
		}
	case *arrow.LargeListType:
		if f, ok := shapeField(t.ElemField()); ok {
			return arrow.LargeListOfField(f), true
		}
	case *arrow.MapType:
		k, kok := shapeField(t.KeyField())
		v, vok := shapeField(t.ItemField())
		if kok || vok {
			m := arrow.MapOfFields(k, v)
			m.KeysSorted = t.KeysSorted
			return m, true
		}
	case *arrow.StructType:
		fields := t.Fields()
		changed := false
		for i, f := range fields {
			var ok bool
			if fields[i], ok = shapeField(f); ok {
				changed = true
			}
		}
		if changed {
			return arrow.StructOf(fields...), true
		}
	}
	return dt, false
}

// shapeArray converts arr to its Parquet shape to (shapeType of its type); a new reference.
func shapeArray(ctx context.Context, mem memory.Allocator, arr arrow.Array, to arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(arr.DataType(), to) {
		arr.Retain()
		return arr, nil
	}
	if fsl, ok := arr.(*array.FixedSizeList); ok {
		elem := to.(*arrow.ListType).Elem()
		child, err := shapeArray(ctx, mem, fsl.ListValues(), elem)
		if err != nil {
			return nil, err
		}
		defer child.Release()
		n := fsl.Len()
		size := int64(fsl.DataType().(*arrow.FixedSizeListType).Len())
		offsets := make([]int32, n+1)
		var values arrow.Array
		if fsl.NullN() == 0 {
			var start int64
			if n > 0 {
				start, _ = fsl.ValueOffsets(0)
			}
			for i := range offsets {
				offsets[i] = int32(int64(i) * size)
			}
			values = array.NewSlice(child, start, start+int64(n)*size)
		} else {
			var idx []int64
			for i := 0; i < n; i++ {
				if fsl.IsValid(i) {
					start, end := fsl.ValueOffsets(i)
					for j := start; j < end; j++ {
						idx = append(idx, j)
					}
				}
				offsets[i+1] = int32(len(idx))
			}
			if values, err = arrowschema.Take(mem, child, idx); err != nil {
				return nil, err
			}
		}
		defer values.Release()
		d := fsl.Data()
		var valid *memory.Buffer
		if fsl.NullN() > 0 {
			valid = bitmapOf(fsl)
		}
		nd := array.NewData(to, n, []*memory.Buffer{valid, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets))},
			[]arrow.ArrayData{values.Data()}, d.NullN(), 0)
		defer nd.Release()
		return array.MakeFromData(nd), nil
	}
	// A nested type with a fixed-size list inside: shape the children whole and keep the parent's
	// buffers and offset.
	return arrowschema.WithChildren(arr, to, func(child arrow.Array, to arrow.DataType) (arrow.Array, error) {
		return shapeArray(ctx, mem, child, to)
	})
}

// bitmapOf returns a fresh validity bitmap of arr starting at bit 0.
func bitmapOf(arr arrow.Array) *memory.Buffer {
	n := arr.Len()
	bm := make([]byte, (n+7)/8)
	for i := 0; i < n; i++ {
		if arr.IsValid(i) {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	return memory.NewBufferBytes(bm)
}

// ShapedWriter is pqarrow's file writer on the Parquet shape of a schema that needs one.
type ShapedWriter struct {
	fw    *pqarrow.FileWriter
	shape *arrow.Schema
	mem   memory.Allocator
}

func NewShapedWriter(schema, shape *arrow.Schema, out io.Writer, props *parquet.WriterProperties) (*ShapedWriter, error) {
	fw, err := pqarrow.NewFileWriter(shape, out, props, pqarrow.NewArrowWriterProperties())
	if err != nil {
		return nil, err
	}
	v, err := ArrowSchemaValue(schema, props.Allocator())
	if err != nil {
		fw.Close()
		return nil, err
	}
	// The table's own schema, so readers restore the fixed-size lists the shape replaced.
	if err := fw.AppendKeyValueMetadata(ArrowSchemaKey, v); err != nil {
		fw.Close()
		return nil, err
	}
	return &ShapedWriter{fw: fw, shape: shape, mem: props.Allocator()}, nil
}

func (w *ShapedWriter) WriteBuffered(rec arrow.RecordBatch) error {
	cols := make([]arrow.Array, 0, rec.NumCols())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i, col := range rec.Columns() {
		c, err := shapeArray(context.Background(), w.mem, col, w.shape.Field(i).Type)
		if err != nil {
			return fmt.Errorf("column %s: %w", w.shape.Field(i).Name, err)
		}
		cols = append(cols, c)
	}
	shaped := array.NewRecordBatch(w.shape, cols, rec.NumRows())
	defer shaped.Release()
	return w.fw.WriteBuffered(shaped)
}

func (w *ShapedWriter) Close() error { return w.fw.Close() }
