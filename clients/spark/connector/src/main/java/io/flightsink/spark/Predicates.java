package io.flightsink.spark;

import java.time.Instant;
import java.time.LocalDate;
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
 * not pushed. Translated: comparisons between a top-level column and a boolean, integer,
 * floating-point (finite), string, date or timestamp literal (timestamps as RFC 3339 UTC strings);
 * {@code <=>} with a non-null literal (as {@code =}) or a null one (as {@code is_null}); IN lists;
 * null tests; AND (the translatable side alone when the other is not), OR and NOT of translatable
 * predicates. Everything else (string patterns, nested columns, decimals, expressions over
 * columns) is left to Spark.
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
        return op("and", "args", List.of(l, r));
      }
      case "OR": {
        Map<String, Object> l = translate((Predicate) c[0]);
        Map<String, Object> r = translate((Predicate) c[1]);
        return l == null || r == null ? null : op("or", "args", List.of(l, r));
      }
      case "NOT": {
        Map<String, Object> inner = strict((Predicate) c[0]);
        return inner == null ? null : op("not", "args", List.of(inner));
      }
      case "IS_NULL":
      case "IS_NOT_NULL": {
        String col = column(c[0]);
        if (col == null) return null;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("op", name.equals("IS_NULL") ? "is_null" : "is_not_null");
        m.put("column", col);
        return m;
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
      return l == null || r == null ? null : op("and", "args", List.of(l, r));
    }
    if (p.name().equals("OR")) {
      Map<String, Object> l = strict((Predicate) p.children()[0]);
      Map<String, Object> r = strict((Predicate) p.children()[1]);
      return l == null || r == null ? null : op("or", "args", List.of(l, r));
    }
    if (p.name().equals("NOT")) {
      return translate(p);
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
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("op", "is_null");
        m.put("column", col);
        return m;
      }
      return null; // a comparison with null is never true; Spark folds it anyway
    }
    Object v = value(lit);
    if (v == NO) return null;
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("op", op.equals("<>") ? "!=" : op.equals("<=>") ? "=" : op);
    m.put("column", col);
    m.put("value", v);
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
      double d = ((Number) v).doubleValue();
      return Double.isFinite(d) ? v : NO;
    }
    if (t instanceof StringType) {
      // A non-default collation compares differently from the server's bytewise order.
      if (!((StringType) t).isUTF8BinaryCollation()) return NO;
      return v.toString();
    }
    if (t instanceof DateType) {
      return LocalDate.ofEpochDay(((Number) v).longValue()).toString();
    }
    if (t instanceof TimestampType || t instanceof TimestampNTZType) {
      long micros = ((Number) v).longValue();
      return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          Math.floorMod(micros, 1_000_000L) * 1000L).toString();
    }
    return NO;
  }

  private static Map<String, Object> op(String op, String key, Object val) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("op", op);
    m.put(key, val);
    return m;
  }
}
