package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.connector.catalog.SupportsDeleteV2;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of {@link FlightSinkCatalog}: the data source's table ({@link FlightSinkTable}: the
 * same scans, pushdown and writes, exactly once) under a name, with a fixed schema (so Spark
 * resolves {@code INSERT INTO} columns by position), {@code DELETE FROM} through the server's
 * {@code delete} action and the server's facts as its properties (what {@code DESCRIBE TABLE
 * EXTENDED} shows). Writes never create the table ({@code create=false}): a table dropped
 * meanwhile fails the write with {@code TABLE_NOT_FOUND}.
 */
final class FlightSinkCatalogTable implements SupportsRead, SupportsWrite, SupportsDeleteV2 {
  /** Properties the server reports; set at CREATE TABLE and read-only afterwards. */
  static final String PROP_PRIMARY_KEY = "primary_key";
  static final String PROP_MEMWAL_SHARDS = "memwal.shards";
  static final String PROP_DATA_CODEC = "data_codec";
  /** Facts of the version read: read-only. */
  static final String PROP_VERSION = "version";
  static final String PROP_ROWS = "rows";

  private final String quotedName;
  private final FlightSinkClient client;
  private final String table;
  /** The version read (VERSION AS OF); null: the latest. */
  private final Long version;
  private final StructType schema;
  private final Schema arrowSchema;
  private final FlightSinkTable data;
  private JsonNode stats;
  private Map<String, String> properties;

  /**
   * The server's {@code table} at {@code version} (null: the latest), read and written with
   * {@code opts} (which name the same table and version); arrowSchema is the server's.
   */
  FlightSinkCatalogTable(String quotedName, String table, Long version, FlightSinkOptions opts, Schema arrowSchema) {
    this.quotedName = quotedName;
    this.client = opts.client();
    this.table = table;
    this.version = version;
    this.arrowSchema = arrowSchema;
    this.schema = ArrowConversions.sparkSchema(arrowSchema);
    this.data = new FlightSinkTable(opts, schema, null);
  }

  @Override
  public String name() {
    return quotedName;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  Schema arrowSchema() {
    return arrowSchema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    // No ACCEPT_ANY_SCHEMA: Spark checks and orders a write's columns against this schema.
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
        TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE, TableCapability.TRUNCATE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return data.newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (version != null) {
      throw CatalogErrors.unsupported(quotedName, "writes to a past version (VERSION AS OF)");
    }
    return data.newWriteBuilder(info);
  }

  /** The server's table_stats of the latest version, asked once. */
  private synchronized JsonNode stats() {
    if (stats == null) {
      stats = client.action("table_stats", Map.of("table", table));
    }
    return stats;
  }

  @Override
  public Transform[] partitioning() {
    return PartitionTransforms.fromSpec(stats().get("partition_by"));
  }

  /**
   * The table's facts: its primary key, MemWAL shards, the version read (and the rows of the
   * latest), the maintenance settings it stores, and the provider.
   */
  @Override
  public synchronized Map<String, String> properties() {
    if (properties != null) {
      return properties;
    }
    Map<String, String> p = new LinkedHashMap<>();
    p.put(TableCatalog.PROP_PROVIDER, FlightSinkDataSource.SHORT_NAME);
    JsonNode st = stats();
    List<String> key = new ArrayList<>();
    st.path("primary_key").forEach(k -> key.add(k.asText()));
    if (!key.isEmpty()) {
      p.put(PROP_PRIMARY_KEY, String.join(",", key));
    }
    int shards = st.path("memwal").path("shards").size();
    if (shards > 0) {
      p.put(PROP_MEMWAL_SHARDS, Integer.toString(shards));
    }
    if (version != null) {
      p.put(PROP_VERSION, Long.toString(version));
    } else {
      p.put(PROP_VERSION, st.path("version").asText());
      p.put(PROP_ROWS, st.path("rows").asText());
    }
    JsonNode config = client.action("get_table_config", Map.of("table", table));
    for (JsonNode s : config.path("settings")) {
      if (s.path("stored").asBoolean()) {
        p.put(s.path("key").asText(), s.path("value").asText());
      }
    }
    properties = java.util.Collections.unmodifiableMap(p);
    return properties;
  }

  // ---- DELETE FROM ----

  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    return deleteFilter(predicates) != null;
  }

  /**
   * {@code DELETE FROM t WHERE ...}: one {@code delete} action (one Delete transaction, MemWAL
   * rows included); no condition truncates ({@link #truncateTable}). Spark calls it only with
   * predicates {@link #canDeleteWhere} accepted: each one the server evaluates exactly as Spark
   * would (the pushdown's translation, {@link Predicates}).
   */
  @Override
  public void deleteWhere(Predicate[] predicates) {
    if (version != null) {
      throw CatalogErrors.unsupported(quotedName, "DELETE FROM a past version (VERSION AS OF)");
    }
    Map<String, Object> where = deleteFilter(predicates);
    if (where == null) {
      throw CatalogErrors.unsupported(quotedName, "DELETE FROM with a condition the server cannot evaluate"
          + " exactly as Spark does (" + java.util.Arrays.toString(predicates) + ")");
    }
    if (where.isEmpty()) {
      truncateTable();
      return;
    }
    client.action("delete", Map.of("table", table, "where", where));
  }

  /**
   * The server's predicate of Spark's (the AND of them): an empty map for "every row" (no
   * predicate, or only ALWAYS_TRUE), null when one has no exact translation.
   */
  private static Map<String, Object> deleteFilter(Predicate[] predicates) {
    Map<String, Object> filter = null;
    for (Predicate p : predicates) {
      if (p.name().equals("ALWAYS_TRUE")) {
        continue;
      }
      Map<String, Object> t = Predicates.translate(p);
      if (t == null) {
        return null;
      }
      filter = filter == null ? t : Predicates.nary("and", filter, t);
    }
    if (filter == null) {
      return Map.of();
    }
    return Predicates.Bounds.fit(filter) ? filter : null;
  }

  /** {@code TRUNCATE TABLE} (and a DELETE without condition): one empty Overwrite. */
  @Override
  public boolean truncateTable() {
    if (version != null) {
      throw CatalogErrors.unsupported(quotedName, "TRUNCATE TABLE of a past version (VERSION AS OF)");
    }
    Map<String, Object> cmd = catalogEpoch(table, "complete");
    putEmpty(client, cmd, arrowSchema);
    return true;
  }

  /**
   * The DoPut command of a catalog operation carried by an epoch without rows (a create, a
   * schema change, a truncate): its own query id, epoch 0.
   */
  static Map<String, Object> catalogEpoch(String table, String mode) {
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", table);
    cmd.put("query_id", "spark-catalog-" + UUID.randomUUID());
    cmd.put("epoch_id", 0);
    cmd.put("mode", mode);
    cmd.put("rows", 0);
    return cmd;
  }

  /** Sends a DoPut of {@code schema} with no rows and returns the server's acknowledgement. */
  static JsonNode putEmpty(FlightSinkClient client, Map<String, Object> cmd, Schema schema) {
    try (BufferAllocator alloc = ArrowUtils.rootAllocator()
            .newChildAllocator("flight-sink catalog put", 0, Long.MAX_VALUE);
         VectorSchemaRoot root = VectorSchemaRoot.create(schema, alloc);
         FlightSinkClient.Put put = client.new Put(cmd, root)) {
      return put.finish();
    }
  }
}
