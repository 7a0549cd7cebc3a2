package io.flightsink.spark;

import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BitVectorHelper;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.execution.arrow.ArrowFieldWriter;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Writes a string column into a {@link VarCharVector} by copying each {@link UTF8String}'s bytes
 * straight into the vector's data buffer. Spark's own string writer wraps every value in a
 * ByteBuffer and Arrow duplicates it again before copying: two allocations a value.
 */
final class Utf8FieldWriter extends ArrowFieldWriter {
  private final VarCharVector vector;

  Utf8FieldWriter(VarCharVector vector) {
    this.vector = vector;
  }

  @Override
  public VarCharVector valueVector() {
    return vector;
  }

  @Override
  public void setNull() {
    vector.setNull(count());
  }

  @Override
  public void setValue(SpecializedGetters input, int ordinal) {
    UTF8String s = input.getUTF8String(ordinal);
    int index = count();
    // Offsets up to index (the nulls before it included) and room in the validity and offset
    // buffers for it, as VarCharVector.setSafe does.
    vector.fillEmpties(index);
    int start = vector.getStartOffset(index);
    long end = (long) start + s.numBytes();
    if (end > Integer.MAX_VALUE) {
      throw new IllegalStateException("flight-sink: a string batch over 2 GiB (Arrow utf8 offsets are 32-bit)");
    }
    while (vector.getDataBuffer().capacity() < end) {
      vector.reallocDataBuffer();
    }
    s.writeToMemory(null, vector.getDataBuffer().memoryAddress() + start);
    vector.getOffsetBuffer().setInt((long) (index + 1) * BaseVariableWidthVector.OFFSET_WIDTH, (int) end);
    BitVectorHelper.setBit(vector.getValidityBuffer(), index);
    vector.setLastSet(index);
  }
}
