package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.And;
import org.apache.spark.sql.connector.expressions.filter.Not;
import org.apache.spark.sql.connector.expressions.filter.Or;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** Spark predicates to the protocol's predicate JSON, without a server. */
class PredicatesTest {
  private static final NamedReference ID = Expressions.column("id");
  private static final NamedReference X = Expressions.column("x");

  private static Expression lit(Object v, DataType t) {
    return new LiteralValue<>(v, t);
  }

  private static Expression five() {
    return lit(5L, DataTypes.LongType);
  }

  private static Predicate p(String name, Expression... children) {
    return new Predicate(name, children);
  }

  private static String json(Predicate pred) {
    Map<String, Object> t = Predicates.translate(pred);
    return t == null ? null : new String(FlightSinkClient.json(t), StandardCharsets.UTF_8);
  }

  @Test
  void predicateTranslation() {
    Predicate lt = p("<", five(), ID);
    assertEquals("{\"op\":\">\",\"column\":\"id\",\"value\":5}", json(lt));
    Predicate like = p("STARTS_WITH", ID, five());
    assertNull(Predicates.translate(like));
    Predicate and = new And(lt, like);
    assertEquals(Predicates.translate(lt), Predicates.translate(and), "AND pushes its translatable side");
    Predicate not = new Not(and);
    assertNull(Predicates.translate(not), "NOT of a half-translated AND is not pushed");
  }

  @Test
  void comparisonsAndNullTests() {
    assertEquals("{\"op\":\"!=\",\"column\":\"id\",\"value\":5}", json(p("<>", ID, five())));
    assertEquals("{\"op\":\"<=\",\"column\":\"id\",\"value\":5}", json(p(">=", five(), ID)));
    assertEquals("{\"op\":\"and\",\"args\":[{\"op\":\"is_not_null\",\"column\":\"id\"},"
        + "{\"op\":\"=\",\"column\":\"id\",\"value\":5}]}", json(p("<=>", ID, five())));
    assertEquals("{\"op\":\"is_null\",\"column\":\"id\"}", json(p("<=>", ID, lit(null, DataTypes.LongType))));
    assertNull(json(p("=", ID, lit(null, DataTypes.LongType))), "a comparison with null is not pushed");
    assertEquals("{\"op\":\"is_not_null\",\"column\":\"id\"}", json(p("IS_NOT_NULL", ID)));
    NamedReference nested = new NamedReference() {
      @Override
      public String[] fieldNames() {
        return new String[] {"s", "a"};
      }
    };
    assertNull(json(p("=", nested, five())), "a nested column is not pushed");
    assertNull(json(p("=", ID, X)), "a comparison of two columns is not pushed");
  }

  @Test
  void floatsAreComparedForEqualityOnly() {
    Expression half = lit(0.5f, DataTypes.FloatType);
    assertEquals("{\"op\":\"=\",\"column\":\"x\",\"value\":0.5}", json(p("=", X, half)));
    assertNull(json(p("<", X, half)), "Spark and the server order NaN differently");
    assertNull(json(p("=", X, lit(Double.NaN, DataTypes.DoubleType))));
    assertNull(json(p("=", X, lit(Double.POSITIVE_INFINITY, DataTypes.DoubleType))));
  }

  @Test
  void literalsOfEachType() {
    assertEquals("{\"op\":\"=\",\"column\":\"x\",\"value\":\"k1\"}",
        json(p("=", X, lit(UTF8String.fromString("k1"), DataTypes.StringType))));
    assertEquals("{\"op\":\">=\",\"column\":\"x\",\"value\":\"2024-03-03\"}",
        json(p(">=", X, lit((int) java.time.LocalDate.parse("2024-03-03").toEpochDay(), DataTypes.DateType))));
    assertEquals("{\"op\":\">\",\"column\":\"x\",\"value\":\"2024-01-01T00:00:02.500Z\"}",
        json(p(">", X, lit(1_704_067_202_500_000L, DataTypes.TimestampType))));
    assertNull(json(p(">", X, lit(-70_000_000_000_000_000L, DataTypes.TimestampType))),
        "a year before 0000 does not print as RFC 3339");
    assertNull(json(p("=", X, lit(new org.apache.spark.sql.types.Decimal(), DataTypes.createDecimalType(10, 2)))),
        "decimals are left to Spark");
    assertEquals("{\"op\":\"=\",\"column\":\"x\",\"value\":true}", json(p("=", X, lit(true, DataTypes.BooleanType))));
  }

  @Test
  void inListsDropNulls() {
    assertEquals("{\"op\":\"in\",\"column\":\"id\",\"values\":[5,7]}",
        json(p("IN", ID, five(), lit(null, DataTypes.LongType), lit(7L, DataTypes.LongType))));
    assertNull(json(p("IN", ID, lit(null, DataTypes.LongType))), "IN (NULL) is never true: left to Spark");
    assertNull(json(p("IN", ID, five(), X)), "a column in the list is not pushed");
  }

  @Test
  void andOrNot() {
    Predicate a = p("=", ID, five());
    Predicate b = p("IS_NULL", X);
    Predicate c = p(">", ID, lit(9L, DataTypes.LongType));
    assertEquals("{\"op\":\"and\",\"args\":[{\"op\":\"=\",\"column\":\"id\",\"value\":5},"
        + "{\"op\":\"is_null\",\"column\":\"x\"},{\"op\":\">\",\"column\":\"id\",\"value\":9}]}",
        json(new And(new And(a, b), c)), "nested ANDs flatten");
    assertNull(json(new Or(a, p("STARTS_WITH", X, five()))), "an OR needs both sides");
    assertEquals("{\"op\":\"not\",\"args\":[{\"op\":\"or\",\"args\":[{\"op\":\"=\",\"column\":\"id\",\"value\":5},"
        + "{\"op\":\"is_null\",\"column\":\"x\"}]}]}", json(new Not(new Or(a, b))));
    assertNull(json(new Not(new Or(a, new And(b, p("STARTS_WITH", X, five()))))),
        "a half AND under a NOT is not pushed at any depth");
  }

  @Test
  void boundsCountTheServersWay() {
    Map<String, Object> leaf = Predicates.translate(p("=", ID, five()));
    assertTrue(Predicates.Bounds.fit(leaf));
    Map<String, Object> deep = leaf;
    for (int i = 1; i < Predicates.Bounds.MAX_DEPTH; i++) {
      deep = Map.of("op", "not", "args", List.of(deep));
    }
    assertTrue(Predicates.Bounds.fit(deep), "depth " + Predicates.Bounds.MAX_DEPTH);
    assertFalse(Predicates.Bounds.fit(Map.of("op", "not", "args", List.of(deep))), "one level more");
    List<Object> values = new ArrayList<>();
    for (long i = 0; i < Predicates.Bounds.MAX_NODES - 1; i++) {
      values.add(i);
    }
    assertTrue(Predicates.Bounds.fit(Map.of("op", "in", "column", "id", "values", values)));
    values.add(-1L);
    assertFalse(Predicates.Bounds.fit(Map.of("op", "in", "column", "id", "values", values)), "one node more");
  }
}
