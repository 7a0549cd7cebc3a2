package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;

/**
 * Spark's partition transforms ({@code PARTITIONED BY (days(ts), bucket(16, id), truncate(4, s),
 * region)}) to the server's partition spec and back. The spec is the {@code partition_by} list of
 * {@code create_table} and of DoPut's {@code create} object: {@code [{"column": "ts", "transform":
 * "day"}, {"column": "id", "transform": "bucket[16]"}]}, transforms {@code identity}, {@code year},
 * {@code month}, {@code day}, {@code hour}, {@code bucket[N]}, {@code truncate[W]}.
 */
final class PartitionTransforms {
  private PartitionTransforms() {}

  private static final Pattern PARAMETERIZED = Pattern.compile("(bucket|truncate)\\[(\\d+)]");

  /**
   * The server's spec of Spark's transforms; empty for none. A transform the server has no
   * counterpart for (several columns, a nested column, an unknown function) is refused naming it.
   */
  static List<Map<String, Object>> toSpec(Transform[] partitions, String table) {
    List<Map<String, Object>> spec = new ArrayList<>();
    for (Transform t : partitions == null ? new Transform[0] : partitions) {
      String column = null;
      Integer width = null;
      for (Expression arg : t.arguments()) {
        if (arg instanceof NamedReference && column == null) {
          String[] parts = ((NamedReference) arg).fieldNames();
          if (parts.length != 1) {
            throw refused(table, t, "the server partitions by top-level columns only");
          }
          column = parts[0];
        } else if (arg instanceof Literal && width == null && ((Literal<?>) arg).value() instanceof Integer) {
          width = (Integer) ((Literal<?>) arg).value();
        } else {
          throw refused(table, t, "expected one column and at most one integer");
        }
      }
      if (column == null) {
        throw refused(table, t, "it names no column");
      }
      String name = t.name().toLowerCase(Locale.ROOT);
      String transform;
      switch (name) {
        case "identity":
          transform = "identity";
          break;
        case "years":
        case "year":
          transform = "year";
          break;
        case "months":
        case "month":
          transform = "month";
          break;
        case "days":
        case "day":
          transform = "day";
          break;
        case "hours":
        case "hour":
          transform = "hour";
          break;
        case "bucket":
        case "truncate":
          if (width == null || width < 1) {
            throw refused(table, t, name + " needs a positive integer (" + name + "(16, col))");
          }
          transform = name + "[" + width + "]";
          break;
        default:
          throw refused(table, t, "the server's transforms are identity, years, months, days, hours, bucket(N, col)"
              + " and truncate(W, col)");
      }
      if (width != null && !name.equals("bucket") && !name.equals("truncate")) {
        throw refused(table, t, name + " takes no number");
      }
      Map<String, Object> field = new LinkedHashMap<>();
      field.put("column", column);
      field.put("transform", transform);
      spec.add(field);
    }
    return spec;
  }

  /** Spark's transforms of the server's spec (a {@code partition_by} array); empty for none. */
  static Transform[] fromSpec(JsonNode spec) {
    List<Transform> out = new ArrayList<>();
    if (spec == null || !spec.isArray()) {
      return new Transform[0];
    }
    for (JsonNode f : spec) {
      String column = f.path("column").asText();
      String transform = f.path("transform").asText();
      Matcher m = PARAMETERIZED.matcher(transform);
      if (m.matches()) {
        int n = Integer.parseInt(m.group(2));
        out.add(m.group(1).equals("bucket") ? Expressions.bucket(n, column)
            : Expressions.apply("truncate", Expressions.literal(n), Expressions.column(column)));
        continue;
      }
      switch (transform) {
        case "identity":
          out.add(Expressions.identity(column));
          break;
        case "year":
          out.add(Expressions.years(column));
          break;
        case "month":
          out.add(Expressions.months(column));
          break;
        case "day":
          out.add(Expressions.days(column));
          break;
        case "hour":
          out.add(Expressions.hours(column));
          break;
        default:
          // A transform this connector does not know (a newer server): shown by its server name.
          out.add(Expressions.apply(transform, Expressions.column(column)));
      }
    }
    return out.toArray(new Transform[0]);
  }

  private static RuntimeException refused(String table, Transform t, String why) {
    return CatalogErrors.unsupported(table, "PARTITIONED BY " + t.describe() + " (" + why + ")");
  }
}
