package partition

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// sourceKind is what a transform sees of a source column's type: its Iceberg type family.
type sourceKind int

const (
	srcBool      sourceKind = iota + 1
	srcInt                  // int8, int16, int32: Iceberg int
	srcLong                 // int64: Iceberg long
	srcDate                 // date32: days since 1970-01-01
	srcTime                 // time32, time64: microseconds since midnight
	srcTimestamp            // timestamp, any unit: microseconds since 1970-01-01 00:00 UTC
	srcString               // utf8, large_utf8
	srcBinary               // binary, large_binary
	srcFixed                // fixed_size_binary
	srcUUID                 // the arrow.uuid extension
	srcDecimal              // decimal128
)

// sourceType is a source column's type as the transforms read it.
type sourceType struct {
	kind    sourceKind
	iceberg string // the Iceberg type name: "int", "timestamptz", "decimal(9, 2)", ...
	dt      arrow.DataType
}

// sourceOf returns the source type of a column of Arrow type dt, or an error saying why no
// transform takes such a column.
func sourceOf(dt arrow.DataType) (sourceType, error) {
	s := sourceType{dt: dt}
	switch t := dt.(type) {
	case *arrow.BooleanType:
		s.kind, s.iceberg = srcBool, "boolean"
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type:
		s.kind, s.iceberg = srcInt, "int"
	case *arrow.Int64Type:
		s.kind, s.iceberg = srcLong, "long"
	case *arrow.Date32Type:
		s.kind, s.iceberg = srcDate, "date"
	case *arrow.Time32Type, *arrow.Time64Type:
		s.kind, s.iceberg = srcTime, "time"
	case *arrow.TimestampType:
		s.kind, s.iceberg = srcTimestamp, "timestamp"
		if t.TimeZone != "" {
			s.iceberg = "timestamptz"
		}
	case *arrow.StringType, *arrow.LargeStringType:
		s.kind, s.iceberg = srcString, "string"
	case *arrow.BinaryType, *arrow.LargeBinaryType:
		s.kind, s.iceberg = srcBinary, "binary"
	case *arrow.FixedSizeBinaryType:
		s.kind, s.iceberg = srcFixed, fmt.Sprintf("fixed[%d]", t.ByteWidth)
	case *arrow.Decimal128Type:
		s.kind, s.iceberg = srcDecimal, fmt.Sprintf("decimal(%d, %d)", t.Precision, t.Scale)
	case arrow.ExtensionType:
		if t.ExtensionName() == "arrow.uuid" {
			s.kind, s.iceberg = srcUUID, "uuid"
			break
		}
		return sourceOf(t.StorageType())
	case *arrow.Float16Type, *arrow.Float32Type, *arrow.Float64Type:
		return s, fmt.Errorf("a %s column cannot be a partition source (every distinct value would be a partition, and no transform but identity takes floats); partition by another column, or by truncate[W] of an integer or decimal copy of it", dt)
	default:
		return s, fmt.Errorf("a %s column cannot be a partition source (a partition source is a top-level column of a primitive type)", dt)
	}
	return s, nil
}

// fits returns an error when transform t does not take a source of type src.
func fits(t Transform, src sourceType) error {
	ok := false
	switch t.Kind {
	case Identity:
		ok = true
	case Year, Month, Day:
		ok = src.kind == srcDate || src.kind == srcTimestamp
	case Hour:
		ok = src.kind == srcTimestamp
	case Bucket:
		ok = src.kind != srcBool
	case Truncate:
		switch src.kind {
		case srcInt, srcLong, srcDecimal, srcString, srcBinary:
			ok = true
		}
	default:
		return errors.New("unknown transform")
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%s does not apply to %s (%s)", t, src.iceberg, applies[t.Kind])
}

// applies says which source types each transform takes, for errors.
var applies = map[TransformKind]string{
	Year:     "year takes date and timestamp columns",
	Month:    "month takes date and timestamp columns",
	Day:      "day takes date and timestamp columns",
	Hour:     "hour takes timestamp columns",
	Bucket:   "bucket takes int, long, decimal, date, time, timestamp, string, binary, fixed and uuid columns",
	Truncate: "truncate takes int, long, decimal, string and binary columns",
}
