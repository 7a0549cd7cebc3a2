package io.flightsink.spark;

import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Spark V2 predicates as the protocol's predicate JSON ({@code docs/protocol.md}, DoAction:
 * {@code =}, {@code !=}, {@code <}, {@code <=}, {@code >}, {@code >=}, {@code in}, {@code
 * is_null}, {@code is_not_null}, {@code and}, {@code or}, {@code not}), or null for one that is
 * not pushed.
 *
 * <p>The contract: a translation {@code T} of a predicate {@code P} is true for every row for
 * which Spark finds {@code P} true, and false for every row for which Spark finds {@code P}
 * false (where {@code P} is null, {@code T} may be anything). Three-valued AND, OR and NOT keep
 * that, so NOT of a translation is a translation of the NOT. The one relaxation is a top-level
 * AND pushing its translatable side alone (true for at least every row {@code P} keeps), which
 * is never done under a NOT. Spark evaluates every predicate again after the scan, so the
 * server's filter only cuts rows Spark would drop.
 *
 * <p>Translated leaves: comparisons between a top-level column and a boolean, integer, string
 * (binary collation), date or timestamp literal of years 0000 to 9999 (timestamps as RFC 3339
 * UTC); {@code =} and {@code <>} with a finite float/double literal (sent as the exact double:
 * the server compares float columns as doubles), but no {@code <}, {@code <=}, {@code >},
 * {@code >=} on floats (Spark orders NaN above every number, the server below); {@code <=>}
 * as {@code is_not_null AND =} (a null literal: {@code is_null}); IN lists (a null in the list
 * dropped: it never makes the IN true); null tests. Everything else (string patterns, nested
 * columns, decimals, expressions over columns) is left to Spark. A filter the server would refuse
 * as too large ({@link Bounds}) is not pushed either.
 */
final class Predicates {
  private Predicates() {}

  /** Marker for a literal that cannot be pushed. */
  private static final Object NO = new Object();

  static Map<String, Object> translate(Predicate p) {
    String name = p.name();
    Expression[] c = p.children();
    switch (name) {
      case "AND": {
        Map<String, Object> l = translate((Predicate) c[0]);
        Map<String, Object> r = translate((Predicate) c[1]);
        if (l == null) return r;
        if (r == null) return l;
        return nary("and", l, r);
      }
      case "OR": {
        Map<String, Object> l = translate((Predicate) c[0]);
        Map<String, Object> r = translate((Predicate) c[1]);
        return l == null || r == null ? null : nary("or", l, r);
      }
      case "NOT": {
        Map<String, Object> inner = strict((Predicate) c[0]);
        return inner == null ? null : op("not", "args", List.of(inner));
      }
      case "IS_NULL":
      case "IS_NOT_NULL": {
        String col = column(c[0]);
        if (col == null) return null;
        return leaf(name.equals("IS_NULL") ? "is_null" : "is_not_null", col);
      }
      case "IN": {
        String col = column(c[0]);
        if (col == null || c.length < 2) return null;
        List<Object> values = new ArrayList<>();
        for (int i = 1; i < c.length; i++) {
          if (!(c[i] instanceof Literal)) return null;
          Literal<?> lit = (Literal<?>) c[i];
          if (lit.value() == null) continue; // x IN (.., NULL): a null never makes it true
          Object v = value(lit);
          if (v == NO) return null;
          values.add(v);
        }
        if (values.isEmpty()) return null;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("op", "in");
        m.put("column", col);
        m.put("values", values);
        return m;
      }
      case "=":
      case "<>":
      case "<=>":
      case "<":
      case "<=":
      case ">":
      case ">=":
        return comparison(name, c);
      default:
        return null;
    }
  }

  /** Like translate, but an AND must translate whole (under a NOT, half of it is not sound). */
  private static Map<String, Object> strict(Predicate p) {
    if (p.name().equals("AND")) {
      Map<String, Object> l = strict((Predicate) p.children()[0]);
      Map<String, Object> r = strict((Predicate) p.children()[1]);
      return l == null || r == null ? null : nary("and", l, r);
    }
    if (p.name().equals("OR")) {
      Map<String, Object> l = strict((Predicate) p.children()[0]);
      Map<String, Object> r = strict((Predicate) p.children()[1]);
      return l == null || r == null ? null : nary("or", l, r);
    }
    return translate(p);
  }

