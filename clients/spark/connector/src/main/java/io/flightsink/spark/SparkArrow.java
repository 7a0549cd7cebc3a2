package io.flightsink.spark;

import java.lang.reflect.Method;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.execution.arrow.ArrowFieldWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * Spark's Arrow schema conversions across Spark versions. {@code ArrowUtils.toArrowSchema} and
 * {@code toArrowField} gain parameters from one Spark release to the next (4.1: 4 and 5; 4.3: 5
 * and 7, the new ones with Scala defaults), so they are called by reflection: the leading
 * arguments this connector knows, the rest from the method's {@code name$default$N}. {@code
 * ArrowWriter.sizeInBytes} returns an {@code int} in Spark 4.1.1 and a {@code long} from 4.1.4
 * on (a different JVM signature), so it is called by reflection too.
 */
final class SparkArrow {
  private SparkArrow() {}

  private static final Method TO_SCHEMA = find("toArrowSchema", 4);
  private static final Method TO_FIELD = find("toArrowField", 5);
  private static final Method SIZE_IN_BYTES = sizeInBytesMethod();

  private static Method sizeInBytesMethod() {
    try {
      return ArrowWriter.class.getMethod("sizeInBytes");
    } catch (NoSuchMethodException e) {
      throw new IllegalStateException("this Spark's ArrowWriter has no sizeInBytes()", e);
    }
  }

  private static Method find(String name, int known) {
    Method best = null;
    for (Method m : ArrowUtils.class.getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() >= known
          && (best == null || m.getParameterCount() > best.getParameterCount())) {
        best = m;
      }
    }
    if (best == null) {
      throw new IllegalStateException("this Spark's ArrowUtils has no " + name);
    }
    return best;
  }

  private static Object call(Method m, Object... leading) {
    try {
      Object[] args = new Object[m.getParameterCount()];
      System.arraycopy(leading, 0, args, 0, leading.length);
      for (int i = leading.length; i < args.length; i++) {
        args[i] = ArrowUtils.class.getMethod(m.getName() + "$default$" + (i + 1)).invoke(null);
      }
      return m.invoke(null, args);
    } catch (java.lang.reflect.InvocationTargetException e) {
      Throwable c = e.getCause();
      throw c instanceof RuntimeException ? (RuntimeException) c : new IllegalStateException(c);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("calling ArrowUtils." + m.getName(), e);
    }
  }

  /** The Arrow schema Spark's ArrowWriter writes for {@code schema} (UTC timestamps). */
  static Schema toArrowSchema(StructType schema) {
    // (schema, timeZoneId, errorOnDuplicatedFieldNames, largeVarTypes, ...)
    return (Schema) call(TO_SCHEMA, schema, "UTC", true, false);
  }

  /** The Arrow field Spark reads zero-copy as {@code type}. */
  static Field toArrowField(String name, DataType type, boolean nullable) {
    // (name, dataType, nullable, timeZoneId, largeVarTypes, ...)
    return (Field) call(TO_FIELD, name, type, nullable, "UTC", false);
  }

  /**
   * Spark's ArrowWriter for {@code root} (allocating its vectors), with {@link Utf8FieldWriter} for
   * the top-level string columns.
   */
  static ArrowWriter writer(VectorSchemaRoot root) {
    java.util.List<FieldVector> vectors = root.getFieldVectors();
    ArrowFieldWriter[] fields = new ArrowFieldWriter[vectors.size()];
    for (int i = 0; i < fields.length; i++) {
      FieldVector v = vectors.get(i);
      v.allocateNew();
      fields[i] = v instanceof VarCharVector ? new Utf8FieldWriter((VarCharVector) v)
          : ArrowWriter$.MODULE$.createFieldWriter(v);
    }
    return new ArrowWriter(root, fields);
  }

  /** The bytes {@code writer} holds (Spark's {@code ArrowWriter.sizeInBytes()}, int or long). */
  static long sizeInBytes(ArrowWriter writer) {
    try {
      return ((Number) SIZE_IN_BYTES.invoke(writer)).longValue();
    } catch (java.lang.reflect.InvocationTargetException e) {
      Throwable c = e.getCause();
      throw c instanceof RuntimeException ? (RuntimeException) c : new IllegalStateException(c);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("calling ArrowWriter.sizeInBytes", e);
    }
  }
}
