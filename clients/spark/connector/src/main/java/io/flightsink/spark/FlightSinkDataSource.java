package io.flightsink.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code flight-sink} Spark data source (DataSource V2), registered by short name through
 * {@code META-INF/services/org.apache.spark.sql.sources.DataSourceRegister}:
 *
 * <pre>
 * df.writeStream.format("flight-sink").option("uri", u).option("table", t)
 *     .option("checkpointLocation", c).start();                  // streaming writes
 * df.write.format("flight-sink").option("uri", u).option("table", t).mode("append").save();
 * spark.read.format("flight-sink").option("uri", u).option("table", t).load();
 * spark.readStream.format("flight-sink").option("uri", u).option("table", t)
 *     .option("readChangeFeed", "true").option("startingVersion", "1").load();   // the change feed
 * </pre>
 *
 * Options: {@link FlightSinkOptions}; how each mode maps onto the protocol: clients/spark/README.md.
 */
public final class FlightSinkDataSource implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "flight-sink";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  /** The table's schema (at {@code version} when given; with the change columns for {@code
   * readChangeFeed}); empty for a table that does not exist yet (a write creates it from its
   * data; the change feed of a table that does not exist fails). */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    FlightSinkOptions opts = FlightSinkOptions.parse(options.asCaseSensitiveMap());
    try {
      return ArrowConversions.sparkSchema(opts.client().schema(FlightSinkScan.tableCmd(opts)));
    } catch (FlightSinkException e) {
      if (e.isTableNotFound() && !opts.readChangeFeed()) {
        return new StructType();
      }
      throw e;
    }
  }

  /**
   * {@code partitioning} is what {@code df.write.partitionBy(cols)} gave (identity transforms):
   * the partition spec of a table the write creates, as the option {@code partitionBy} is.
   * Spark passes no partitioning from {@code writeStream.partitionBy} to a data source (only to
   * a catalog's createTable: {@link FlightSinkCatalog}).
   */
  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new FlightSinkTable(FlightSinkOptions.parse(properties).withPartitioning(partitioning), schema, partitioning);
  }

  /** Writes pass their data's schema (no GetSchema round trip); reads may name columns. */
  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }
}
