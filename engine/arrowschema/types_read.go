package arrowschema

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/flight-sink/flight-sink/internal/panics"
)

// ConformBatch returns rec, a batch read from a Parquet file, stamped with schema, the table's
// definitions of its columns (names, nullability, metadata and exact types). Parquet does not keep
// every Arrow type as it was written, and pqarrow does not restore all of them from the stored
// Arrow schema: a column may come back as
//   - the same type with other names of nested children (large_list's "element" for "item");
//   - a type of the same layout (an extension's storage type, binary for utf8), relabelled here;
//   - another unit (timestamp[s] and time32[s] come back in ms, date64 as date32), cast here.
//
// Anything else is an error naming the column, never a panic: a stamp of the wrong type would
// panic in arrow-go. The result is a new reference; the caller releases it (and rec).
//
// A batch of a file written in an older schema of the table (schema_evolve.go) is matched by
// column name instead: columns added since read as nulls, promoted types are widened, and struct
// fields added since read as nulls.
func ConformBatch(schema *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if !sameNames(schema, rec) {
		return conformByName(nil, schema, rec)
	}
	return ConformColumns(schema, rec.Columns(), rec.NumRows())
}

// ConformColumns returns a batch of schema from cols, one per field of schema, each relabelled or
// cast to its field's exact type as ConformBatch does (a nested column whose fields differ from
// the table's only in field ids or child names is relabelled). The result is a new reference;
// cols stay the caller's.
func ConformColumns(schema *arrow.Schema, cols []arrow.Array, rows int64) (arrow.RecordBatch, error) {
	var own []arrow.Array
	defer func() {
		for _, c := range own {
			c.Release()
		}
	}()
	for i, f := range schema.Fields() {
		if arrow.TypeEqual(cols[i].DataType(), f.Type) {
			continue
		}
		var c arrow.Array
		err := panics.Recover(nil, "conform a read batch", func() (err error) {
			c, err = evolveArray(cols[i], f.Type)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("column %q: read as %s, table type %s: %w", f.Name, cols[i].DataType(), f.Type, err)
		}
		if len(own) == 0 {
			cols = slices.Clone(cols)
		}
		own = append(own, c)
		cols[i] = c
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}

// conformArray returns arr as type want (see ConformBatch); a new reference.
func conformArray(arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	got := arr.DataType()
	if arrow.TypeEqual(got, want) {
		arr.Retain()
		return arr, nil
	}
	if g, ok := got.(arrow.ExtensionType); ok {
		st := arr.(array.ExtensionArray).Storage()
		if _, wantExt := want.(arrow.ExtensionType); !wantExt || !arrow.TypeEqual(g, want) {
			return conformArray(st, want)
		}
	}
	if w, ok := want.(arrow.ExtensionType); ok {
		st, err := conformArray(arr, w.StorageType())
		if err != nil {
			return nil, err
		}
		defer st.Release()
		return array.NewExtensionArrayWithStorage(w, st), nil
	}
	if unitCast(got, want) {
		return castArray(nil, arr, want)
	}
	d := arr.Data()
	if isNested(want) {
		if got.ID() != want.ID() && !(got.ID() == arrow.LIST && want.ID() == arrow.MAP) {
			return nil, fmt.Errorf("no conversion from %s to %s", got, want)
		}
		return WithChildren(arr, want, conformArray)
	}
	if isNested(got) || !sameLayout(got, want) {
		return nil, fmt.Errorf("no conversion from %s to %s", got, want)
	}
	nd := array.NewData(want, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
	defer nd.Release()
	return array.MakeFromData(nd), nil
}

// unitCast reports whether got and want are temporal types of different units, which a cast
// converts (Parquet has no seconds and keeps date64 as days).
func unitCast(got, want arrow.DataType) bool {
	switch {
	case got.ID() == arrow.DATE32 && want.ID() == arrow.DATE64:
		return true
	case got.ID() != want.ID():
		return false
	}
	switch g := got.(type) {
	case *arrow.TimestampType:
		w := want.(*arrow.TimestampType)
		return g.Unit != w.Unit
	case *arrow.Time32Type:
		return g.Unit != want.(*arrow.Time32Type).Unit
	case *arrow.Time64Type:
		return g.Unit != want.(*arrow.Time64Type).Unit
	}
	return false
}

func isNested(dt arrow.DataType) bool {
	_, ok := dt.(arrow.NestedType)
	return ok
}

// sameLayout reports whether flat types a and b have the same buffers, so an array of one can be
// relabelled as the other. A relabel also needs the same meaning of the values; ConformBatch only
// relabels what the stored type wrote (binary for utf8, int8 for bool8, a timestamp's zone).
func sameLayout(a, b arrow.DataType) bool {
	la, lb := a.Layout(), b.Layout()
	return slices.Equal(la.Buffers, lb.Buffers) && la.HasDict == lb.HasDict && la.VariadicSpec == nil && lb.VariadicSpec == nil
}
