package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/engine/partition"
)

// A partitioned table is published with its partition spec as the Iceberg table's spec (field
// ids from 1000, in the table's order; each field named as Iceberg's Java builder names it:
// the column for identity, `<column>_year`, `_month`, `_day`, `_hour`, `_bucket`, `_trunc`), and
// every data file carries its fragment's partition tuple (engine.Fragment.Partition), so readers
// prune by partition. The tuple is the engine's, computed with Iceberg's transforms when the rows
// were written: nothing is inferred from a file's statistics. A position-delete file carries the
// tuple of the data file it deletes from.

// firstPartitionFieldID is the id of the first partition field (Iceberg's convention: partition
// field ids start at 1000).
const firstPartitionFieldID = 1000

// icebergSpec returns the Iceberg partition spec of spec over the table's Iceberg schema sc;
// the unpartitioned spec for an empty one.
func icebergSpec(spec partition.Spec, sc *iceberg.Schema) (iceberg.PartitionSpec, error) {
	if len(spec) == 0 {
		return *iceberg.UnpartitionedSpec, nil
	}
	names := map[string]bool{}
	opts := make([]iceberg.PartitionOption, 0, len(spec))
	for i, f := range spec {
		col, ok := sc.FindFieldByName(f.Column)
		if !ok {
			return iceberg.PartitionSpec{}, fmt.Errorf("partition field %d: the schema has no column %q", i, f.Column)
		}
		tr, suffix, err := icebergTransform(f.Transform)
		if err != nil {
			return iceberg.PartitionSpec{}, fmt.Errorf("partition field %d (%s): %w", i, f.Column, err)
		}
		name := f.Column + suffix
		if names[name] { // two buckets or truncations of one column
			name = fmt.Sprintf("%s_%d", name, f.Transform.Param)
		}
		names[name] = true
		id := firstPartitionFieldID + i
		opts = append(opts, iceberg.AddPartitionFieldBySourceID(col.ID, name, tr, sc, &id))
	}
	ps, err := iceberg.NewPartitionSpecOpts(opts...)
	if err != nil {
		return iceberg.PartitionSpec{}, fmt.Errorf("iceberg partition spec of %s: %w", spec, err)
	}
	return ps, nil
}

// icebergTransform returns Iceberg's transform for t and the suffix of its default field name.
func icebergTransform(t partition.Transform) (iceberg.Transform, string, error) {
	switch t.Kind {
	case partition.Identity:
		return iceberg.IdentityTransform{}, "", nil
	case partition.Year:
		return iceberg.YearTransform{}, "_year", nil
	case partition.Month:
		return iceberg.MonthTransform{}, "_month", nil
	case partition.Day:
		return iceberg.DayTransform{}, "_day", nil
	case partition.Hour:
		return iceberg.HourTransform{}, "_hour", nil
	case partition.Bucket:
		return iceberg.BucketTransform{NumBuckets: t.Param}, "_bucket", nil
	case partition.Truncate:
		return iceberg.TruncateTransform{Width: t.Param}, "_trunc", nil
	}
	return nil, "", fmt.Errorf("transform %s has no Iceberg equivalent", t)
}

// partitionValues returns a fragment's partition tuple as iceberg-go takes it for a data file of
// spec (schema sc): field id -> value in the Go type of the field's result type, nil for a null.
// An unpartitioned spec has none.
func partitionValues(spec iceberg.PartitionSpec, sc *iceberg.Schema, tuple partition.Tuple) (map[int]any, error) {
	if spec.IsUnpartitioned() {
		return nil, nil
	}
	if len(tuple) != spec.NumFields() {
		return nil, fmt.Errorf("partition tuple %s has %d values, the spec %d fields", tuple, len(tuple), spec.NumFields())
	}
	st := spec.PartitionType(sc)
	out := make(map[int]any, len(tuple))
	for i, f := range st.FieldList {
		v, err := partitionValue(tuple[i], f.Type)
		if err != nil {
			return nil, fmt.Errorf("partition field %s: %w", f.Name, err)
		}
		out[f.ID] = v
	}
	return out, nil
}

// partitionValue converts one partition value to result type t's Go type in iceberg-go.
func partitionValue(v partition.Value, t iceberg.Type) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	switch tt := t.(type) {
	case iceberg.Int32Type:
		if int64(int32(v.Int)) != v.Int {
			return nil, fmt.Errorf("value %d out of the range of int", v.Int)
		}
		return int32(v.Int), nil
	case iceberg.Int64Type:
		return v.Int, nil
	case iceberg.DateType:
		if int64(int32(v.Int)) != v.Int {
			return nil, fmt.Errorf("date %d out of range", v.Int)
		}
		return iceberg.Date(v.Int), nil
	case iceberg.TimeType:
		return iceberg.Time(v.Int), nil
	case iceberg.TimestampType, iceberg.TimestampTzType:
		return iceberg.Timestamp(v.Int), nil
	case iceberg.BooleanType:
		return v.Bool, nil
	case iceberg.StringType:
		return string(v.Bytes), nil
	case iceberg.BinaryType, iceberg.FixedType:
		return v.Bytes, nil
	case iceberg.UUIDType:
		u, err := uuid.FromBytes(v.Bytes)
		if err != nil {
			return nil, err
		}
		return u, nil
	case iceberg.DecimalType:
		return iceberg.Decimal{Val: decimal128.Num(v.Decimal), Scale: tt.Scale()}, nil
	}
	return nil, fmt.Errorf("partition values of type %s are not supported", t)
}

// withPartition returns df (described for the unpartitioned spec) as a data file of spec with
// partition values values: the same path, counts and column statistics.
func withPartition(df iceberg.DataFile, spec iceberg.PartitionSpec, values map[int]any) (iceberg.DataFile, error) {
	if spec.IsUnpartitioned() {
		return df, nil
	}
	b, err := iceberg.NewDataFileBuilder(spec, df.ContentType(), df.FilePath(), df.FileFormat(), values, nil, nil, df.Count(), df.FileSizeBytes())
	if err != nil {
		return nil, fmt.Errorf("describe data file %s: %w", df.FilePath(), err)
	}
	b.ColumnSizes(df.ColumnSizes()).ValueCounts(df.ValueCounts()).NullValueCounts(df.NullValueCounts()).
		NaNValueCounts(df.NaNValueCounts()).LowerBoundValues(df.LowerBoundValues()).UpperBoundValues(df.UpperBoundValues()).
		SplitOffsets(df.SplitOffsets())
	if ref := df.ReferencedDataFile(); ref != nil {
		b.ReferencedDataFile(*ref)
	}
	if id := df.SortOrderID(); id != nil {
		b.SortOrderID(*id)
	}
	return b.Build(), nil
}
