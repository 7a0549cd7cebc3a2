package io.flightsink.spark;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DateMilliVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.UInt1Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.UInt4Vector;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * Arrow (as the server stores it) to Spark. Spark's own mapping ({@code ArrowUtils}) and its
 * zero-copy {@link ArrowColumnVector} cover most types; the top-level columns it does not take
 * are converted batch by batch: unsigned integers widen (uint8 to short, uint16 to int, uint32 to
 * long, uint64 to decimal(20,0)), timestamps of any unit become microsecond timestamps (a time
 * zone: TimestampType; none: TimestampNTZType), date64 becomes date.
 */
final class ArrowConversions {
  private ArrowConversions() {}

  static StructType sparkSchema(Schema schema) {
    List<StructField> fields = new ArrayList<>();
    for (Field f : schema.getFields()) {
      fields.add(new StructField(f.getName(), sparkType(f), f.isNullable(), Metadata.empty()));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  static DataType sparkType(Field f) {
    ArrowType t = f.getType();
    if (t instanceof ArrowType.Int && !((ArrowType.Int) t).getIsSigned()) {
      switch (((ArrowType.Int) t).getBitWidth()) {
        case 8:
          return DataTypes.ShortType;
        case 16:
          return DataTypes.IntegerType;
        case 32:
          return DataTypes.LongType;
        default:
          return DataTypes.createDecimalType(20, 0);
      }
    }
    if (t instanceof ArrowType.Timestamp) {
      return ((ArrowType.Timestamp) t).getTimezone() == null
          ? DataTypes.TimestampNTZType : DataTypes.TimestampType;
    }
    if (t instanceof ArrowType.Date) {
      return DataTypes.DateType;
    }
    try {
      return ArrowUtils.fromArrowField(f);
    } catch (RuntimeException e) {
      throw new FlightSinkException("flight-sink: column " + f.getName() + " has Arrow type " + t
          + ", which Spark cannot read: " + e.getMessage());
    }
  }

  /** Whether the column needs a per-batch conversion (else it is read zero-copy). */
  static boolean needsConversion(Field f) {
    ArrowType t = f.getType();
    if (t instanceof ArrowType.Int) {
      return !((ArrowType.Int) t).getIsSigned();
    }
    if (t instanceof ArrowType.Timestamp) {
      return ((ArrowType.Timestamp) t).getUnit() != org.apache.arrow.vector.types.TimeUnit.MICROSECOND;
    }
    if (t instanceof ArrowType.Date) {
      return ((ArrowType.Date) t).getUnit() == DateUnit.MILLISECOND;
    }
    return false;
  }

  /**
   * The Spark column of {@code v}, backed by a vector added to {@code owned} (allocated from
   * {@code alloc}): {@code v}'s buffers transferred (zero-copy; {@code v} is left empty), or a
   * converted copy.
   */
  static ColumnVector column(FieldVector v, BufferAllocator alloc, List<ValueVector> owned) {
    Field f = v.getField();
    if (!needsConversion(f)) {
      org.apache.arrow.vector.util.TransferPair tp = v.getTransferPair(alloc);
      tp.transfer();
      FieldVector moved = (FieldVector) tp.getTo();
      owned.add(moved);
      return new ArrowColumnVector(moved);
    }
    DataType dt = sparkType(f);
    FieldVector out = SparkArrow.toArrowField(f.getName(), dt, true).createVector(alloc);
    owned.add(out);
    int n = v.getValueCount();
    out.setInitialCapacity(n);
    out.allocateNew();
    if (v instanceof UInt1Vector) {
      SmallIntVector o = (SmallIntVector) out;
      for (int i = 0; i < n; i++) {
        if (v.isNull(i)) o.setNull(i); else o.set(i, (int) ((UInt1Vector) v).getValueAsLong(i));
      }
    } else if (v instanceof UInt2Vector) {
      IntVector o = (IntVector) out;
      for (int i = 0; i < n; i++) {
        if (v.isNull(i)) o.setNull(i); else o.set(i, ((UInt2Vector) v).get(i));
      }
    } else if (v instanceof UInt4Vector) {
      BigIntVector o = (BigIntVector) out;
      for (int i = 0; i < n; i++) {
        if (v.isNull(i)) o.setNull(i); else o.set(i, ((UInt4Vector) v).getValueAsLong(i));
      }
    } else if (v instanceof UInt8Vector) {
      DecimalVector o = (DecimalVector) out;
      for (int i = 0; i < n; i++) {
        if (v.isNull(i)) {
          o.setNull(i);
        } else {
          long raw = ((UInt8Vector) v).get(i);
          BigInteger u = BigInteger.valueOf(raw >>> 1).shiftLeft(1).or(BigInteger.valueOf(raw & 1));
          o.set(i, new BigDecimal(u));
        }
      }
    } else if (v instanceof TimeStampVector) {
      TimeStampVector src = (TimeStampVector) v;
      TimeStampVector o = (TimeStampVector) out;
      ArrowType.Timestamp ts = (ArrowType.Timestamp) f.getType();
      TimeUnit unit;
      switch (ts.getUnit()) {
        case SECOND:
          unit = TimeUnit.SECONDS;
          break;
        case MILLISECOND:
          unit = TimeUnit.MILLISECONDS;
          break;
        case NANOSECOND:
          unit = TimeUnit.NANOSECONDS;
          break;
        default:
          unit = TimeUnit.MICROSECONDS;
      }
      for (int i = 0; i < n; i++) {
        if (src.isNull(i)) {
          o.setNull(i);
        } else {
          long x = src.get(i);
          long micros = unit == TimeUnit.NANOSECONDS ? Math.floorDiv(x, 1000L) : unit.toMicros(x);
          o.setSafe(i, micros);
        }
      }
    } else if (v instanceof DateMilliVector) {
      DateDayVector o = (DateDayVector) out;
      for (int i = 0; i < n; i++) {
        if (v.isNull(i)) o.setNull(i);
        else o.set(i, (int) Math.floorDiv(((DateMilliVector) v).get(i), 86_400_000L));
      }
    } else {
      throw new FlightSinkException("flight-sink: no conversion for column " + f);
    }
    out.setValueCount(n);
    return new ArrowColumnVector(out);
  }
}
