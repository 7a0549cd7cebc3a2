package arrowschema

// Schema evolution (docs/protocol.md): how a write's schema relates to the table's, decided in one
// place, MergeSchema, which every route (direct, upsert, MemWAL, multi-writer stages) consults.
//
// Allowed with merge_schema, and changing the table schema:
//   - a new nullable column, appended to the table schema (a new nullable field of a struct
//     column likewise, appended to the struct); it gets a new field id at commit;
//   - Iceberg's type promotions: int8→int16→int32→int64, uint8→…→uint64, float32→float64, and
//     decimal128 precision up at the same scale. The column keeps its field id.
//
// Allowed always (merge_schema or not), since the table schema stays as it is:
//   - a column the write omits, when it is nullable: its rows read as null;
//   - a column the write sends in a narrower type than the table's (one the table's type is a
//     promotion of): the values are widened. This is what lets an epoch written in an older
//     schema of the table land after the table changed.
//
// Refused, with an error wrapping ErrSchemaChangeRefused that names the column, whether
// merge_schema is given or not (nothing is committed): omitting a required column (a drop), a new
// column that is not nullable, a nullable column where the table's is required (and a required one
// never makes the table's nullable column required: the table keeps it nullable), a narrowing,
// any change of a primary-key column (promotion included), and every other type change. (A
// client's write reaches MergeSchema with the table's NOT NULL adopted, StoredSchemaFor: its data
// decides whether it fits a required column, StoreBatch, so the nullability refusal meets stored
// schemas only, a WAL entry or generation of another schema.) A rename cannot be told from a
// drop and an add: it is refused when the old name is required, and is an omitted column plus a
// new one when it is nullable.
//
// Without merge_schema, a write whose schema would change the table's is refused with an error
// wrapping ErrSchemaMismatch that names the first difference and says to set merge_schema.

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrSchemaChangeRefused: a write's schema differs from the table's in a way no schema merge
// allows (a drop, a narrowing, a primary-key change, ...). It wraps ErrSchemaMismatch and reads
// as it does ("schema mismatch: column ..."); the error's identity tells the two apart.
var ErrSchemaChangeRefused error = refusedChange{}

type refusedChange struct{}

func (refusedChange) Error() string { return ErrSchemaMismatch.Error() }
func (refusedChange) Unwrap() error { return ErrSchemaMismatch }

// MergeSchema returns the table schema a write of schema in needs: table itself (changed false)
// when in fits it as it is, or table with in's new columns appended and its promoted types
// (changed true). New fields carry no field id; the commit gives them ids (setSchema). It refuses
// the changes the rules above refuse with an error wrapping ErrSchemaChangeRefused naming the
// column. primaryKey names the table's key columns, which may not change at all.
func MergeSchema(table, in *arrow.Schema, primaryKey []string) (merged *arrow.Schema, changed bool, err error) {
	pk := make(map[string]bool, len(primaryKey))
	for _, k := range primaryKey {
		pk[k] = true
	}
	fields, changed, err := mergeFields("", table.Fields(), in.Fields(), pk, true)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return table, false, nil
	}
	md := table.Metadata()
	return arrow.NewSchema(fields, &md), true, nil
}

// CheckWriteSchema is MergeSchema for a write without merge_schema: it returns nil when in fits
// table without changing it, and otherwise an error wrapping ErrSchemaMismatch (or
// ErrSchemaChangeRefused) that names the difference.
func CheckWriteSchema(table, in *arrow.Schema, primaryKey []string) error {
	merged, changed, err := MergeSchema(table, in, primaryKey)
	if err != nil || !changed {
		return err
	}
	var omitted []string
	for _, f := range table.Fields() {
		if len(in.FieldIndices(f.Name)) == 0 {
			omitted = append(omitted, fmt.Sprintf("%q (%s)", f.Name, f.Type))
		}
	}
	also := ""
	if len(omitted) > 0 {
		also = fmt.Sprintf(" (and the table's %s missing from it: a renamed column?)", strings.Join(omitted, ", "))
	}
	return fmt.Errorf("%w: %s%s; send the epoch with \"merge_schema\": true to change the table schema", ErrSchemaMismatch, describeChange(table, merged), also)
}

