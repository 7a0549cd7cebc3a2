package arrowschema

import (
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// FieldIDKey is the Arrow field metadata key that holds a column's stable field id (a decimal
// int32). Every field of a manifest's schema carries one, nested fields included (struct
// children, a list's element, a map's key and value). pqarrow writes it as the Parquet field id of
// the column, which is what Iceberg readers match columns by.
//
// Ids are assigned when a field is added (Create, a schema merge, an Overwrite's new columns, or
// the first commit to a table whose schema has no ids) and never reused: Manifest.LastFieldID
// is the highest id the table ever handed out, and a new field always gets a higher one.
const FieldIDKey = "PARQUET:field_id"

// FieldID returns f's field id (FieldIDKey in its metadata) and whether it has a valid one.
func FieldID(f arrow.Field) (int32, bool) {
	s, ok := f.Metadata.GetValue(FieldIDKey)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 32)
	if err != nil || id <= 0 {
		return 0, false
	}
	return int32(id), true
}

// withFieldID returns f with its field id set to id (other metadata kept).
func withFieldID(f arrow.Field, id int32) arrow.Field {
	keys, vals := f.Metadata.Keys(), f.Metadata.Values()
	k := make([]string, 0, len(keys)+1)
	v := make([]string, 0, len(keys)+1)
	for i, key := range keys {
		if key != FieldIDKey {
			k, v = append(k, key), append(v, vals[i])
		}
	}
	f.Metadata = arrow.NewMetadata(append(k, FieldIDKey), append(v, strconv.FormatInt(int64(id), 10)))
	return f
}

// withoutFieldID returns f without a field id (other metadata kept).
func withoutFieldID(f arrow.Field) arrow.Field {
	if f.Metadata.FindKey(FieldIDKey) < 0 {
		return f
	}
	keys, vals := f.Metadata.Keys(), f.Metadata.Values()
	var k, v []string
	for i, key := range keys {
		if key != FieldIDKey {
			k, v = append(k, key), append(v, vals[i])
		}
	}
	if len(k) == 0 {
		f.Metadata = arrow.Metadata{}
	} else {
		f.Metadata = arrow.NewMetadata(k, v)
	}
	return f
}

// NestedFields returns the fields nested directly in dt (a struct's fields, a list's element, a
// map's key and value) and a function that rebuilds dt with replacements for them. A type with no
// children (extension types included: their storage is not rebuilt) returns nil.
func NestedFields(dt arrow.DataType) ([]arrow.Field, func([]arrow.Field) arrow.DataType) {
	switch t := dt.(type) {
	case *arrow.StructType:
		return t.Fields(), func(fs []arrow.Field) arrow.DataType { return arrow.StructOf(fs...) }
	case *arrow.MapType:
		return []arrow.Field{t.KeyField(), t.ItemField()}, func(fs []arrow.Field) arrow.DataType {
			m := arrow.MapOfFields(fs[0], fs[1])
			m.KeysSorted = t.KeysSorted
			return m
		}
	case *arrow.ListType:
		return []arrow.Field{t.ElemField()}, func(fs []arrow.Field) arrow.DataType { return arrow.ListOfField(fs[0]) }
	case *arrow.LargeListType:
		return []arrow.Field{t.ElemField()}, func(fs []arrow.Field) arrow.DataType { return arrow.LargeListOfField(fs[0]) }
	case *arrow.FixedSizeListType:
		return []arrow.Field{t.ElemField()}, func(fs []arrow.Field) arrow.DataType { return arrow.FixedSizeListOfField(t.Len(), fs[0]) }
	}
	return nil, nil
}

// AssignFieldIDs returns sc with a field id on every field that has none, and the new highest id.
// Ids already present are kept. New ids count up from last+1 in a deterministic order, the one
// Iceberg uses for a fresh schema: the fields of a struct (the schema's top-level columns first)
// are numbered in order, then the children of each of them, field by field, recursively; a map's
// key comes before its value. changed reports whether any field got an id.
func AssignFieldIDs(sc *arrow.Schema, last int32) (out *arrow.Schema, newLast int32, changed bool) {
	fields, ch := assignFieldList(sc.Fields(), &last)
	if !ch {
		return sc, last, false
	}
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md), last, true
}

func assignFieldList(fields []arrow.Field, last *int32) ([]arrow.Field, bool) {
	out := make([]arrow.Field, len(fields))
	changed := false
	for i, f := range fields {
		if _, ok := FieldID(f); !ok {
			*last++
			f = withFieldID(f, *last)
			changed = true
		}
		out[i] = f
	}
	for i, f := range out {
		children, rebuild := NestedFields(f.Type)
		if children == nil {
			continue
		}
		nc, ch := assignFieldList(children, last)
		if ch {
			out[i].Type = rebuild(nc)
			changed = true
		}
	}
	return out, changed
}

// StripFieldIDs returns sc with no field ids anywhere: a client's schema may carry ids of its own
// (pyarrow keeps them from the Parquet files it read), which mean nothing to the table.
func StripFieldIDs(sc *arrow.Schema) *arrow.Schema {
	md := sc.Metadata()
	return arrow.NewSchema(stripFieldList(sc.Fields()), &md)
}

func stripFieldList(fields []arrow.Field) []arrow.Field {
	out := make([]arrow.Field, len(fields))
	for i, f := range fields {
		f = withoutFieldID(f)
		if children, rebuild := NestedFields(f.Type); children != nil {
			f.Type = rebuild(stripFieldList(children))
		}
		out[i] = f
	}
	return out
}

// MaxFieldID returns the highest field id in sc (0 when it has none).
func MaxFieldID(sc *arrow.Schema) int32 {
	var m int32
	var walk func([]arrow.Field)
	walk = func(fs []arrow.Field) {
		for _, f := range fs {
			if id, ok := FieldID(f); ok && id > m {
				m = id
			}
			if children, _ := NestedFields(f.Type); children != nil {
				walk(children)
			}
		}
	}
	walk(sc.Fields())
	return m
}

// EqualIgnoringFieldIDs reports whether a and b are the same schema apart from field ids.
func EqualIgnoringFieldIDs(a, b *arrow.Schema) bool {
	return StripFieldIDs(a).Equal(StripFieldIDs(b))
}

// SameType reports whether a and b are the same type apart from field ids (and, as
// arrow.TypeEqual has it, the names of list elements and map entries). arrow.TypeEqual alone
// compares some nested types (large_list) with their fields' metadata, field ids included.
func SameType(a, b arrow.DataType) bool {
	ac, _ := NestedFields(a)
	bc, _ := NestedFields(b)
	if ac == nil || bc == nil {
		return arrow.TypeEqual(a, b)
	}
	if a.ID() != b.ID() || len(ac) != len(bc) {
		return false
	}
	switch at := a.(type) {
	case *arrow.FixedSizeListType:
		if at.Len() != b.(*arrow.FixedSizeListType).Len() {
			return false
		}
	case *arrow.MapType:
		if at.KeysSorted != b.(*arrow.MapType).KeysSorted {
			return false
		}
	}
	_, isStruct := a.(*arrow.StructType)
	for i := range ac {
		if (isStruct && ac[i].Name != bc[i].Name) || ac[i].Nullable != bc[i].Nullable || !SameType(ac[i].Type, bc[i].Type) {
			return false
		}
	}
	return true
}