  private static Map<String, Object> comparison(String name, Expression[] c) {
    if (c.length != 2) return null;
    String col = column(c[0]);
    Expression other = c[1];
    String op = name;
    if (col == null) {
      col = column(c[1]);
      other = c[0];
      switch (name) { // literal OP column  ->  column OP' literal
        case "<": op = ">"; break;
        case "<=": op = ">="; break;
        case ">": op = "<"; break;
        case ">=": op = "<="; break;
        default: break;
      }
    }
    if (col == null || !(other instanceof Literal)) return null;
    Literal<?> lit = (Literal<?>) other;
    if (lit.value() == null) {
      if (op.equals("<=>")) {
        return leaf("is_null", col);
      }
      return null; // a comparison with null is never true; Spark folds it anyway
    }
    Object v = value(lit);
    if (v == NO) return null;
    boolean floating = lit.dataType() instanceof FloatType || lit.dataType() instanceof DoubleType;
    if (floating && !op.equals("=") && !op.equals("<>") && !op.equals("<=>")) {
      return null; // Spark orders NaN above every number, the server below every number
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("op", op.equals("<>") ? "!=" : op.equals("<=>") ? "=" : op);
    m.put("column", col);
    m.put("value", v);
    if (op.equals("<=>")) {
      // x <=> v is false (not null) for a null x; "x = v" alone would be unknown there, and so
      // would its NOT.
      return nary("and", leaf("is_not_null", col), m);
    }
    return m;
  }

  private static String column(Expression e) {
    if (e instanceof NamedReference) {
      String[] names = ((NamedReference) e).fieldNames();
      return names.length == 1 ? names[0] : null;
    }
    return null;
  }

  private static Object value(Literal<?> lit) {
    Object v = lit.value();
    DataType t = lit.dataType();
    if (t instanceof BooleanType || t instanceof ByteType || t instanceof ShortType
        || t instanceof IntegerType || t instanceof LongType) {
      return v;
    }
    if (t instanceof FloatType || t instanceof DoubleType) {
      // The exact double of a float literal: the server compares a float column as doubles.
      double d = ((Number) v).doubleValue();
      return Double.isFinite(d) ? (Object) d : NO;
    }
    if (t instanceof StringType) {
      // A non-default collation compares differently from the server's bytewise order.
      if (!((StringType) t).isUTF8BinaryCollation()) return NO;
      return v.toString();
    }
    if (t instanceof DateType) {
      LocalDate d = LocalDate.ofEpochDay(((Number) v).longValue());
      return fourDigitYear(d.getYear()) ? d.toString() : NO;
    }
    if (t instanceof TimestampType || t instanceof TimestampNTZType) {
      long micros = ((Number) v).longValue();
      Instant i = Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          Math.floorMod(micros, 1_000_000L) * 1000L);
      return fourDigitYear(i.atOffset(ZoneOffset.UTC).getYear()) ? i.toString() : NO;
    }
    return NO;
  }

  /** Whether a year prints as the four digits RFC 3339 (and the server's parser) takes. */
  private static boolean fourDigitYear(int year) {
    return year >= 0 && year <= 9999;
  }

  private static Map<String, Object> leaf(String op, String column) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("op", op);
    m.put("column", column);
    return m;
  }

  /** {@code op} ("and"/"or") of l and r, an argument of the same op flattened into it. */
  static Map<String, Object> nary(String op, Map<String, Object> l, Map<String, Object> r) {
    List<Object> args = new ArrayList<>();
    for (Map<String, Object> a : List.of(l, r)) {
      if (op.equals(a.get("op"))) {
        args.addAll((List<?>) a.get("args"));
      } else {
        args.add(a);
      }
    }
    return op(op, "args", args);
  }

  private static Map<String, Object> op(String op, String key, Object val) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("op", op);
    m.put(key, val);
    return m;
  }

  /**
   * The server's bounds on one predicate ({@code engine/expr/bounds.go}: MaxPredicateJSONBytes,
   * MaxPredicateDepth, MaxPredicateNodes), counted the server's way: a leaf at the top is depth 1,
   * each "and"/"or"/"not" adds a level; every node counts one and every "in" value one more. A
   * filter beyond them would fail the whole read ({@code INVALID_PREDICATE}), so it is not pushed.
   */
  static final class Bounds {
    static final int MAX_JSON_BYTES = 1 << 20;
    static final int MAX_DEPTH = 100;
    static final int MAX_NODES = 10_000;

    private Bounds() {}

    static boolean fit(Map<String, Object> filter) {
      return depth(filter) <= MAX_DEPTH && nodes(filter) <= MAX_NODES
          && FlightSinkClient.json(filter).length <= MAX_JSON_BYTES;
    }

    private static int depth(Object node) {
      int deepest = 0;
      for (Object a : args(node)) {
        deepest = Math.max(deepest, depth(a));
      }
      return 1 + deepest;
    }

    private static long nodes(Object node) {
      Object values = ((Map<?, ?>) node).get("values");
      long n = 1 + (values == null ? 0 : ((List<?>) values).size());
      for (Object a : args(node)) {
        n += nodes(a);
      }
      return n;
    }

    private static List<?> args(Object node) {
      Object a = ((Map<?, ?>) node).get("args");
      return a == null ? List.of() : (List<?>) a;
    }
  }
}
