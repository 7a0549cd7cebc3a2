package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateMilliVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TimeStampMilliVector;
import org.apache.arrow.vector.TimeStampNanoTZVector;
import org.apache.arrow.vector.TimeStampSecTZVector;
import org.apache.arrow.vector.UInt1Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.UInt4Vector;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Arrow columns as the server sends them to Spark columns, without a server. */
class ArrowConversionsTest {
  private BufferAllocator alloc;
  private final List<ValueVector> owned = new ArrayList<>();

  @BeforeEach
  void open() {
    alloc = ArrowUtils.rootAllocator().newChildAllocator("arrow-conversions-test", 0, Long.MAX_VALUE);
  }

  @AfterEach
  void close() {
    owned.forEach(ValueVector::close);
    alloc.close(); // fails on a leaked buffer
  }

  private static Field field(String name, ArrowType t) {
    return Field.nullable(name, t);
  }

  @Test
  void sparkTypes() {
    Schema s = new Schema(List.of(field("u8", new ArrowType.Int(8, false)), field("u16", new ArrowType.Int(16, false)),
        field("u32", new ArrowType.Int(32, false)), field("u64", new ArrowType.Int(64, false)),
        field("i32", new ArrowType.Int(32, true)), field("tz", new ArrowType.Timestamp(TimeUnit.NANOSECOND, "UTC")),
        field("ntz", new ArrowType.Timestamp(TimeUnit.MILLISECOND, null)),
        field("d64", new ArrowType.Date(DateUnit.MILLISECOND)), field("s", ArrowType.Utf8.INSTANCE)));
    StructType t = ArrowConversions.sparkSchema(s);
    assertEquals("struct<u8:smallint,u16:int,u32:bigint,u64:decimal(20,0),i32:int,tz:timestamp,"
        + "ntz:timestamp_ntz,d64:date,s:string>", t.simpleString());
    assertTrue(ArrowConversions.needsConversion(s.getFields().get(0)));
    assertFalse(ArrowConversions.needsConversion(s.getFields().get(4)), "signed ints are read zero-copy");
    assertFalse(ArrowConversions.needsConversion(field("us", new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC"))));
  }

  @Test
  void unknownTypesFailNamingTheColumn() {
    FlightSinkException e = org.junit.jupiter.api.Assertions.assertThrows(FlightSinkException.class,
        () -> ArrowConversions.sparkType(field("iv", new ArrowType.FixedSizeBinary(4))));
    assertTrue(e.getMessage().contains("column iv"), e.getMessage());
  }

  /** {@code v} with value {@code set} at row 0 and a null at row 1. */
  private ColumnVector convert(FieldVector v) {
    v.setNull(1);
    v.setValueCount(2);
    ColumnVector c = ArrowConversions.column(v, alloc, owned);
    assertTrue(c.isNullAt(1), "the null stays null");
    return c;
  }

  @Test
  void unsignedIntegersWiden() {
    try (UInt1Vector u8 = new UInt1Vector("u8", alloc); UInt2Vector u16 = new UInt2Vector("u16", alloc);
         UInt4Vector u32 = new UInt4Vector("u32", alloc); UInt8Vector u64 = new UInt8Vector("u64", alloc)) {
      u8.allocateNew(2);
      u8.set(0, 255);
      assertEquals(255, convert(u8).getShort(0));
      u16.allocateNew(2);
      u16.set(0, 65535);
      assertEquals(65535, convert(u16).getInt(0));
      u32.allocateNew(2);
      u32.set(0, -1);
      assertEquals(4294967295L, convert(u32).getLong(0));
      u64.allocateNew(2);
      u64.set(0, -1L);
      assertEquals(new BigDecimal("18446744073709551615"),
          convert(u64).getDecimal(0, 20, 0).toJavaBigDecimal());
    }
  }

  @Test
  void timestampsBecomeMicroseconds() {
    try (TimeStampNanoTZVector ns = new TimeStampNanoTZVector("ns", alloc, "UTC");
         TimeStampMilliVector ms = new TimeStampMilliVector("ms", alloc);
         TimeStampSecTZVector s = new TimeStampSecTZVector("s", alloc, "UTC")) {
      ns.allocateNew(2);
      ns.set(0, -1_500L); // before 1970: floored, not truncated toward zero
      assertEquals(-2L, convert(ns).getLong(0));
      ms.allocateNew(2);
      ms.set(0, 1_700_000_000_123L);
      assertEquals(1_700_000_000_123_000L, convert(ms).getLong(0));
      s.allocateNew(2);
      s.set(0, 7L);
      assertEquals(7_000_000L, convert(s).getLong(0));
    }
  }

  @Test
  void date64BecomesDays() {
    try (DateMilliVector d = new DateMilliVector("d", alloc)) {
      d.allocateNew(2);
      d.set(0, -1L); // one millisecond before 1970-01-01: day -1
      assertEquals(-1, convert(d).getInt(0));
    }
  }

  @Test
  void otherColumnsMoveZeroCopy() {
    try (BigIntVector v = new BigIntVector("id", alloc)) {
      v.allocateNew(2);
      v.set(0, 42L);
      ColumnVector c = convert(v);
      assertEquals(DataTypes.LongType, c.dataType());
      assertEquals(42L, c.getLong(0));
      assertEquals(0, v.getValueCount(), "the source vector's buffers moved out");
    }
  }
}
