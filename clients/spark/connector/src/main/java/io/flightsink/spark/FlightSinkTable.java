package io.flightsink.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** One flight-sink table on one server. */
final class FlightSinkTable implements SupportsRead, SupportsWrite {
  private final FlightSinkOptions opts;
  private final StructType schema;
  private final Transform[] partitioning;

  FlightSinkTable(FlightSinkOptions opts, StructType schema, Transform[] partitioning) {
    this.opts = opts;
    this.schema = schema;
    this.partitioning = partitioning == null ? new Transform[0] : partitioning.clone();
  }

  @Override
  public String name() {
    return "flight-sink:" + opts.table();
  }

  @Override
  public StructType schema() {
    return schema;
  }

  /**
   * The partitioning Spark passed ({@code df.write.partitionBy}), which Spark requires a table to
   * report back before it writes; the write checks it against the server's table ({@link
   * FlightSinkWriteBuilder#checkPartitioning}).
   */
  @Override
  public Transform[] partitioning() {
    return partitioning.clone();
  }

  @Override
  public Set<TableCapability> capabilities() {
    // ACCEPT_ANY_SCHEMA: the server checks a write's schema against the table's (by name, with
    // its promotions and schema evolution), and creates tables that do not exist yet.
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
        TableCapability.STREAMING_WRITE, TableCapability.TRUNCATE, TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    FlightSinkOptions o = opts.with(options.asCaseSensitiveMap());
    return new FlightSinkScan.Builder(o, schema);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    FlightSinkOptions o = opts.with(info.options().asCaseSensitiveMap());
    return new FlightSinkWriteBuilder(o, info);
  }
}
