package io.flightsink.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The data source's options, parsed and validated once on the driver ({@link #parse}) and
 * serialized to the tasks; immutable. The names are the Python data source's ({@code
 * clients/pyspark}): {@code uri}, {@code table} (both required), {@code token}, {@code query_id},
 * {@code mergeSchema}, {@code create} (default true), {@code primaryKey} (comma separated, with
 * {@code create}), {@code route}, {@code version} (reads; {@code versionAsOf} is the same), {@code
 * pushFilters} (batch reads, default true), {@code skipChangeCommits} (streaming reads), {@code
 * readChangeFeed} with {@code startingVersion} (a version or {@code latest}) and {@code
 * endingVersion} (batch reads of the change feed), {@code partitionBy} (the partition spec of a
 * table a write creates, in Iceberg's Spark DDL syntax: {@link PartitionTransforms#parse}). Any other
 * option fails, naming the known ones, except Spark's own ({@link #SPARK_OPTIONS}), names starting
 * with {@code __}, and the test hook {@link InjectedFailure#OPTION}, which {@link InjectedFailure}
 * reads from {@link #raw()}.
 */
public final class FlightSinkOptions implements Serializable {
  private static final long serialVersionUID = 3L;

  /** The connector's options (case-insensitive), the test hook aside. */
  static final List<String> KNOWN = List.of("uri", "table", "token", "query_id", "mergeSchema",
      "create", "primaryKey", "route", "version", "versionAsOf", "pushFilters", "skipChangeCommits",
      "readChangeFeed", "startingVersion", "endingVersion", "partitionBy");

  /** The value of {@code startingVersion} that starts a change feed stream after the latest version. */
  static final String LATEST = "latest";

  /** Options Spark itself sets or reads, passed on to every data source. */
  static final List<String> SPARK_OPTIONS = List.of("path", "paths", "checkpointLocation");

  private final String uri;
  private final String table;
  private final String token;
  private final String queryId;
  private final boolean mergeSchema;
  private final boolean create;
  private final List<String> primaryKey;
  private final String route;
  private final Long version;
  private final boolean pushFilters;
  private final boolean skipChangeCommits;
  private final boolean readChangeFeed;
  private final Long startingVersion;
  private final boolean startingLatest;
  private final Long endingVersion;
  /** The spec Spark passed ({@code df.write.partitionBy}); empty for none. */
  private final List<Map<String, Object>> sparkPartitioning;
  private final List<Map<String, Object>> partitionBy;
  private final HashMap<String, String> raw;

  private FlightSinkOptions(Map<String, String> o, List<Map<String, Object>> sparkPartitioning) {
    raw = new HashMap<>(o);
    this.sparkPartitioning = sparkPartitioning;
    checkKnown(o.keySet());
    uri = required(o, "uri");
    table = required(o, "table");
    token = nonEmpty(get(o, "token"));
    String q = get(o, "query_id");
    if (q != null && q.isBlank()) {
      throw new IllegalArgumentException("flight-sink option query_id must not be blank");
    }
    queryId = q == null ? null : q.trim();
    mergeSchema = bool(o, "mergeSchema", false);
    create = bool(o, "create", true);
    primaryKey = list(get(o, "primaryKey"));
    route = nonEmpty(get(o, "route"));
    version = version(get(o, "version"), get(o, "versionAsOf"));
    pushFilters = bool(o, "pushFilters", true);
    skipChangeCommits = bool(o, "skipChangeCommits", false);
    readChangeFeed = bool(o, "readChangeFeed", false);
    String start = get(o, "startingVersion");
    String end = get(o, "endingVersion");
    startingLatest = start != null && start.trim().equalsIgnoreCase(LATEST);
    startingVersion = start == null || startingLatest ? null : positiveLong("startingVersion", start);
    endingVersion = end == null ? null : positiveLong("endingVersion", end);
    checkChangeFeed(start, end);
    partitionBy = partitionSpec(get(o, "partitionBy"), sparkPartitioning);
    InjectedFailure.parse(raw); // a malformed test hook fails here, on the driver
  }

  /** Parses and validates {@code options}; every error is an IllegalArgumentException naming the option. */
  public static FlightSinkOptions parse(Map<String, String> options) {
    return new FlightSinkOptions(options, List.of());
  }

  /**
   * These options with the partitioning Spark passed to the data source ({@code
   * df.write.partitionBy(cols)}: identity transforms); the same options for none. Fails when the
   * option {@code partitionBy} gives another spec, or Spark's transforms have no server
   * counterpart.
   */
  FlightSinkOptions withPartitioning(org.apache.spark.sql.connector.expressions.Transform[] partitioning) {
    if (partitioning == null || partitioning.length == 0) {
      return this;
    }
    List<Map<String, Object>> spec;
    try {
      spec = PartitionTransforms.spec(partitioning);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("flight-sink: cannot partition by " + e.getMessage(), e);
    }
    return new FlightSinkOptions(raw, Collections.unmodifiableList(new ArrayList<>(spec)));
  }

  /** The server's Flight URI ({@code grpc://host:port}, {@code grpc+tls://...}), trimmed. */
  public String uri() {
    return uri;
  }

  /** The table's name, trimmed. */
  public String table() {
    return table;
  }

  /** The bearer token, or null for none. */
  public String token() {
    return token;
  }

  /** The query id a write stamps its epochs with, or null: Spark's query id (a fresh one for a batch write). */
  public String queryId() {
    return queryId;
  }

  /** Whether a write may add columns to the table ({@code merge_schema}). */
  public boolean mergeSchema() {
    return mergeSchema;
  }

  /** Whether a write creates a table that does not exist. */
  public boolean create() {
    return create;
  }

  /** The primary key columns of a table a write creates (empty: none); unmodifiable. */
  public List<String> primaryKey() {
    return primaryKey;
  }

  /** The write route ({@code auto}, {@code direct}, ...), or null for the server's default. */
  public String route() {
    return route;
  }

  /** The version a batch read reads, or null for the latest. */
  public Long version() {
    return version;
  }

  /** Whether batch reads push predicates to the server. */
  public boolean pushFilters() {
    return pushFilters;
  }

  /** Whether a streaming read skips versions that changed or removed rows instead of failing. */
  public boolean skipChangeCommits() {
    return skipChangeCommits;
  }

  /** Whether the read is of the table's change feed (its inserts, deletes and updates) instead of its rows. */
  public boolean readChangeFeed() {
    return readChangeFeed;
  }

  /** The first version of a change feed read, or null when it starts after the latest ({@link #startsAtLatest()}). */
  public Long startingVersion() {
    return startingVersion;
  }

  /** Whether a change feed stream starts after the version that is latest when it first starts. */
  public boolean startsAtLatest() {
    return startingLatest;
  }

  /** The last version of a batch change feed read, or null for the latest. */
  public Long endingVersion() {
    return endingVersion;
  }

  /**
   * The partition spec of a table a write creates ({@code partition_by}: {@code [{"column",
   * "transform"}]}), from Spark's partitioning or the option {@code partitionBy}; empty for none;
   * unmodifiable.
   */
  public List<Map<String, Object>> partitionBy() {
    return partitionBy;
  }

  /** The options as given. */
  Map<String, String> raw() {
    return Collections.unmodifiableMap(raw);
  }

  /** These options with {@code extra} laid over them (a scan's or a write's own options). */
  FlightSinkOptions with(Map<String, String> extra) {
    if (extra.isEmpty()) {
      return this;
    }
    Map<String, String> m = new HashMap<>(raw);
    m.putAll(extra);
    return new FlightSinkOptions(m, sparkPartitioning);
  }

  /**
   * The DoPut command's {@code create} value: false, true or {"primary_key": [...],
   * "partition_by": [...]} (each only when given).
   */
  Object createValue() {
    if (!create) {
      return Boolean.FALSE;
    }
    if (primaryKey.isEmpty() && partitionBy.isEmpty()) {
      return Boolean.TRUE;
    }
    Map<String, Object> c = new java.util.LinkedHashMap<>();
    if (!primaryKey.isEmpty()) {
      c.put("primary_key", primaryKey);
    }
    if (!partitionBy.isEmpty()) {
      c.put("partition_by", partitionBy);
    }
    return c;
  }

  /** The JVM's shared connection to the server these options name. */
  FlightSinkClient client() {
    return FlightSinkClient.get(uri, token);
  }

  // -- parsing --------------------------------------------------------------------------------

  /** The change feed options go together and without a table version. */
  private void checkChangeFeed(String start, String end) {
    if (!readChangeFeed) {
      if (start != null || end != null) {
        throw new IllegalArgumentException(
            "flight-sink options startingVersion and endingVersion read the change feed: set readChangeFeed=true");
      }
      return;
    }
    if (version != null) {
      throw new IllegalArgumentException("flight-sink option readChangeFeed reads a range of versions "
          + "(startingVersion, endingVersion), not version/versionAsOf " + version);
    }
    if (start == null) {
      throw new IllegalArgumentException("flight-sink option readChangeFeed needs startingVersion: "
          + "the first version whose changes to read (>= 1), or latest (streams only)");
    }
    if (endingVersion != null && startingLatest) {
      throw new IllegalArgumentException(
          "flight-sink option endingVersion needs a startingVersion number, not latest");
    }
    if (endingVersion != null && endingVersion < startingVersion) {
      throw new IllegalArgumentException("flight-sink option endingVersion (" + endingVersion
          + ") is before startingVersion (" + startingVersion + ")");
    }
  }

  /**
   * The spec of the option {@code partitionBy} (null: none), or Spark's when it gave one; the two
   * must agree when both are given.
   */
  private static List<Map<String, Object>> partitionSpec(String option, List<Map<String, Object>> spark) {
    if (option == null) {
      return spark;
    }
    List<Map<String, Object>> spec;
    try {
      spec = PartitionTransforms.spec(PartitionTransforms.parse(option));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("flight-sink option partitionBy: " + e.getMessage()
          + " (Iceberg's Spark DDL: days(ts), country, bucket(16, id), truncate(4, name), hours(ts), months(ts),"
          + " years(ts))", e);
    }
    if (!spark.isEmpty() && !PartitionTransforms.fields(spark).equals(PartitionTransforms.fields(spec))) {
      throw new IllegalArgumentException("flight-sink: partitionBy(...) gives " + PartitionTransforms.fields(spark)
          + " and the option partitionBy " + PartitionTransforms.fields(spec) + "; give one of them");
    }
    return Collections.unmodifiableList(new ArrayList<>(spec));
  }

  /** Fails on an option that is neither the connector's nor Spark's: a typo must not pass silently. */
  private static void checkKnown(Set<String> names) {
    List<String> unknown = new ArrayList<>();
    for (String n : names) {
      if (!n.startsWith("__") && !n.equalsIgnoreCase(InjectedFailure.OPTION)
          && KNOWN.stream().noneMatch(n::equalsIgnoreCase)
          && SPARK_OPTIONS.stream().noneMatch(n::equalsIgnoreCase)) {
        unknown.add(n);
      }
    }
    if (!unknown.isEmpty()) {
      Collections.sort(unknown);
      throw new IllegalArgumentException("flight-sink: unknown option" + (unknown.size() > 1 ? "s " : " ")
          + String.join(", ", unknown) + "; the options are " + String.join(", ", KNOWN)
          + " (see clients/spark/README.md)");
    }
  }

  /** Option lookup, case-insensitive (Spark lower-cases keys in some paths, not in others). */
  static String get(Map<String, String> o, String name) {
    String v = o.get(name);
    if (v != null) {
      return v;
    }
    for (Map.Entry<String, String> e : o.entrySet()) {
      if (e.getKey().equalsIgnoreCase(name)) {
        return e.getValue();
      }
    }
    return null;
  }

  private static String required(Map<String, String> o, String name) {
    String v = get(o, name);
    if (v == null || v.isBlank()) {
      throw new IllegalArgumentException(
          "the flight-sink data source needs the options uri and table, e.g. "
              + ".option(\"uri\", \"grpc://127.0.0.1:8815\").option(\"table\", \"events\")");
    }
    return v.trim();
  }

  private static String nonEmpty(String v) {
    return v == null || v.isEmpty() ? null : v;
  }

  private static List<String> list(String csv) {
    List<String> out = new ArrayList<>();
    if (csv != null) {
      for (String k : csv.split(",")) {
        if (!k.isBlank()) {
          out.add(k.trim());
        }
      }
    }
    return Collections.unmodifiableList(out);
  }

  private static Long version(String v, String versionAsOf) {
    if (v != null && versionAsOf != null && !v.trim().equals(versionAsOf.trim())) {
      throw new IllegalArgumentException(
          "flight-sink options version (" + v + ") and versionAsOf (" + versionAsOf + ") disagree");
    }
    String ver = v != null ? v : versionAsOf;
    if (ver == null || ver.isBlank()) {
      return null;
    }
    return positiveLong("version", ver);
  }

  /** {@code raw} as a version number: an integer of at least 1. */
  static long positiveLong(String name, String raw) {
    long n;
    try {
      n = Long.parseLong(raw.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("flight-sink option " + name + " must be an integer, got " + raw);
    }
    if (n < 1) {
      throw new IllegalArgumentException("flight-sink option " + name + " must be >= 1, got " + raw);
    }
    return n;
  }

  private static boolean bool(Map<String, String> o, String name, boolean def) {
    String raw = get(o, name);
    if (raw == null) {
      return def;
    }
    switch (raw.trim().toLowerCase(Locale.ROOT)) {
      case "true":
      case "1":
      case "yes":
        return true;
      case "false":
      case "0":
      case "no":
        return false;
      default:
        throw new IllegalArgumentException(
            "flight-sink option " + name + " must be true or false, got " + raw);
    }
  }
}
