package io.flightsink.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.StructType;

/**
 * The table's change feed as the connector reads it ({@code docs/protocol.md}, Change feed): a
 * ticket or descriptor command {@code {"table", "changes": {"from_version", "to_version"?},
 * "columns", "filter"?}} whose rows are the table's columns and {@link #COLUMNS}, Delta's names.
 * {@code columns} and {@code filter} name table columns only; the server adds the change columns
 * to every read.
 */
final class ChangeFeed {
  private ChangeFeed() {}

  /** The columns the feed adds: {@code _change_type} (string), {@code _commit_version} (long), {@code _commit_timestamp}. */
  static final List<String> COLUMNS = List.of("_change_type", "_commit_version", "_commit_timestamp");

  static boolean isChangeColumn(String name) {
    return COLUMNS.contains(name);
  }

  /** The command reading the changes of versions {@code from..to} (to null: the latest). */
  static Map<String, Object> command(String table, long from, Long to, List<String> columns, Map<String, Object> filter) {
    Map<String, Object> range = new LinkedHashMap<>();
    range.put("from_version", from);
    if (to != null) {
      range.put("to_version", to);
    }
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", table);
    cmd.put("changes", range);
    if (columns != null) {
      cmd.put("columns", columns);
    }
    if (filter != null) {
      cmd.put("filter", filter);
    }
    return cmd;
  }

  /**
   * The GetSchema command of the read the options describe: the schema of {@code endingVersion}
   * (or the latest), for a range that starts after it when the stream starts at the latest.
   */
  static Map<String, Object> schemaCommand(FlightSinkOptions opts) {
    long from = opts.startsAtLatest()
        ? opts.client().latestVersion(opts.table()) + 1 : opts.startingVersion();
    return command(opts.table(), from, opts.endingVersion(), null, null);
  }

  /**
   * The table columns of {@code schema} (the change columns left out) to name in a read; none
   * (a count, or only change columns) reads the table's first column, the smallest read the
   * server serves.
   */
  static List<String> tableColumns(FlightSinkOptions opts, StructType schema) {
    List<String> cols = new ArrayList<>();
    for (String n : schema.fieldNames()) {
      if (!isChangeColumn(n)) {
        cols.add(n);
      }
    }
    if (cols.isEmpty()) {
      StructType all = ArrowConversions.sparkSchema(opts.client().schema(schemaCommand(opts)));
      cols.add(all.fieldNames()[0]);
    }
    return cols;
  }
}
