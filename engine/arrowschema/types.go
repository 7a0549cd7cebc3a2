package arrowschema

import (
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// The type policy: which Arrow types a table stores, and as what.
//
// Every column type that reaches a table passes StoredType first, at the edge where batches enter
// (streaming wraps every DoPut stream with StoredSource; Create and create_table normalise their
// schema), so table schemas, data files, MemWAL WAL entries and generations hold stored types
// only. A type either
//   - is stored as it is (TypeStored): it lands, and reads back equal, on every route, through
//     MemWAL flush, fold and compaction;
//   - is stored as another, plainer type holding the same values (TypeConverted): view types as
//     their offset-based equivalents, dictionary and run-end-encoded columns as their value type,
//     decimal32/decimal64 as decimal128 of the same precision and scale; a reader gets the stored
//     type back; or
//   - is refused (TypeRefused) with an error wrapping ErrUnsupportedType (hence ErrSchemaMismatch:
//     InvalidArgument on the wire) that names the column and says what to send instead, before any
//     table, file or WAL entry exists.
//
// Nested types (list, large_list, fixed_size_list, map, struct) are stored when all their
// children are; a child is converted or refused by the same rules, and the error names its path
// (column "c.x.item").
//
// typeRules is the one table of decisions: StoredType, the docs (docs/protocol.md "Arrow types",
// checked by TestProtocolDocListsTypePolicy) and the type tests all read it.

// ErrUnsupportedType: a column's Arrow type is one tables do not store (TypeRules). It wraps
// ErrSchemaMismatch, so every caller that maps schema mismatches (InvalidArgument) maps it too.
var ErrUnsupportedType = fmt.Errorf("%w: unsupported Arrow type", ErrSchemaMismatch)

// TypeDecision is what the type policy does with one Arrow type.
type TypeDecision string

// The decisions of TypeRule.
const (
	TypeStored    TypeDecision = "stored"
	TypeConverted TypeDecision = "converted"
	TypeRefused   TypeDecision = "refused"
)

// TypeRule is the policy for one Arrow type id.
type TypeRule struct {
	ID       arrow.Type
	Decision TypeDecision
	// Note says, for the docs and for errors: what a converted type is stored as, a condition of a
	// stored one, or what to send instead of a refused one.
	Note string
}

// typeRules holds a rule for every Arrow type id arrow-go defines. An id missing here (a newer
// arrow-go's) is refused.
var typeRules = map[arrow.Type]TypeRule{
	arrow.NULL: {arrow.NULL, TypeRefused, "a null-type column carries no type for later batches; send the column with its real type (all values null is fine), e.g. pyarrow pa.nulls(n, pa.int64())"},
	arrow.BOOL: {arrow.BOOL, TypeStored, ""},

	arrow.UINT8:   {arrow.UINT8, TypeConverted, "int32 (Iceberg has no unsigned types; every value is kept)"},
	arrow.INT8:    {arrow.INT8, TypeStored, ""},
	arrow.UINT16:  {arrow.UINT16, TypeConverted, "int32 (Iceberg has no unsigned types; every value is kept)"},
	arrow.INT16:   {arrow.INT16, TypeStored, ""},
	arrow.UINT32:  {arrow.UINT32, TypeConverted, "int64 (Iceberg has no unsigned types; every value is kept)"},
	arrow.INT32:   {arrow.INT32, TypeStored, ""},
	arrow.UINT64:  {arrow.UINT64, TypeRefused, "Iceberg has no unsigned types and no integer holding every uint64; send int64 (values up to 2^63-1) or decimal128(20, 0)"},
	arrow.INT64:   {arrow.INT64, TypeStored, ""},
	arrow.FLOAT16: {arrow.FLOAT16, TypeConverted, "float32 (Iceberg has no half floats; every value is kept)"},
	arrow.FLOAT32: {arrow.FLOAT32, TypeStored, ""},
	arrow.FLOAT64: {arrow.FLOAT64, TypeStored, ""},

	arrow.STRING:            {arrow.STRING, TypeStored, ""},
	arrow.BINARY:            {arrow.BINARY, TypeStored, ""},
	arrow.LARGE_STRING:      {arrow.LARGE_STRING, TypeStored, ""},
	arrow.LARGE_BINARY:      {arrow.LARGE_BINARY, TypeStored, ""},
	arrow.FIXED_SIZE_BINARY: {arrow.FIXED_SIZE_BINARY, TypeStored, ""},

	arrow.DATE32:    {arrow.DATE32, TypeStored, ""},
	arrow.DATE64:    {arrow.DATE64, TypeConverted, "date32: values must be whole days (multiples of 86400000 ms), as the Arrow format requires; a batch holding another value is refused"},
	arrow.TIMESTAMP: {arrow.TIMESTAMP, TypeConverted, "timestamp[us] without a zone, timestamp[us, UTC] with any zone (the instants are kept, the zone name becomes UTC); timestamp[us] and timestamp[us, UTC] are stored as they are; seconds and milliseconds are kept exactly (a batch holding a value past the microsecond range, about year 294247, is refused); nanoseconds are truncated to the microsecond, toward the past, as Spark and Delta keep them"},
	arrow.TIME32:    {arrow.TIME32, TypeConverted, "time64[us] (every value is kept)"},
	arrow.TIME64:    {arrow.TIME64, TypeConverted, "time64[us]: time64[us] is stored as it is; nanoseconds are truncated to the microsecond"},

	arrow.INTERVAL_MONTHS:         {arrow.INTERVAL_MONTHS, TypeRefused, "Parquet files here have no interval encoding; send int32 (months)"},
	arrow.INTERVAL_DAY_TIME:       {arrow.INTERVAL_DAY_TIME, TypeRefused, "Parquet files here have no interval encoding; send struct<days: int32, milliseconds: int32>"},
	arrow.INTERVAL_MONTH_DAY_NANO: {arrow.INTERVAL_MONTH_DAY_NANO, TypeRefused, "Parquet files here have no interval encoding; send struct<months: int32, days: int32, nanoseconds: int64>"},
	arrow.DURATION:                {arrow.DURATION, TypeRefused, "Parquet has no duration type; send int64 (a count of the duration's unit)"},

	arrow.DECIMAL32:  {arrow.DECIMAL32, TypeConverted, "decimal128 of the same precision and scale; precision 1 to 9, scale 0 to the precision"},
	arrow.DECIMAL64:  {arrow.DECIMAL64, TypeConverted, "decimal128 of the same precision and scale; precision 1 to 18, scale 0 to the precision"},
	arrow.DECIMAL128: {arrow.DECIMAL128, TypeStored, "precision 1 to 38, scale 0 to the precision"},
	arrow.DECIMAL256: {arrow.DECIMAL256, TypeConverted, "decimal128 of the same precision and scale, when the precision is at most 38 (every value is kept); precision 1 to 76 and scale 0 to the precision are accepted by Arrow, but a precision above 38 is refused (Iceberg decimals hold 38 digits): send decimal128 or a string"},

	arrow.LIST:            {arrow.LIST, TypeStored, "element type by these rules"},
	arrow.LARGE_LIST:      {arrow.LARGE_LIST, TypeStored, "element type by these rules"},
	arrow.FIXED_SIZE_LIST: {arrow.FIXED_SIZE_LIST, TypeStored, "element type by these rules; null lists included"},
	arrow.MAP:             {arrow.MAP, TypeStored, "key and item types by these rules"},
	arrow.STRUCT:          {arrow.STRUCT, TypeStored, "at least one field, each by these rules; a struct with no fields is refused (Parquet cannot store it): send a struct with a field, or leave the column out"},

	arrow.LIST_VIEW:       {arrow.LIST_VIEW, TypeConverted, "list"},
	arrow.LARGE_LIST_VIEW: {arrow.LARGE_LIST_VIEW, TypeConverted, "large_list"},
	arrow.STRING_VIEW:     {arrow.STRING_VIEW, TypeConverted, "utf8"},
	arrow.BINARY_VIEW:     {arrow.BINARY_VIEW, TypeConverted, "binary"},
	arrow.DICTIONARY:      {arrow.DICTIONARY, TypeConverted, "its value type (the dictionary is expanded)"},
	arrow.RUN_END_ENCODED: {arrow.RUN_END_ENCODED, TypeConverted, "its value type (the runs are expanded)"},

	arrow.SPARSE_UNION: {arrow.SPARSE_UNION, TypeRefused, "Parquet has no union type; send a struct with one nullable field per member"},
	arrow.DENSE_UNION:  {arrow.DENSE_UNION, TypeRefused, "Parquet has no union type; send a struct with one nullable field per member"},

	arrow.EXTENSION: {arrow.EXTENSION, TypeStored, "arrow.uuid is stored as it is; arrow.bool8 as bool; another registered extension (arrow.json, ...) as its storage type, by these rules (Iceberg has no type for it); an unregistered one arrives as its storage type"},
}

// typeNames are the Arrow type names create_table accepts for a column without parameters: the
// names DataType.String gives, plus common aliases (boolean, float, double, string, ...). Every
// name's type has a rule in typeRules, which then decides how it is stored. Read with
// ParseTypeName, which also reads the parameterised timestamp names.
var typeNames = map[string]arrow.DataType{
	"bool": arrow.FixedWidthTypes.Boolean, "boolean": arrow.FixedWidthTypes.Boolean,
	"int8": arrow.PrimitiveTypes.Int8, "int16": arrow.PrimitiveTypes.Int16,
	"int32": arrow.PrimitiveTypes.Int32, "int64": arrow.PrimitiveTypes.Int64,
	"uint8": arrow.PrimitiveTypes.Uint8, "uint16": arrow.PrimitiveTypes.Uint16,
	"uint32": arrow.PrimitiveTypes.Uint32, "uint64": arrow.PrimitiveTypes.Uint64,
	"float16": arrow.FixedWidthTypes.Float16, "float32": arrow.PrimitiveTypes.Float32,
	"float": arrow.PrimitiveTypes.Float32, "float64": arrow.PrimitiveTypes.Float64,
	"double": arrow.PrimitiveTypes.Float64, "utf8": arrow.BinaryTypes.String,
	"string": arrow.BinaryTypes.String, "large_utf8": arrow.BinaryTypes.LargeString,
	"large_string": arrow.BinaryTypes.LargeString, "binary": arrow.BinaryTypes.Binary,
	"large_binary": arrow.BinaryTypes.LargeBinary, "date32": arrow.FixedWidthTypes.Date32,
	"date64": arrow.FixedWidthTypes.Date64,
}

// timestampUnits are the unit names of timestamp[unit] and timestamp[unit, tz=zone].
var timestampUnits = map[string]arrow.TimeUnit{"s": arrow.Second, "ms": arrow.Millisecond, "us": arrow.Microsecond, "ns": arrow.Nanosecond}

// ParseTypeName returns the Arrow type a create_table column names: a name of typeNames or
// timestamp[unit] / timestamp[unit, tz=zone] (unit s, ms, us or ns; tz=utc reads as UTC), case
// and surrounding space ignored. It parses only; StoredType decides what the type is stored as.
func ParseTypeName(name string) (arrow.DataType, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if dt, ok := typeNames[n]; ok {
		return dt, nil
	}
	if strings.HasPrefix(n, "timestamp[") && strings.HasSuffix(n, "]") {
		inner := strings.TrimSuffix(strings.TrimPrefix(n, "timestamp["), "]")
		unit, tz, _ := strings.Cut(inner, ",")
		tz = strings.TrimSpace(tz)
		if tz != "" {
			if !strings.HasPrefix(tz, "tz=") {
				return nil, fmt.Errorf("bad timestamp type %q (want timestamp[us] or timestamp[us, tz=UTC])", name)
			}
			tz = strings.TrimSpace(strings.TrimPrefix(tz, "tz="))
			if strings.EqualFold(tz, "utc") {
				tz = "UTC"
			}
		}
		u, ok := timestampUnits[strings.TrimSpace(unit)]
		if !ok {
			return nil, fmt.Errorf("bad timestamp unit in %q (use s, ms, us or ns)", name)
		}
		return &arrow.TimestampType{Unit: u, TimeZone: tz}, nil
	}
	return nil, fmt.Errorf("unknown Arrow type %q (use names like int64, float64, bool, utf8, binary, date32, timestamp[us, tz=UTC])", name)
}

// icebergTypes is the Iceberg type (format v2) a column of each Arrow type id is published as,
// after StoredType: every type the policy stores has one, so a table's publish cannot fail on its
// types; "-" for a refused id. Read with IcebergType; docs/iceberg.md lists it (checked by a test
// of package iceberg, which also checks it against the publisher's schema conversion).
var icebergTypes = map[arrow.Type]string{
	arrow.NULL: "-", arrow.BOOL: "boolean",
	arrow.UINT8: "int", arrow.INT8: "int", arrow.UINT16: "int", arrow.INT16: "int",
	arrow.UINT32: "long", arrow.INT32: "int", arrow.UINT64: "-", arrow.INT64: "long",
	arrow.FLOAT16: "float", arrow.FLOAT32: "float", arrow.FLOAT64: "double",
	arrow.STRING: "string", arrow.BINARY: "binary", arrow.LARGE_STRING: "string", arrow.LARGE_BINARY: "binary",
	arrow.FIXED_SIZE_BINARY: "fixed[n]",
	arrow.DATE32:            "date", arrow.DATE64: "date",
	arrow.TIMESTAMP: "timestamp (no zone), timestamptz (a zone)",
	arrow.TIME32:    "time", arrow.TIME64: "time",
	arrow.INTERVAL_MONTHS: "-", arrow.INTERVAL_DAY_TIME: "-", arrow.INTERVAL_MONTH_DAY_NANO: "-", arrow.DURATION: "-",
	arrow.DECIMAL32: "decimal(p, s)", arrow.DECIMAL64: "decimal(p, s)", arrow.DECIMAL128: "decimal(p, s)", arrow.DECIMAL256: "decimal(p, s)",
	arrow.LIST: "list", arrow.LARGE_LIST: "list", arrow.FIXED_SIZE_LIST: "list", arrow.MAP: "map", arrow.STRUCT: "struct",
	arrow.LIST_VIEW: "list", arrow.LARGE_LIST_VIEW: "list", arrow.STRING_VIEW: "string", arrow.BINARY_VIEW: "binary",
	arrow.DICTIONARY: "its value type's", arrow.RUN_END_ENCODED: "its value type's",
	arrow.SPARSE_UNION: "-", arrow.DENSE_UNION: "-",
	arrow.EXTENSION: "uuid (arrow.uuid), boolean (arrow.bool8); else its storage type's",
}

// IcebergType returns the Iceberg type a stored column of type id is published as ("-" when the
// policy refuses id; nested types name the container, their children follow their own ids).
func IcebergType(id arrow.Type) string {
	if s, ok := icebergTypes[id]; ok {
		return s
	}
	return "-"
}

// decimalMaxPrecision is, for each decimal id, the largest precision the type holds. A decimal
// column is stored only with precision 1..max and scale 0..precision: the precisions the Arrow
// format defines for its width, and the scales Parquet's DECIMAL annotation and Iceberg's
// decimal(P, S) accept (Arrow itself allows a negative scale, and one above the precision, which
// neither can store). Any other decimal is refused (StoredType) before a table, data file or WAL
// entry holds it; the rows above say so in their notes.
var decimalMaxPrecision = map[arrow.Type]int32{
	arrow.DECIMAL32: 9, arrow.DECIMAL64: 18, arrow.DECIMAL128: 38, arrow.DECIMAL256: 76,
}

// TypeRules returns the policy for every Arrow type id, ordered by id.
func TypeRules() []TypeRule {
	out := make([]TypeRule, 0, len(typeRules))
	for _, r := range typeRules {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// TypeRuleOf returns the policy for type id; an id the table lacks is refused.
func TypeRuleOf(id arrow.Type) TypeRule {
	if r, ok := typeRules[id]; ok {
		return r
	}
	return TypeRule{ID: id, Decision: TypeRefused, Note: "this server does not know the type; send a plainer type"}
}

// unsupportedTypeError is a refusal by the type policy.
func unsupportedTypeError(path string, dt arrow.DataType, why string) error {
	return fmt.Errorf("%w: column %q has type %s, which tables do not store: %s", ErrUnsupportedType, path, dt, why)
}

// StoredType returns the type a column of type dt is stored as (dt itself when the policy stores
// it as it is), or an error wrapping ErrUnsupportedType naming column path. The field names,
// nullability and metadata of nested children are kept.
func StoredType(path string, dt arrow.DataType) (arrow.DataType, error) {
	rule := TypeRuleOf(dt.ID())
	if rule.Decision == TypeRefused {
		return nil, unsupportedTypeError(path, dt, rule.Note)
	}
	if d, ok := dt.(arrow.DecimalType); ok {
		maxp := decimalMaxPrecision[dt.ID()]
		if p, sc := d.GetPrecision(), d.GetScale(); p < 1 || p > maxp || sc < 0 || sc > p {
			return nil, unsupportedTypeError(path, dt, fmt.Sprintf("a %s column takes precision 1 to %d and scale 0 to the precision; this one has precision %d, scale %d",
				dt.Name(), maxp, p, sc))
		}
	}
	switch t := dt.(type) {
	case *arrow.Uint8Type, *arrow.Uint16Type:
		return arrow.PrimitiveTypes.Int32, nil
	case *arrow.Uint32Type:
		return arrow.PrimitiveTypes.Int64, nil
	case *arrow.Float16Type:
		return arrow.PrimitiveTypes.Float32, nil
	case *arrow.Date64Type:
		return arrow.FixedWidthTypes.Date32, nil
	case *arrow.TimestampType:
		return storedTimestamp(t), nil
	case *arrow.Time32Type:
		return arrow.FixedWidthTypes.Time64us, nil
	case *arrow.Time64Type:
		return arrow.FixedWidthTypes.Time64us, nil
	case *arrow.Decimal256Type:
		if t.Precision > 38 {
			return nil, unsupportedTypeError(path, dt, "Iceberg decimals hold at most 38 digits; send decimal128 (precision up to 38) or a string")
		}
		return &arrow.Decimal128Type{Precision: t.Precision, Scale: t.Scale}, nil
	case *arrow.Decimal32Type:
		return &arrow.Decimal128Type{Precision: t.Precision, Scale: t.Scale}, nil
	case *arrow.Decimal64Type:
		return &arrow.Decimal128Type{Precision: t.Precision, Scale: t.Scale}, nil
	case *arrow.StringViewType:
		return arrow.BinaryTypes.String, nil
	case *arrow.BinaryViewType:
		return arrow.BinaryTypes.Binary, nil
	case *arrow.DictionaryType:
		return StoredType(path, t.ValueType)
	case *arrow.RunEndEncodedType:
		return StoredType(path, t.Encoded())
	case *arrow.ListViewType:
		f, err := storedField(path, t.ElemField())
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(f), nil
	case *arrow.LargeListViewType:
		f, err := storedField(path, t.ElemField())
		if err != nil {
			return nil, err
		}
		return arrow.LargeListOfField(f), nil
	case *arrow.ListType:
		f, err := storedField(path, t.ElemField())
		if err != nil || f.Equal(t.ElemField()) {
			return dt, err
		}
		return arrow.ListOfField(f), nil
	case *arrow.LargeListType:
		f, err := storedField(path, t.ElemField())
		if err != nil || f.Equal(t.ElemField()) {
			return dt, err
		}
		return arrow.LargeListOfField(f), nil
	case *arrow.FixedSizeListType:
		f, err := storedField(path, t.ElemField())
		if err != nil || f.Equal(t.ElemField()) {
			return dt, err
		}
		return arrow.FixedSizeListOfField(t.Len(), f), nil
	case *arrow.MapType:
		k, err := storedField(path, t.KeyField())
		if err != nil {
			return nil, err
		}
		v, err := storedField(path, t.ItemField())
		if err != nil {
			return nil, err
		}
		if k.Equal(t.KeyField()) && v.Equal(t.ItemField()) {
			return dt, nil
		}
		m := arrow.MapOfFields(k, v)
		m.KeysSorted = t.KeysSorted
		return m, nil
	case *arrow.StructType:
		if t.NumFields() == 0 {
			return nil, unsupportedTypeError(path, dt, "a struct with no fields has nothing Parquet can store; send a struct with at least one field, or leave the column out")
		}
		fields := make([]arrow.Field, t.NumFields())
		same := true
		for i, f := range t.Fields() {
			sf, err := storedField(path, f)
			if err != nil {
				return nil, err
			}
			fields[i] = sf
			same = same && sf.Equal(f)
		}
		if same {
			return dt, nil
		}
		return arrow.StructOf(fields...), nil
	case arrow.ExtensionType:
		st, err := StoredType(path, t.StorageType())
		if err != nil {
			return nil, err
		}
		switch {
		case t.ExtensionName() == uuidExtensionName && arrow.TypeEqual(st, t.StorageType()):
			return dt, nil
		case t.ExtensionName() == bool8ExtensionName:
			return arrow.FixedWidthTypes.Boolean, nil
		}
		return st, nil
	}
	return dt, nil
}

// The extension types with a rule of their own: arrow.uuid is stored as it is (Iceberg uuid),
// arrow.bool8 as bool (Iceberg boolean; a non-zero byte is true).
const (
	uuidExtensionName  = "arrow.uuid"
	bool8ExtensionName = "arrow.bool8"
)

// storedTimestamp is the stored type of timestamp type t: microseconds, with no zone when t has
// none and UTC when it has any (Iceberg timestamp and timestamptz).
func storedTimestamp(t *arrow.TimestampType) *arrow.TimestampType {
	if t.TimeZone == "" {
		if t.Unit == arrow.Microsecond {
			return t
		}
		return &arrow.TimestampType{Unit: arrow.Microsecond}
	}
	if t.Unit == arrow.Microsecond && t.TimeZone == "UTC" {
		return t
	}
	return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
}

// storedField is f with its type stored; path gains f's name.
func storedField(path string, f arrow.Field) (arrow.Field, error) {
	st, err := StoredType(path+"."+f.Name, f.Type)
	if err != nil {
		return arrow.Field{}, err
	}
	f.Type = st
	return f, nil
}

// StoredSchema returns sc with every column type stored (StoredType), sc itself when nothing
// changes, or the first refusal: an error wrapping ErrUnsupportedType that names the column.
func StoredSchema(sc *arrow.Schema) (*arrow.Schema, error) { return StoredSchemaFor(nil, sc) }

// StoredSchemaFor is StoredSchema for a write into a table of schema table (nil: a new table): a
// column whose type the table already holds exactly as it arrives keeps that type. A table
// created while its type was stored as it is (timestamp[ns], uint32, ...) thus keeps taking writes
// of that type; its Iceberg publish names the column instead (iceberg.ErrUnpublishable).
//
// A field the table declares not null is declared not null in the result too, at every nesting
// level, whatever the write declares: a writer may declare every column nullable (Spark does),
// and what decides whether its data fits a required column is whether the data holds a null, not
// the declaration. StoreBatch then refuses a batch holding one, naming the column, and every
// schema check after this one sees the table's nullability.
func StoredSchemaFor(table, sc *arrow.Schema) (*arrow.Schema, error) {
	fields := sc.Fields()
	same := true
	for i, f := range fields {
		g := f
		var tf arrow.Field
		inTable := false
		if table != nil {
			if j := table.FieldIndices(f.Name); len(j) == 1 {
				tf, inTable = table.Field(j[0]), true
				g = requireAsTable(tf, g)
			}
		}
		if !inTable || !SameType(tf.Type, g.Type) {
			st, err := StoredType(f.Name, g.Type)
			if err != nil {
				return nil, err
			}
			g.Type = st
			if inTable {
				g = requireAsTable(tf, g) // a converted type (a list view, ...) takes it as stored
			}
		}
		if g.Nullable != f.Nullable || !arrow.TypeEqual(g.Type, f.Type, arrow.CheckMetadata()) {
			fields[i] = g
			same = false
		}
	}
	if same {
		return sc, nil
	}
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// requireAsTable returns f, a written field matched to the table's field tf, not null where tf
// is not null: f itself, and its nested fields matched to tf's (a struct's by name, a list's
// element and a map's key and value by position) when their types nest alike.
func requireAsTable(tf, f arrow.Field) arrow.Field {
	if !tf.Nullable {
		f.Nullable = false
	}
	tc, _ := NestedFields(tf.Type)
	fc, rebuild := NestedFields(f.Type)
	if tc == nil || fc == nil || tf.Type.ID() != f.Type.ID() {
		return f
	}
	_, isStruct := f.Type.(*arrow.StructType)
	if !isStruct && len(tc) != len(fc) {
		return f
	}
	out := make([]arrow.Field, len(fc))
	changed := false
	for i, c := range fc {
		out[i] = c
		var match arrow.Field
		if isStruct {
			j, ok := tf.Type.(*arrow.StructType).FieldIdx(c.Name)
			if !ok {
				continue
			}
			match = tc[j]
		} else {
			match = tc[i]
		}
		out[i] = requireAsTable(match, c)
		if out[i].Nullable != c.Nullable || !arrow.TypeEqual(out[i].Type, c.Type) {
			changed = true
		}
	}
	if !changed {
		return f
	}
	f.Type = rebuild(out)
	return f
}