// describeChange names the first difference between table and merged (a MergeSchema result).
func describeChange(table, merged *arrow.Schema) string {
	return describeFieldChange("", table.Fields(), merged.Fields())
}

func describeFieldChange(prefix string, old, merged []arrow.Field) string {
	byName := make(map[string]arrow.Field, len(old))
	for _, f := range old {
		byName[f.Name] = f
	}
	for _, f := range merged {
		o, ok := byName[f.Name]
		if !ok {
			return fmt.Sprintf("column %q (%s) is not in the table schema", prefix+f.Name, f.Type)
		}
		if SameType(o.Type, f.Type) {
			continue
		}
		if oc, _ := NestedFields(o.Type); oc != nil && o.Type.ID() == f.Type.ID() {
			mc, _ := NestedFields(f.Type)
			if d := describeFieldChange(prefix+f.Name+".", oc, mc); d != "" {
				return d
			}
		}
		return fmt.Sprintf("column %q has type %s in the table but %s in the written data", prefix+f.Name, o.Type, f.Type)
	}
	return ""
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSchemaChangeRefused, fmt.Sprintf(format, args...))
}

// mergeFields merges the fields of a write (in) into the table's (table) under prefix (the
// dotted path of the parent, "" at the top). top says whether these are top-level columns (the
// only ones a primary key names).
func mergeFields(prefix string, table, in []arrow.Field, pk map[string]bool, top bool) ([]arrow.Field, bool, error) {
	inByName := make(map[string]int, len(in))
	for i, f := range in {
		if f.Name == "" {
			return nil, false, refused("field %d of %s has no name", i, orTop(prefix))
		}
		if _, dup := inByName[f.Name]; dup {
			return nil, false, fmt.Errorf("%w: column %q appears more than once in the written data", ErrSchemaMismatch, prefix+f.Name)
		}
		inByName[f.Name] = i
	}
	out := make([]arrow.Field, 0, len(table)+len(in))
	changed := false
	seen := make(map[string]bool, len(table))
	for _, tf := range table {
		seen[tf.Name] = true
		name := prefix + tf.Name
		j, ok := inByName[tf.Name]
		if !ok {
			if !tf.Nullable {
				return nil, false, refused("column %q (%s not null) is missing from the written data; a required column cannot be dropped or renamed", name, tf.Type)
			}
			out = append(out, tf) // omitted: its rows read as null
			continue
		}
		inf := in[j]
		if inf.Nullable && !tf.Nullable {
			return nil, false, refused("column %q is not nullable in the table (%s not null) but nullable in the written data; a merge never changes a column's nullability", name, tf.Type)
		}
		if top && pk[tf.Name] {
			if !SameType(tf.Type, inf.Type) {
				return nil, false, refused("primary-key column %q has type %s in the table but %s in the written data; a primary-key column never changes", name, tf.Type, inf.Type)
			}
			out = append(out, tf)
			continue
		}
		mt, ch, err := mergeType(name, tf.Type, inf.Type, pk)
		if err != nil {
			return nil, false, err
		}
		if ch {
			tf.Type = mt
			changed = true
		}
		out = append(out, tf)
	}
	for _, f := range in {
		if seen[f.Name] {
			continue
		}
		if !f.Nullable {
			return nil, false, refused("new column %q (%s) is not nullable; a column added to a table must be nullable (its existing rows read as null)", prefix+f.Name, f.Type)
		}
		out = append(out, stripFieldList([]arrow.Field{f})[0])
		changed = true
	}
	return out, changed, nil
}

func orTop(prefix string) string {
	if prefix == "" {
		return "the schema"
	}
	return fmt.Sprintf("column %q", strings.TrimSuffix(prefix, "."))
}

