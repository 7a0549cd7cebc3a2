package io.flightsink.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The data source's options, parsed once on the driver and serialized to the tasks. The names are
 * the Python data source's ({@code clients/pyspark}): {@code uri}, {@code table} (both required),
 * {@code token}, {@code query_id}, {@code mergeSchema}, {@code create} (default true),
 * {@code primaryKey} (comma separated, with {@code create}), {@code route}, {@code version} (reads;
 * {@code versionAsOf} is the same), {@code pushFilters} (batch reads, default true),
 * {@code skipChangeCommits} (streaming reads). Any other option fails, naming the known ones,
 * except Spark's own ({@link #SPARK_OPTIONS}, and names starting with {@code __}).
 */
public final class FlightSinkOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /**
   * Test-only option: {@code "<partition>:<attempt>"} makes that task attempt fail right after its
   * DoPut was acknowledged (the Python data source's option of the same name); {@code
   * "<partition>:*"} makes every attempt of that partition fail. Never set it in production.
   */
  public static final String TEST_FAIL_AFTER_STAGE = "_testFailAfterStage";

  /** The connector's options (case-insensitive), the test-only one aside. */
  static final List<String> KNOWN = List.of("uri", "table", "token", "query_id", "mergeSchema",
      "create", "primaryKey", "route", "version", "versionAsOf", "pushFilters", "skipChangeCommits");

  /** Options Spark itself sets or reads, passed on to every data source. */
  static final List<String> SPARK_OPTIONS = List.of("path", "paths", "checkpointLocation");

  public final String uri;
  public final String table;
  public final String token;
  public final String queryId;
  public final boolean mergeSchema;
  public final boolean create;
  public final List<String> primaryKey;
  public final String route;
  public final Long version;
  public final boolean pushFilters;
  public final boolean skipChangeCommits;
  public final int[] failAfterStage;
  private final java.util.HashMap<String, String> raw;

  private FlightSinkOptions(Map<String, String> o) {
    raw = new java.util.HashMap<>(o);
    checkKnown(o.keySet());
    String u = get(o, "uri");
    String t = get(o, "table");
    if (u == null || u.isBlank() || t == null || t.isBlank()) {
      throw new IllegalArgumentException(
          "the flight-sink data source needs the options uri and table, e.g. "
              + ".option(\"uri\", \"grpc://127.0.0.1:8815\").option(\"table\", \"events\")");
    }
    uri = u.trim();
    table = t.trim();
    String tok = get(o, "token");
    token = tok == null || tok.isEmpty() ? null : tok;
    String q = get(o, "query_id");
    if (q != null && q.isBlank()) {
      throw new IllegalArgumentException("flight-sink option query_id must not be blank");
    }
    queryId = q == null ? null : q.trim();
    mergeSchema = bool(o, "mergeSchema", false);
    create = bool(o, "create", true);
    List<String> keys = new ArrayList<>();
    String pk = get(o, "primaryKey");
    if (pk != null) {
      for (String k : pk.split(",")) {
        if (!k.isBlank()) {
          keys.add(k.trim());
        }
      }
    }
    primaryKey = Collections.unmodifiableList(keys);
    String r = get(o, "route");
    route = r == null || r.isEmpty() ? null : r;
    String v = get(o, "version");
    String vao = get(o, "versionAsOf");
    if (v != null && vao != null && !v.trim().equals(vao.trim())) {
      throw new IllegalArgumentException(
          "flight-sink options version (" + v + ") and versionAsOf (" + vao + ") disagree");
    }
    String ver = v != null ? v : vao;
    if (ver == null || ver.isBlank()) {
      version = null;
    } else {
      try {
        version = Long.parseLong(ver.trim());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("flight-sink option version must be an integer, got " + ver);
      }
      if (version < 1) {
        throw new IllegalArgumentException("flight-sink option version must be >= 1, got " + ver);
      }
    }
    pushFilters = bool(o, "pushFilters", true);
    skipChangeCommits = bool(o, "skipChangeCommits", false);
    String f = get(o, TEST_FAIL_AFTER_STAGE);
    if (f != null && !f.isEmpty()) {
      String[] parts = f.split(":");
      failAfterStage = new int[] {Integer.parseInt(parts[0].trim()),
          parts[1].trim().equals("*") ? -1 : Integer.parseInt(parts[1].trim())};
    } else {
      failAfterStage = null;
    }
  }

  /** Fails on an option that is neither the connector's nor Spark's: a typo must not pass silently. */
  private static void checkKnown(java.util.Set<String> names) {
    List<String> unknown = new ArrayList<>();
    for (String n : names) {
      if (!n.startsWith("__") && !n.equalsIgnoreCase(TEST_FAIL_AFTER_STAGE)
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

  public static FlightSinkOptions parse(Map<String, String> options) {
    return new FlightSinkOptions(options);
  }

  /** Option lookup, case-insensitive (Spark lower-cases keys in some paths, not in others). */
  private static String get(Map<String, String> o, String name) {
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

  /** The DoPut command's {@code create} value: false, true or {"primary_key": [...]}. */
  Object createValue() {
    if (!create) {
      return Boolean.FALSE;
    }
    if (primaryKey.isEmpty()) {
      return Boolean.TRUE;
    }
    return Collections.singletonMap("primary_key", primaryKey);
  }

  /** The options as given. */
  Map<String, String> raw() {
    return Collections.unmodifiableMap(raw);
  }

  FlightSinkClient client() {
    return FlightSinkClient.get(uri, token);
  }
}
