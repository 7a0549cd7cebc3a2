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
   * counterpart for (several columns, a nested column, an unknown function) is refused naming it,
   * as Spark refuses a table operation ({@link CatalogErrors#unsupported}) on {@code table}.
   */
  static List<Map<String, Object>> toSpec(Transform[] partitions, String table) {
    try {
      return spec(partitions);
    } catch (Unmappable e) {
      throw CatalogErrors.unsupported(table, "PARTITIONED BY " + e.transform.describe() + " (" + e.why + ")");
    }
  }

  /**
   * The server's spec of Spark's transforms; empty for none. {@link Unmappable} (an
   * IllegalArgumentException) names a transform the server has no counterpart for.
   */
  static List<Map<String, Object>> spec(Transform[] partitions) {
    List<Map<String, Object>> spec = new ArrayList<>();
    for (Transform t : partitions == null ? new Transform[0] : partitions) {
      String column = null;
      Integer width = null;
      for (Expression arg : t.arguments()) {
        if (arg instanceof NamedReference && column == null) {
          String[] parts = ((NamedReference) arg).fieldNames();
          if (parts.length != 1) {
            throw new Unmappable(t, "the server partitions by top-level columns only");
          }
          column = parts[0];
        } else if (arg instanceof Literal && width == null && ((Literal<?>) arg).value() instanceof Integer) {
          width = (Integer) ((Literal<?>) arg).value();
        } else {
          throw new Unmappable(t, "expected one column and at most one integer");
        }
      }
      if (column == null) {
        throw new Unmappable(t, "it names no column");
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
        case "date": // Iceberg's Spark DDL alias of days
          transform = "day";
          break;
        case "hours":
        case "hour":
        case "date_hour": // Iceberg's Spark DDL alias of hours
          transform = "hour";
          break;
        case "bucket":
        case "truncate":
          if (width == null || width < 1) {
            throw new Unmappable(t, name + " needs a positive integer (" + name + "(16, col))");
          }
          transform = name + "[" + width + "]";
          break;
        default:
          throw new Unmappable(t, "the server's transforms are identity, years, months, days, hours, bucket(N, col)"
              + " and truncate(W, col)");
      }
      if (width != null && !name.equals("bucket") && !name.equals("truncate")) {
        throw new Unmappable(t, name + " takes no number");
      }
      Map<String, Object> field = new LinkedHashMap<>();
      field.put("column", column);
      field.put("transform", transform);
      spec.add(field);
    }
    return spec;
  }

  /**
   * Spark's transforms of a partition spec in Iceberg's Spark DDL syntax, the text of {@code
   * PARTITIONED BY (...)} without the parentheses: comma-separated terms, each a column (identity)
   * or a function of columns and integers ({@code days(ts), country, bucket(16, id), truncate(4,
   * name)}); a column is a name or a backquoted one ({@code `my col`}), dotted for a nested field.
   * Only the syntax is checked here: {@link #spec} maps the transforms, the server checks them
   * against the schema. A malformed text is an IllegalArgumentException saying where.
   */
  static Transform[] parse(String text) {
    return new DdlParser(text).terms();
  }

  /** A recursive-descent parser of {@link #parse}'s grammar. */
  private static final class DdlParser {
    private final String text;
    private int pos;

    DdlParser(String text) {
      this.text = text;
    }

    Transform[] terms() {
      List<Transform> out = new ArrayList<>();
      skipSpace();
      if (pos == text.length()) {
        throw error("no partition field");
      }
      while (true) {
        out.add(term());
        skipSpace();
        if (pos == text.length()) {
          return out.toArray(new Transform[0]);
        }
        expect(',');
      }
    }

    private Transform term() {
      skipSpace();
      int start = pos;
      String name = identifier();
      skipSpace();
      if (pos < text.length() && text.charAt(pos) == '(') {
        if (name.contains(".") || text.charAt(start) == '`') {
          throw error("a function name must be a plain word, not " + name, start);
        }
        pos++;
        List<Expression> args = new ArrayList<>();
        skipSpace();
        if (pos < text.length() && text.charAt(pos) == ')') {
          throw error(name + "() needs a column");
        }
        while (true) {
          args.add(argument());
          skipSpace();
          if (pos < text.length() && text.charAt(pos) == ')') {
            pos++;
            break;
          }
          expect(',');
        }
        return Expressions.apply(name, args.toArray(new Expression[0]));
      }
      return Expressions.identity(text.substring(start, pos).trim());
    }

    private Expression argument() {
      skipSpace();
      int start = pos;
      if (pos < text.length() && (Character.isDigit(text.charAt(pos)) || text.charAt(pos) == '-')) {
        pos++;
        while (pos < text.length() && Character.isDigit(text.charAt(pos))) {
          pos++;
        }
        try {
          return Expressions.literal(Integer.parseInt(text.substring(start, pos)));
        } catch (NumberFormatException e) {
          throw error("not an integer: " + text.substring(start, pos), start);
        }
      }
      identifier();
      return Expressions.column(text.substring(start, pos));
    }

    /** A name, backquoted or not, dotted for a nested field; returns its text. */
    private String identifier() {
      int start = pos;
      while (true) {
        if (pos < text.length() && text.charAt(pos) == '`') {
          pos++;
          while (true) {
            int close = text.indexOf('`', pos);
            if (close < 0) {
              throw error("unclosed backquote", start);
            }
            pos = close + 1;
            if (pos < text.length() && text.charAt(pos) == '`') {
              pos++; // a doubled backquote stands for one
              continue;
            }
            break;
          }
        } else {
          int s = pos;
          while (pos < text.length() && (Character.isLetterOrDigit(text.charAt(pos)) || text.charAt(pos) == '_')) {
            pos++;
          }
          if (s == pos) {
            throw error(pos == text.length() ? "expected a column or function name at the end"
                : "expected a column or function name, not '" + text.charAt(pos) + "'");
          }
        }
        if (pos < text.length() && text.charAt(pos) == '.') {
          pos++;
          continue;
        }
        return text.substring(start, pos);
      }
    }

    private void expect(char c) {
      skipSpace();
      if (pos == text.length()) {
        throw error("expected '" + c + "' at the end");
      }
      if (text.charAt(pos) != c) {
        throw error("expected '" + c + "', not '" + text.charAt(pos) + "'");
      }
      pos++;
    }

    private void skipSpace() {
      while (pos < text.length() && Character.isWhitespace(text.charAt(pos))) {
        pos++;
      }
    }

    private IllegalArgumentException error(String why) {
      return error(why, pos);
    }

    private IllegalArgumentException error(String why, int at) {
      return new IllegalArgumentException(why + " at position " + (at + 1) + " of '" + text + "'");
    }
  }

  /** A Spark transform the server's spec cannot express, and why. */
  static final class Unmappable extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;
    final transient Transform transform;
    final String why;

    Unmappable(Transform transform, String why) {
      super(transform.describe() + ": " + why);
      this.transform = transform;
      this.why = why;
    }
  }

  /**
   * A spec's fields as the server names them ({@code day(ts)}, {@code bucket[16](id)}), in order:
   * what two specs are compared by. {@code spec} is a {@code partition_by} array (JSON) or a list
   * of {@link #spec}'s maps; null is none.
   */
  static List<String> fields(Object spec) {
    List<String> out = new ArrayList<>();
    JsonNode n = spec instanceof JsonNode ? (JsonNode) spec : FlightSinkClient.JSON.valueToTree(spec);
    if (n != null && n.isArray()) {
      for (JsonNode f : n) {
        String transform = f.path("transform").asText("");
        out.add((transform.isEmpty() ? "identity" : transform) + "(" + f.path("column").asText() + ")");
      }
    }
    return out;
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
}