// mergeType returns the type column name has after a write of type in into a table column of
// type table: table (changed false) when in is the same or narrower, in's promotion of table
// (changed true), or a nested type with merged children.
func mergeType(name string, table, in arrow.DataType, pk map[string]bool) (arrow.DataType, bool, error) {
	if SameType(table, in) {
		return table, false, nil
	}
	if promotes(in, table) {
		return table, false, nil // the write is narrower: widened on write
	}
	if promotes(table, in) {
		return in, true, nil
	}
	tc, rebuild := NestedFields(table)
	ic, _ := NestedFields(in)
	if tc == nil || ic == nil || table.ID() != in.ID() {
		return nil, false, refused("column %q has type %s in the table but %s in the written data; only new nullable columns and the promotions int8→int16→int32→int64, uint8→…→uint64, float32→float64 and decimal precision up are allowed", name, table, in)
	}
	switch tt := table.(type) {
	case *arrow.StructType:
		fs, ch, err := mergeFields(name+".", tt.Fields(), ic, pk, false)
		if err != nil || !ch {
			return table, false, err
		}
		return arrow.StructOf(fs...), true, nil
	case *arrow.FixedSizeListType:
		if tt.Len() != in.(*arrow.FixedSizeListType).Len() {
			return nil, false, refused("column %q has type %s in the table but %s in the written data", name, table, in)
		}
	}
	// A list's element, a map's key and value: their types may be promoted or, for structs,
	// gain fields; the fields themselves are positional (names are not compared).
	if len(tc) != len(ic) {
		return nil, false, refused("column %q has type %s in the table but %s in the written data", name, table, in)
	}
	out := make([]arrow.Field, len(tc))
	changed := false
	for i := range tc {
		cn := name + "." + tc[i].Name
		if ic[i].Nullable && !tc[i].Nullable {
			return nil, false, refused("field %q is not nullable in the table but nullable in the written data", cn)
		}
		if _, isMap := table.(*arrow.MapType); isMap && i == 0 && !SameType(tc[i].Type, ic[i].Type) {
			return nil, false, refused("map key %q has type %s in the table but %s in the written data; map keys never change", cn, tc[i].Type, ic[i].Type)
		}
		mt, ch, err := mergeType(cn, tc[i].Type, ic[i].Type, pk)
		if err != nil {
			return nil, false, err
		}
		out[i] = tc[i]
		if ch {
			out[i].Type, changed = mt, true
		}
	}
	if !changed {
		return table, false, nil
	}
	return rebuild(out), true, nil
}

// promotes reports whether wide is one of Iceberg's promotions of narrow (or narrow itself is
// not: the same type is not a promotion).
func promotes(narrow, wide arrow.DataType) bool {
	rank := func(dt arrow.DataType) (family, r int) {
		switch dt.ID() {
		case arrow.INT8:
			return 1, 1
		case arrow.INT16:
			return 1, 2
		case arrow.INT32:
			return 1, 3
		case arrow.INT64:
			return 1, 4
		case arrow.UINT8:
			return 2, 1
		case arrow.UINT16:
			return 2, 2
		case arrow.UINT32:
			return 2, 3
		case arrow.UINT64:
			return 2, 4
		case arrow.FLOAT32:
			return 3, 1
		case arrow.FLOAT64:
			return 3, 2
		}
		return 0, 0
	}
	if nf, nr := rank(narrow); nf != 0 {
		wf, wr := rank(wide)
		return nf == wf && nr < wr
	}
	if n, ok := narrow.(*arrow.Decimal128Type); ok {
		w, ok := wide.(*arrow.Decimal128Type)
		return ok && n.Scale == w.Scale && n.Precision < w.Precision
	}
	return false
}

// evolveArray returns arr as type want when want is arr's type evolved by MergeSchema rules
// (promoted values, struct fields added since arr was written as nulls), or relabelled/cast as
// conformArray does. A new reference.
func evolveArray(arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	got := arr.DataType()
	if arrow.TypeEqual(got, want) {
		arr.Retain()
		return arr, nil
	}
	if promotes(got, want) {
		return castArray(nil, arr, want)
	}
	ws, wantStruct := want.(*arrow.StructType)
	gs, gotStruct := got.(*arrow.StructType)
	if wantStruct && gotStruct {
		return evolveStruct(arr, gs, ws)
	}
	if isNested(want) && got.ID() == want.ID() {
		if _, ext := got.(arrow.ExtensionType); !ext {
			return WithChildren(arr, want, evolveArray)
		}
	}
	return conformArray(arr, want)
}

