package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.Changelog;
import org.apache.spark.sql.connector.catalog.ChangelogContext;
import org.apache.spark.sql.connector.catalog.ChangelogRange;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table's change feed as Spark ≥ 4.2's {@link Changelog} ({@code spark.readStream.changes},
 * the {@code CHANGES} clause): the reader of {@code readChangeFeed} over the context's version
 * range, its rows the table's columns and {@code _change_type}, {@code _commit_version} (long)
 * and {@code _commit_timestamp}. The feed is exact (no carry-over rows, updates as pre- and
 * post-images); a key may change in several versions of a range, so Spark collapses them for
 * {@code netChanges} by the primary key (a keyless table has no row identity and refuses it).
 *
 * <p>Spark 4.1 lacks the interface: only {@link FlightSinkCatalog#loadChangelog}, which 4.1 never
 * calls, reaches this class.
 */
final class FlightSinkChangelog implements Changelog {
  /** Spark's CDC options ({@code ChangelogContext}'s), read from the context, not passed to the reader. */
  private static final Set<String> CDC_OPTIONS = Set.of("startingversion", "endingversion", "startingtimestamp",
      "endingtimestamp", "startingboundinclusive", "endingboundinclusive", "deduplicationmode", "computeupdates");

  private final String name;
  private final FlightSinkOptions opts;
  private final StructType schema;
  private final List<String> primaryKey;

  private FlightSinkChangelog(String name, FlightSinkOptions opts, StructType schema, List<String> primaryKey) {
    this.name = name;
    this.opts = opts;
    this.schema = schema;
    this.primaryKey = primaryKey;
  }

  /**
   * The changelog of {@code table} over {@code ctx}'s range: {@code base} (the catalog's options
   * of the table) with {@code readChangeFeed} and the range's versions. A timestamp range fails:
   * the feed is addressed by versions.
   */
  static Changelog open(String name, FlightSinkOptions base, ChangelogContext ctx, CaseInsensitiveStringMap options) {
    Map<String, String> o = readerOptions(options);
    o.put("readChangeFeed", "true");
    ChangelogRange range = ctx.range();
    if (range instanceof ChangelogRange.VersionRange) {
      ChangelogRange.VersionRange r = (ChangelogRange.VersionRange) range;
      o.put("startingVersion", bound("starting", r.startingVersion(), r.startingBoundInclusive() ? 0 : 1));
      if (r.endingVersion().isPresent()) {
        o.put("endingVersion", bound("ending", r.endingVersion().get(), r.endingBoundInclusive() ? 0 : -1));
      }
    } else if (range instanceof ChangelogRange.UnboundedRange) {
      o.put("startingVersion", "1");
    } else {
      throw new IllegalArgumentException("flight-sink: the change feed of " + name
          + " is read by versions (startingVersion, endingVersion), not by timestamps: " + range);
    }
    FlightSinkOptions opts = base.with(o);
    StructType schema = ArrowConversions.sparkSchema(opts.client().schema(ChangeFeed.schemaCommand(opts)));
    List<String> key = new ArrayList<>();
    JsonNode stats = opts.client().action("table_stats", Map.of("table", opts.table()));
    if (stats != null) {
      stats.path("primary_key").forEach(k -> key.add(k.asText()));
    }
    return new FlightSinkChangelog(name, opts, schema, key);
  }

  /** A version bound as the reader's option: {@code v} moved by {@code shift} (an exclusive bound). */
  private static String bound(String which, String v, int shift) {
    if (FlightSinkOptions.LATEST.equalsIgnoreCase(v.trim()) && shift == 0) {
      return FlightSinkOptions.LATEST;
    }
    try {
      return Long.toString(Long.parseLong(v.trim()) + shift);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("flight-sink: the change feed's " + which
          + " version must be a table version (an integer >= 1), got " + v);
    }
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Column[] columns() {
    Column[] out = new Column[schema.fields().length];
    for (int i = 0; i < out.length; i++) {
      StructField f = schema.fields()[i];
      out[i] = Column.create(f.name(), f.dataType(), f.nullable());
    }
    return out;
  }

  /** The feed holds only real changes: an unchanged row is never re-emitted. */
  @Override
  public boolean containsCarryoverRows() {
    return false;
  }

  /** Each version changes a key at most once, but a range of versions may change it several times. */
  @Override
  public boolean containsIntermediateChanges() {
    return true;
  }

  /** Updates come as {@code update_preimage} and {@code update_postimage} rows. */
  @Override
  public boolean representsUpdateAsDeleteAndInsert() {
    return false;
  }

  /** The primary key; a keyless table has no row identity (Spark then refuses {@code netChanges}). */
  @Override
  public NamedReference[] rowId() {
    if (primaryKey.isEmpty()) {
      throw new UnsupportedOperationException("flight-sink: " + name
          + " has no primary key, so its changes have no row identity");
    }
    NamedReference[] out = new NamedReference[primaryKey.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = Expressions.column(primaryKey.get(i));
    }
    return out;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new FlightSinkScan.Builder(opts.with(readerOptions(options)), schema);
  }

  /** {@code options} without Spark's CDC options (the context carries them). */
  private static Map<String, String> readerOptions(CaseInsensitiveStringMap options) {
    Map<String, String> o = new HashMap<>();
    for (Map.Entry<String, String> e : options.asCaseSensitiveMap().entrySet()) {
      if (!CDC_OPTIONS.contains(e.getKey().toLowerCase(Locale.ROOT))) {
        o.put(e.getKey(), e.getValue());
      }
    }
    return o;
  }
}
