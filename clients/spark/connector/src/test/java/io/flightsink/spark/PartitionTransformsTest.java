package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.Transform;
import org.junit.jupiter.api.Test;

/**
 * The option {@code partitionBy} (Iceberg's Spark DDL syntax) and Spark's partitioning to the
 * server's {@code partition_by}, without a server.
 */
class PartitionTransformsTest {
  private static List<String> spec(String ddl) {
    return PartitionTransforms.fields(PartitionTransforms.spec(PartitionTransforms.parse(ddl)));
  }

  private static FlightSinkOptions opts(String partitionBy) {
    Map<String, String> m = new HashMap<>();
    m.put("uri", "grpc://127.0.0.1:8815");
    m.put("table", "events");
    if (partitionBy != null) {
      m.put("partitionBy", partitionBy);
    }
    return FlightSinkOptions.parse(m);
  }

  private static String optionError(String partitionBy) {
    return assertThrows(IllegalArgumentException.class, () -> opts(partitionBy)).getMessage();
  }

  @Test
  void everyTransformOfIcebergsDdl() {
    assertEquals(List.of("day(ts)", "identity(country)", "bucket[16](id)", "truncate[4](name)", "hour(ts)",
        "month(ts)", "year(ts)"),
        spec("days(ts), country, bucket(16, id), truncate(4, name), hours(ts), months(ts), years(ts)"));
    // Iceberg's aliases and singular names, any case, spaces anywhere, width after the column.
    assertEquals(List.of("day(ts)", "hour(ts)", "day(ts)", "year(ts)", "truncate[10](id)", "identity(c)"),
        spec(" date(ts),date_hour( ts ) ,DAY(ts),year(ts), truncate(id,10), identity(c) "));
    // Backquoted names: spaces, commas and doubled backquotes inside.
    assertEquals(List.of("day(event time)", "identity(a,b)", "bucket[8](x`y)"),
        spec("days(`event time`), `a,b`, bucket(8, `x``y`)"));
  }

  @Test
  void theOptionBecomesTheCreateObject() {
    FlightSinkOptions o = opts("days(ts), bucket(16, id)");
    assertEquals("{partition_by=[{column=ts, transform=day}, {column=id, transform=bucket[16]}]}",
        o.createValue().toString());
    Map<String, String> keyed = new HashMap<>(o.raw());
    keyed.put("primaryKey", "id");
    assertEquals("{primary_key=[id], partition_by=[{column=ts, transform=day}, {column=id, transform=bucket[16]}]}",
        FlightSinkOptions.parse(keyed).createValue().toString());
    assertEquals(Boolean.TRUE, opts(null).createValue());
    assertEquals(List.of(), opts(null).partitionBy());
  }

  @Test
  void sparksPartitioningAndTheOptionAgreeOrFail() throws Exception {
    Transform[] country = {Expressions.identity("country")};
    FlightSinkOptions spark = opts(null).withPartitioning(country);
    assertEquals(List.of("identity(country)"), PartitionTransforms.fields(spark.partitionBy()));
    assertSame(spark.partitionBy().size(), 1);
    // A write's own options laid over keep Spark's partitioning.
    assertEquals(spark.partitionBy(), spark.with(Map.of("mergeSchema", "true")).partitionBy());
    // Serialized to the tasks with it.
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(buf)) {
      out.writeObject(spark);
    }
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(buf.toByteArray()))) {
      assertEquals(spark.createValue(), ((FlightSinkOptions) in.readObject()).createValue());
    }
    assertEquals(List.of("identity(country)"),
        PartitionTransforms.fields(opts("country").withPartitioning(country).partitionBy()));
    String msg = assertThrows(IllegalArgumentException.class,
        () -> opts("days(ts)").withPartitioning(country)).getMessage();
    assertTrue(msg.contains("[identity(country)]") && msg.contains("[day(ts)]"), msg);
    // clusterBy's transform has no counterpart.
    msg = assertThrows(IllegalArgumentException.class, () -> opts(null).withPartitioning(
        new Transform[] {Expressions.apply("cluster_by", Expressions.column("a"), Expressions.column("b"))}))
        .getMessage();
    assertTrue(msg.contains("cluster_by") && msg.contains("one column"), msg);
  }

  @Test
  void malformedTextSaysWhere() {
    String[][] cases = {
        {"", "no partition field"},
        {"   ", "no partition field"},
        {"days(ts", "expected ',' at the end"},
        {"days(ts))", "expected ',', not ')' at position 9"},
        {"days(ts),", "expected a column or function name at the end"},
        {", days(ts)", "expected a column or function name, not ','"},
        {"days()", "days() needs a column"},
        {"bucket(16 id)", "expected ',', not 'i'"},
        {"days(`ts)", "unclosed backquote at position 6"},
        {"`f`(ts)", "a function name must be a plain word"},
        {"bucket(99999999999, id)", "not an integer: 99999999999"},
        {"days ts", "expected ',', not 't'"},
        {"days(ts) + 1", "expected ',', not '+'"},
    };
    for (String[] c : cases) {
      String msg = optionError(c[0]);
      assertTrue(msg.startsWith("flight-sink option partitionBy: ") && msg.contains(c[1])
          && msg.contains("Iceberg's Spark DDL"), c[0] + " -> " + msg);
    }
  }

  @Test
  void transformsWithoutAServerCounterpartAreRefusedNamingThem() {
    String[][] cases = {
        {"bucket(id)", "bucket(id): bucket needs a positive integer"},
        {"bucket(0, id)", "bucket needs a positive integer"},
        {"truncate(-3, s)", "truncate needs a positive integer"},
        {"days(3, ts)", "days takes no number"},
        {"zorder(a)", "the server's transforms are identity, years"},
        {"days(a, b)", "expected one column and at most one integer"},
        {"bucket(4, 8, id)", "expected one column and at most one integer"},
        {"days(s.ts)", "top-level columns only"},
        {"a.b", "top-level columns only"},
        {"days(16)", "it names no column"},
    };
    for (String[] c : cases) {
      String msg = optionError(c[0]);
      assertTrue(msg.startsWith("flight-sink option partitionBy: ") && msg.contains(c[1]), c[0] + " -> " + msg);
    }
  }
}