// evolveStruct returns a struct array of type want from arr: children by name, evolved, and
// children want has that arr lacks as nulls.
func evolveStruct(arr arrow.Array, got, want *arrow.StructType) (arrow.Array, error) {
	d := arr.Data()
	n := d.Len() + d.Offset() // children are indexed through the parent's offset
	children := make([]arrow.ArrayData, 0, want.NumFields())
	defer func() {
		for _, c := range children {
			c.Release()
		}
	}()
	for _, wf := range want.Fields() {
		var c arrow.Array
		if i, ok := got.FieldIdx(wf.Name); ok {
			ca := array.MakeFromData(d.Children()[i])
			var err error
			c, err = evolveArray(ca, wf.Type)
			ca.Release()
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", wf.Name, err)
			}
		} else {
			if !wf.Nullable {
				return nil, fmt.Errorf("field %q is missing and not nullable", wf.Name)
			}
			c = array.MakeArrayOfNull(memory.DefaultAllocator, wf.Type, n)
		}
		cd := c.Data()
		cd.Retain()
		c.Release()
		children = append(children, cd)
	}
	nd := array.NewData(want, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	defer nd.Release()
	return array.MakeFromData(nd), nil
}

// conformByName returns rec as a batch of schema, its columns matched by name: a column schema
// has that rec lacks (added to the table after rec was written) is all nulls, and rec's columns
// schema lacks are left out. A missing column that is not nullable is an error.
func conformByName(mem memory.Allocator, schema *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	in := rec.Schema()
	cols := make([]arrow.Array, schema.NumFields())
	var nulls []arrow.Array
	defer func() {
		for _, c := range nulls {
			c.Release()
		}
	}()
	for i, f := range schema.Fields() {
		if js := in.FieldIndices(f.Name); len(js) > 0 {
			cols[i] = rec.Column(js[0])
			continue
		}
		if !f.Nullable {
			return nil, fmt.Errorf("%w: column %q (%s not null) is missing", ErrSchemaMismatch, f.Name, f.Type)
		}
		c := array.MakeArrayOfNull(mem, f.Type, int(rec.NumRows()))
		nulls = append(nulls, c)
		cols[i] = c
	}
	return ConformColumns(schema, cols, rec.NumRows())
}

// sameNames reports whether rec's columns are schema's fields, by name, in order.
func sameNames(schema *arrow.Schema, rec arrow.RecordBatch) bool {
	if int(rec.NumCols()) != schema.NumFields() {
		return false
	}
	in := rec.Schema()
	for i, f := range schema.Fields() {
		if in.Field(i).Name != f.Name {
			return false
		}
	}
	return true
}

// ConformToTable returns rec, a batch of some schema of the table (an older one, a write that
// omits nullable columns or sends narrower types), as a batch of schema: columns by name,
// missing nullable columns as nulls, values widened. The result is a new reference.
func ConformToTable(schema *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if rec.Schema() == schema {
		rec.Retain()
		return rec, nil
	}
	if sameNames(schema, rec) {
		return ConformColumns(schema, rec.Columns(), rec.NumRows())
	}
	return conformByName(nil, schema, rec)
}

// ConformColumnsOrByName returns rec's columns as a batch of schema: by position when rec has
// schema's column names in order (its own schema metadata, such as a WAL entry's, dropped), and
// by name otherwise (ConformToTable). A new reference.
func ConformColumnsOrByName(schema *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if sameNames(schema, rec) {
		return ConformColumns(schema, rec.Columns(), rec.NumRows())
	}
	return conformByName(nil, schema, rec)
}

// SchemaDiff names the first column in which b differs from a (for messages).
func SchemaDiff(a, b *arrow.Schema) string {
	for _, f := range a.Fields() {
		js := b.FieldIndices(f.Name)
		switch {
		case len(js) == 0:
			return fmt.Sprintf("column %q (%s) is missing from the later batch", f.Name, f.Type)
		case !SameType(f.Type, b.Field(js[0]).Type) || f.Nullable != b.Field(js[0]).Nullable:
			return fmt.Sprintf("column %q is %s in the first batch, %s in a later one", f.Name, f.Type, b.Field(js[0]).Type)
		}
	}
	for _, f := range b.Fields() {
		if len(a.FieldIndices(f.Name)) == 0 {
			return fmt.Sprintf("column %q (%s) appears in a later batch", f.Name, f.Type)
		}
	}
	return fmt.Sprintf("%s after %s", FieldList(b), FieldList(a))
}
