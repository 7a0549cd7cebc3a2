package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.util.ArrowUtils;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * What the connector reads and writes equals what Spark has, whatever the values: nested types
 * read back whole, pushed filters that never change a result, batch writes that land all or
 * nothing, batches within the server's message size, options that are checked. Real Spark
 * ({@code local[2,2]}: a failed task is retried once) against a real server that describes every
 * fragment as its own endpoint.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FlightSinkCorrectnessTest {
  private TestServer server;
  private SparkSession spark;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start("--endpoint-bytes", "1");
    spark = SparkSession.builder()
        .master("local[2,2]")
        .appName("flight-sink-correctness-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate();
    spark.sparkContext().setLogLevel("ERROR");
  }

  @AfterAll
  void stop() throws Exception {
    if (spark != null) {
      spark.stop();
    }
    if (server != null) {
      server.close();
    }
  }

  private Dataset<Row> read(String table) {
    return spark.read().format("flight-sink").option("uri", server.uri()).option("table", table).load();
  }

  private void append(Dataset<Row> df, String table) {
    df.write().format("flight-sink").option("uri", server.uri()).option("table", table).mode("append").save();
  }

  /** The number of Arrow record batches each endpoint of the table streams, over Flight. */
  private List<Integer> batchesPerEndpoint(String table) throws Exception {
    FlightSinkClient c = FlightSinkClient.get(server.uri(), null);
    FlightInfo info = c.flightInfo(Map.of("table", table));
    List<Integer> out = new ArrayList<>();
    for (FlightEndpoint ep : info.getEndpoints()) {
      int n = 0;
      try (FlightSinkClient.Get s = c.doGet(ep.getTicket().getBytes())) {
        while (s.next()) {
          n++;
        }
      }
      out.add(n);
    }
    return out;
  }

  // -- nested types -----------------------------------------------------------------------------

  /**
   * Every Spark type the connector writes, structs in lists in maps, nulls at every level (the
   * column, a map value, a list element, a struct, a struct's field), written and read back equal:
   * a few rows (one Arrow batch an endpoint) and 20,000 rows in one partition (several Arrow
   * batches in one endpoint's stream, each read while Spark holds the one before).
   */
  @Test
  void everyTypeNestedAndNullRoundTrips() throws Exception {
    String select = "SELECT id, IF(id % 11 = 0, NULL, id % 2 = 0) AS b, CAST(id % 128 AS TINYINT) AS i8, "
        + "CAST(id % 30000 AS SMALLINT) AS i16, IF(id % 13 = 0, NULL, CAST(id AS INT)) AS i32, id * 7 AS i64, "
        + "CAST(id * 1.5 AS FLOAT) AS f32, CASE id % 5 WHEN 0 THEN CAST('NaN' AS DOUBLE) WHEN 1 THEN -0.0D "
        + "WHEN 2 THEN CAST('-Infinity' AS DOUBLE) ELSE id * 2.25D END AS f64, "
        + "CAST(id * 1.25 AS DECIMAL(10, 2)) AS dec, CAST(id AS DECIMAL(38, 0)) AS dec38, "
        + "IF(id % 3 = 0, NULL, CONCAT('s', CAST(id AS STRING))) AS s, CAST(CONCAT('b', CAST(id AS STRING)) AS BINARY) AS bin, "
        + "DATE_ADD(DATE'0001-01-01', CAST(id * 97 AS INT)) AS d, "
        + "TIMESTAMP_MICROS(id * 1000003 - 5000000000) AS ts, TIMESTAMP_NTZ'2024-01-01 12:00:00' AS ntz, "
        + "IF(id % 7 = 0, NULL, ARRAY(CAST(id AS INT), NULL, 2)) AS arr, "
        + "IF(id % 5 = 0, NULL, NAMED_STRUCT('a', IF(id % 2 = 0, NULL, CAST(id AS INT)), 'b', CAST(id AS STRING), "
        + "  'inner', IF(id % 3 = 0, NULL, NAMED_STRUCT('x', id * 0.5D, 'y', ARRAY('p', NULL))))) AS st, "
        + "IF(id % 9 = 0, NULL, MAP('k', CAST(id AS INT), 'n', NULL)) AS m, "
        + "IF(id % 4 = 0, NULL, MAP(CONCAT('key', CAST(id % 3 AS STRING)), IF(id % 6 = 1, NULL, ARRAY("
        + "  NAMED_STRUCT('a', CAST(id AS INT), 'c', IF(id % 2 = 0, NULL, ARRAY(NAMED_STRUCT('x', id * 1.0D), "
        + "    CAST(NULL AS STRUCT<x: DOUBLE>)))), "
        + "  CAST(NULL AS STRUCT<a: INT, c: ARRAY<STRUCT<x: DOUBLE>>>), "
        + "  NAMED_STRUCT('a', CAST(NULL AS INT), 'c', ARRAY(NAMED_STRUCT('x', CAST(NULL AS DOUBLE)))))))) AS deep ";
    for (long rows : new long[] {6, 20_000}) {
      String table = "nested_rt_" + rows;
      Dataset<Row> df = spark.sql(select + "FROM RANGE(0, " + rows + ", 1, " + (rows > 100 ? 1 : 2) + ")");
      append(df, table);
      if (rows > 100) {
        List<Integer> batches = batchesPerEndpoint(table);
        assertTrue(batches.stream().anyMatch(n -> n > 1), "an endpoint of several Arrow batches: " + batches);
      }
      Dataset<Row> back = read(table);
      assertEquals(df.schema().simpleString(), back.schema().simpleString());
      // Row.equals compares binary by content, floats with NaN = NaN, maps and lists by value.
      List<Row> want = df.orderBy("id").collectAsList();
      List<Row> got = back.orderBy("id").collectAsList();
      assertEquals(want.size(), got.size());
      for (int i = 0; i < want.size(); i++) {
        assertEquals(want.get(i), got.get(i), "row " + i + " of " + table);
      }
    }
  }

  // -- filter pushdown --------------------------------------------------------------------------

  /**
   * Every pushed operator against Spark's own evaluation (the same query with {@code
   * pushFilters=false}) over nulls, NaN, ±0.0, ±Infinity, dates and timestamps beyond the years
   * 0000..9999, and a filter larger than the server takes.
   */
  @Test
  void pushedFiltersNeverChangeResults() {
    String table = "pushdown_semantics";
    Dataset<Row> df = spark.sql("SELECT id, IF(id % 6 = 0, NULL, CAST(id % 10 AS INT)) AS i, "
        + "CASE id % 9 WHEN 0 THEN CAST('NaN' AS DOUBLE) WHEN 1 THEN 0.0D WHEN 2 THEN -0.0D "
        + "WHEN 3 THEN CAST('Infinity' AS DOUBLE) WHEN 4 THEN CAST('-Infinity' AS DOUBLE) WHEN 5 THEN NULL "
        + "ELSE (id - 20) * 0.5D END AS f, "
        + "CASE id % 5 WHEN 0 THEN CAST('NaN' AS FLOAT) WHEN 1 THEN CAST(1.1 AS FLOAT) WHEN 2 THEN NULL "
        + "ELSE CAST(id AS FLOAT) END AS g, "
        + "CASE id % 4 WHEN 0 THEN DATE_ADD(DATE'0001-01-01', -800000) WHEN 1 THEN DATE_ADD(DATE'9999-12-31', 800000) "
        + "WHEN 2 THEN NULL ELSE DATE_ADD(DATE'2000-01-01', CAST(id AS INT)) END AS d, "
        + "CASE id % 4 WHEN 0 THEN TIMESTAMP_SECONDS(-100000000000) WHEN 1 THEN TIMESTAMP_SECONDS(300000000000) "
        + "WHEN 2 THEN NULL ELSE TIMESTAMP_SECONDS(946684800 + id) END AS ts, "
        + "IF(id % 7 = 0, NULL, CHR(97 + CAST(id % 4 AS INT))) AS s FROM RANGE(0, 60, 1, 3)");
    append(df, table);
    List<String> wheres = new ArrayList<>(List.of(
        "f > 0", "f >= 0", "f < 0", "f <= 0", "NOT (f > 0)", "NOT (f <= 0)", "f = 0", "f = -0.0",
        "f != 0", "NOT (f = 0)", "f <=> 0", "NOT (f <=> 0)", "f IN (0.0, 1.5)", "NOT (f IN (0.0, 1.5))",
        "f > -1e308", "f < CAST('Infinity' AS DOUBLE)", "g > 1", "g = CAST(1.1 AS FLOAT)", "g != CAST(1.1 AS FLOAT)",
        "i <=> 5", "NOT (i <=> 5)", "i <=> NULL", "NOT (i <=> NULL)", "NOT (i = 5)", "i != 5",
        "i IN (1, 2, NULL)", "NOT (i IN (1, 2, NULL))", "NOT (i IN (1, 2))", "i > 3 OR s = 'a'",
        "NOT (i > 3 AND s = 'a')", "NOT (i > 3 OR s IS NULL)", "(i > 3 AND f > 0) OR s = 'b'",
        "NOT (s < 'b')", "s >= 'b'", "s IS NULL", "NOT (s IS NOT NULL)",
        "d > DATE'2000-01-10'", "d < DATE'0001-01-02'", "d >= DATE'9999-12-31'", "NOT (d > DATE'2000-01-10')",
        "d > DATE_ADD(DATE'0001-01-01', -900000)", "d < DATE_ADD(DATE'9999-12-31', 900000)",
        "ts > TIMESTAMP'2000-01-01 00:00:10'", "ts <= TIMESTAMP'9999-12-31 23:59:59.999999'",
        "ts > TIMESTAMP_SECONDS(-200000000000)", "ts < TIMESTAMP_SECONDS(400000000000)",
        "NOT (ts < TIMESTAMP'2000-01-01 00:00:10')"));
    // Larger than the server's predicate bounds: 12,000 IN values.
    wheres.add("id IN (" + LongStream.range(0, 12_000).mapToObj(Long::toString).collect(Collectors.joining(",")) + ")");
    Dataset<Row> pushing = read(table);
    Dataset<Row> kept = spark.read().format("flight-sink").option("uri", server.uri()).option("table", table)
        .option("pushFilters", "false").load();
    List<String> differ = new ArrayList<>();
    for (String w : wheres) {
      List<Long> want = ids(kept.where(w));
      try {
        List<Long> got = ids(pushing.where(w));
        if (!want.equals(got)) {
          differ.add("WHERE " + w.substring(0, Math.min(w.length(), 60)) + ": " + got.size() + " rows, Spark's " + want.size());
        }
      } catch (RuntimeException e) {
        differ.add("WHERE " + w.substring(0, Math.min(w.length(), 60)) + ": " + e.getMessage().split("\n")[0]);
      }
    }
    assertEquals(List.of(), differ);
    // What is exact is still pushed.
    assertTrue(pushing.where("f = 0").queryExecution().executedPlan().toString().contains("filter="));
    assertTrue(pushing.where("NOT (i <=> 5)").queryExecution().executedPlan().toString().contains("is_not_null"));
  }

  private static List<Long> ids(Dataset<Row> df) {
    return df.select("id").collectAsList().stream().map(r -> r.getLong(0)).sorted().collect(Collectors.toList());
  }

  // -- MemWAL reads -----------------------------------------------------------------------------

  /**
   * Upserts of 200 keys into a keyed table with three MemWAL shards, every epoch rewriting every
   * key with v = the epoch's number (so each epoch has a part in every shard), put by one thread
   * (with a {@code flush_memwal} every few epochs: generations and folds under the reads) while
   * Spark reads the table (GetFlightInfo, then one DoGet per endpoint) in a loop, unfiltered and
   * with a filter pushed on the key and on v. Every read is one epoch whole: each key it selects
   * exactly once, all with the same v. No read goes back: an epoch a read returned had landed in
   * every shard before that read's cut, so every later read returns it or a newer one.
   */
  @Test
  void memWalReadsNeverSeeHalfAnEpoch() throws Exception {
    String table = "memwal_whole_epochs";
    int keys = 200;
    FlightSinkClient c = FlightSinkClient.get(server.uri(), null);
    c.action("create_table", Map.of("table", table,
        "schema", List.of(Map.of("name", "id", "type", "int64"), Map.of("name", "v", "type", "int64")),
        "primary_key", List.of("id"), "memwal", Map.of("shards", 3)));
    putUpsertEpoch(table, keys, 0);
    assertTrue(read(table).where("id < 100").queryExecution().executedPlan().toString().contains("filter="),
        "the key filter is pushed");
    assertTrue(read(table).where("v >= 0").queryExecution().executedPlan().toString().contains("filter="),
        "the value filter is pushed");

    AtomicBoolean readsDone = new AtomicBoolean();
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try {
      Future<Long> writer = pool.submit(() -> {
        long e = 0;
        while (!readsDone.get()) {
          putUpsertEpoch(table, keys, ++e);
          if (e % 5 == 0) {
            c.action("flush_memwal", Map.of("table", table));
          }
        }
        return e;
      });
      long last = 0;
      try {
        for (int i = 0; i < 30 && !writer.isDone(); i++) {
          String where = i % 3 == 1 ? "id < 100" : i % 3 == 2 ? "v >= " + last : null;
          Dataset<Row> df = where == null ? read(table) : read(table).where(where);
          List<Long> ids = new ArrayList<>();
          TreeSet<Long> values = new TreeSet<>();
          for (Row r : df.select("id", "v").collectAsList()) {
            ids.add(r.getLong(0));
            values.add(r.getLong(1));
          }
          ids.sort(null);
          String what = "read " + i + (where == null ? "" : " WHERE " + where);
          assertEquals(LongStream.range(0, "id < 100".equals(where) ? 100 : keys).boxed().collect(Collectors.toList()),
              ids, what + ": every selected key once");
          assertEquals(1, values.size(), what + ": the rows of one epoch, not " + values);
          assertTrue(values.first() >= last, what + ": epoch " + values.first() + " after a read of epoch " + last);
          last = values.first();
        }
      } finally {
        readsDone.set(true);
      }
      long lastEpoch = writer.get(); // a failed put fails the test here
      List<Long> values = read(table).select("v").collectAsList().stream().map(r -> r.getLong(0))
          .distinct().collect(Collectors.toList());
      assertEquals(List.of(lastEpoch), values, "a read after the last acknowledgement returns the last epoch");
    } finally {
      pool.shutdownNow();
    }
  }

  /** Puts epoch e of query "upserter" as one DoPut: keys 0..keys-1 upserted with v = e. */
  private void putUpsertEpoch(String table, int keys, long e) {
    Schema schema = new Schema(List.of(Field.nullable("id", new ArrowType.Int(64, true)),
        Field.nullable("v", new ArrowType.Int(64, true))));
    try (BufferAllocator alloc = ArrowUtils.rootAllocator().newChildAllocator("test put", 0, Long.MAX_VALUE);
         VectorSchemaRoot root = VectorSchemaRoot.create(schema, alloc)) {
      root.allocateNew();
      BigIntVector id = (BigIntVector) root.getVector("id");
      BigIntVector v = (BigIntVector) root.getVector("v");
      for (int i = 0; i < keys; i++) {
        id.setSafe(i, i);
        v.setSafe(i, e);
      }
      root.setRowCount(keys);
      Map<String, Object> cmd = new LinkedHashMap<>();
      cmd.put("table", table);
      cmd.put("query_id", "upserter");
      cmd.put("epoch_id", e);
      cmd.put("mode", "update");
      try (FlightSinkClient.Put put = FlightSinkClient.get(server.uri(), null).new Put(cmd, root)) {
        put.putNext();
        JsonNode ack = put.finish();
        assertEquals("committed", ack.path("status").asText(), "epoch " + e + ": " + ack);
        assertEquals("memwal", ack.path("route").asText(), "epoch " + e + ": " + ack);
      }
    }
  }

  // -- batch writes -----------------------------------------------------------------------------

  /**
   * A single-partition batch write whose task sends its rows and then fails, on every attempt:
   * Spark reports the failure and nothing landed; the write run again lands every row once.
   */
  @Test
  void failedSinglePartitionBatchWriteLandsNothing() {
    String table = "batch_all_or_nothing";
    Dataset<Row> df = spark.range(0, 50, 1, 1).selectExpr("id", "CAST(id AS STRING) AS k");
    Exception e = assertThrows(Exception.class, () -> df.write().format("flight-sink")
        .option("uri", server.uri()).option("table", table).option(InjectedFailure.OPTION, "0:*")
        .mode("append").save());
    assertTrue(String.valueOf(e.getMessage()).contains("injected failure")
        || String.valueOf(e.getCause()).contains("injected failure"), String.valueOf(e));
    assertEquals(0, tableRows(table), "a failed write lands nothing");
    append(df, table);
    assertEquals(LongStream.range(0, 50).boxed().collect(Collectors.toList()),
        TestTables.ids(server.uri(), table).stream().sorted().collect(Collectors.toList()));
  }

  /** The table's rows, 0 when it does not exist. */
  private long tableRows(String table) {
    try {
      return TestTables.rows(server.uri(), table).size();
    } catch (RuntimeException e) {
      if (String.valueOf(e).contains("NOT_FOUND") || String.valueOf(e.getCause()).contains("NOT_FOUND")) {
        return 0;
      }
      throw e;
    }
  }

  // -- message sizes ----------------------------------------------------------------------------

  /** 300 values of 1 MiB in one partition: batches are cut by bytes, each far below 256 MiB. */
  @Test
  void megabyteValuesStayWithinTheMessageLimit() {
    String table = "big_values";
    Dataset<Row> df = spark.range(0, 300, 1, 1).selectExpr("id", "REPEAT(CHR(65 + CAST(id % 26 AS INT)), 1048576) AS s");
    append(df, table);
    Dataset<Row> back = read(table);
    assertEquals(300, back.count());
    List<Row> some = back.where("id IN (0, 137, 299)").selectExpr("id", "LENGTH(s)", "SUBSTR(s, 1048576, 1)")
        .orderBy("id").collectAsList();
    assertEquals(List.of(RowFactory.create(0L, 1048576, "A"), RowFactory.create(137L, 1048576, "H"),
        RowFactory.create(299L, 1048576, "N")), some);
  }

  // -- options ----------------------------------------------------------------------------------

  /** An option the connector does not know fails the write or read, naming the known ones. */
  @Test
  void unknownOptionsFail() {
    Dataset<Row> df = spark.range(0, 3).toDF("id");
    Exception w = assertThrows(Exception.class, () -> df.write().format("flight-sink").option("uri", server.uri())
        .option("table", "options_typo").option("primary_key", "id").mode("append").save());
    String msg = String.valueOf(w.getMessage());
    assertTrue(msg.contains("unknown option primary_key") && msg.contains("primaryKey"), msg);
    assertEquals(0, tableRows("options_typo"), "nothing was written");

    append(df, "options_known");
    Exception r = assertThrows(Exception.class, () -> spark.read().format("flight-sink").option("uri", server.uri())
        .option("table", "options_known").option("pushFilter", "false").load().collectAsList());
    assertTrue(String.valueOf(r.getMessage()).contains("unknown option pushFilter"), String.valueOf(r.getMessage()));
    // Known options in any case and Spark's own options pass.
    assertEquals(3, spark.read().format("flight-sink").option("URI", server.uri()).option("table", "options_known")
        .option("PushFilters", "true").option("path", "ignored").load().count());
  }

  // -- an unavailable server --------------------------------------------------------------------

  /**
   * The first connection to the server is closed at once (as while a server restarts): the
   * connector's first calls of a read (GetSchema, GetFlightInfo) and an idempotent action are
   * retried, and succeed.
   */
  @Test
  void unavailableServerIsRetried() throws Exception {
    append(spark.range(0, 3).toDF("id"), "retry_unavailable");
    try (RefusingProxy proxy = new RefusingProxy(server.addr, 1)) {
      assertEquals(3, spark.read().format("flight-sink").option("uri", proxy.uri())
          .option("table", "retry_unavailable").load().count());
      assertEquals(1, proxy.refused());
    }
    try (RefusingProxy proxy = new RefusingProxy(server.addr, 1)) {
      assertEquals(3, FlightSinkClient.get(proxy.uri(), null).action("table_stats", Map.of("table", "retry_unavailable"))
          .path("rows").asLong());
      assertEquals(1, proxy.refused());
    }
  }
}
