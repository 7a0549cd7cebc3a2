package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.Test;

/**
 * Batch writes and reads end to end: one transaction per write, pushed filters, pruning, time
 * travel, overwrite, and every column type in both directions.
 */
class FlightSinkBatchTest extends SparkServerTest {
  @Test
  void batchWriteThenReadWithPushedFilter() throws Exception {
    String table = "batch_rw";
    String uri = server.uri();
    Dataset<Row> df = spark.range(0, 400, 1, 4).selectExpr("id", "concat('k', CAST(id % 3 AS STRING)) AS k");
    df.write().format("flight-sink").option("uri", uri).option("table", table).mode("append").save();
    long v1 = TestTables.history(uri, table).get(TestTables.history(uri, table).size() - 1).path("version").asLong();
    df.where("id < 100").write().format("flight-sink").option("uri", uri).option("table", table).mode("append").save();
    List<String> ops = TestTables.operations(uri, table);
    assertEquals(List.of("Append", "Append"), ops.subList(ops.size() - 2, ops.size()),
        "one transaction per write: " + ops);
    assertEquals(2, Collections.frequency(ops, "Append"), "one transaction per write: " + ops);

    Dataset<Row> all = spark.read().format("flight-sink").option("uri", uri).option("table", table).load();
    assertTrue(all.rdd().getNumPartitions() >= 2, "one partition per endpoint: " + all.rdd().getNumPartitions());
    List<Long> want = new ArrayList<>(range(0, 400));
    want.addAll(range(0, 100));
    Collections.sort(want);
    assertEquals(want, sorted(all.select("id").collectAsList().stream().map(r -> r.getLong(0)).collect(Collectors.toList())));

    Dataset<Row> where = all.where("id >= 120 AND k = 'k1'").select("id");
    List<Long> expect = range(0, 400).stream().filter(i -> i >= 120 && i % 3 == 1).collect(Collectors.toList());
    assertEquals(expect, sorted(where.collectAsList().stream().map(r -> r.getLong(0)).collect(Collectors.toList())));
    String plan = where.queryExecution().executedPlan().toString();
    assertTrue(plan.contains("\"op\":\">=\",\"column\":\"id\",\"value\":120"), plan);
    assertTrue(plan.contains("\"op\":\"=\",\"column\":\"k\",\"value\":\"k1\""), plan);

    // The server applied the filter: the scan's own partitions return only matching rows.
    Dataset<Row> pushed = all.where("id >= 120 AND k = 'k1'");
    Scan scan = pushed.queryExecution().optimizedPlan().collectFirst(
        new scala.runtime.AbstractPartialFunction<org.apache.spark.sql.catalyst.plans.logical.LogicalPlan, Scan>() {
          @Override
          public boolean isDefinedAt(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p) {
            return p instanceof org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
          }

          @Override
          public Scan apply(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p) {
            return ((org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation) p).scan();
          }
        }).get();
    InputPartition[] parts = scan.toBatch().planInputPartitions();
    assertTrue(parts.length >= 2, "endpoints: " + parts.length);
    long served = 0;
    for (InputPartition p : parts) {
      try (PartitionReader<ColumnarBatch> r = scan.toBatch().createReaderFactory().createColumnarReader(p)) {
        while (r.next()) {
          served += r.get().numRows();
        }
      }
    }
    assertEquals(expect.size(), served, "rows the server sent for the pushed filter");

    // A LIMIT stops reading early (the readers cancel their DoGets).
    assertEquals(3, all.limit(3).collectAsList().size());
    // Column pruning: only the selected column is read.
    assertTrue(all.select("k").queryExecution().executedPlan().toString().contains("columns=[k]"));
    // Time travel: the first write's version.
    Dataset<Row> old = spark.read().format("flight-sink").option("uri", uri).option("table", table)
        .option("versionAsOf", String.valueOf(v1)).load();
    assertEquals(400, old.count());
    assertEquals(400 + 100, all.count());

    // Overwrite: one Overwrite transaction; an empty overwrite truncates.
    df.where("id < 10").write().format("flight-sink").option("uri", uri).option("table", table).mode("overwrite").save();
    assertEquals(range(0, 10), sorted(TestTables.ids(uri, table)));
    df.where("id < 0").write().format("flight-sink").option("uri", uri).option("table", table).mode("overwrite").save();
    assertEquals(0, TestTables.ids(uri, table).size());
  }

  @Test
  void typesRoundTrip() throws Exception {
    String uri = server.uri();
    String table = "types_rt";
    Dataset<Row> df = spark.sql("SELECT id, id % 2 = 0 AS b, CAST(id AS TINYINT) AS i8, CAST(id AS SMALLINT) AS i16, "
        + "CAST(id AS INT) AS i32, CAST(id * 1.5 AS FLOAT) AS f32, id * 2.25D AS f64, "
        + "CAST(id * 1.25 AS DECIMAL(10, 2)) AS dec, CONCAT('s', CAST(id AS STRING)) AS s, "
        + "CAST(CONCAT('b', CAST(id AS STRING)) AS BINARY) AS bin, DATE_ADD(DATE'2024-02-28', CAST(id AS INT)) AS d, "
        + "TIMESTAMP'2024-01-01 00:00:00.123456' + MAKE_INTERVAL(0, 0, 0, 0, 0, 0, id) AS ts, "
        + "TIMESTAMP_NTZ'2024-01-01 12:00:00' AS ntz, ARRAY(CAST(id AS INT), 2) AS arr, "
        + "NAMED_STRUCT('a', CAST(id AS INT), 'b', CAST(id AS STRING)) AS st, MAP('k', CAST(id AS INT)) AS m, "
        + "IF(id = 3, NULL, id) AS nul FROM RANGE(0, 6, 1, 2)");
    df.write().format("flight-sink").option("uri", uri).option("table", table).mode("append").save();
    Dataset<Row> back = spark.read().format("flight-sink").option("uri", uri).option("table", table).load();
    assertEquals(List.of(df.schema().fieldNames()), List.of(back.schema().fieldNames()));
    for (int i = 0; i < df.schema().size(); i++) {
      assertEquals(df.schema().fields()[i].dataType(), back.schema().fields()[i].dataType(), df.schema().fields()[i].name());
    }
    List<String> want = df.orderBy("id").collectAsList().stream().map(Row::toString).collect(Collectors.toList());
    List<String> got = back.orderBy("id").collectAsList().stream().map(Row::toString).collect(Collectors.toList());
    // Row.toString shows binary as an array identity: compare it separately.
    assertEquals(strip(want), strip(got));
    assertEquals(df.selectExpr("hex(bin)").orderBy("hex(bin)").collectAsList(),
        back.selectExpr("hex(bin)").orderBy("hex(bin)").collectAsList());
    // Pushed comparisons on date and timestamp columns.
    assertEquals(2, back.where("d >= DATE'2024-03-03'").count()); // 2024 is a leap year: 02-28 + 4, + 5
    assertEquals(4, back.where("ts > TIMESTAMP'2024-01-01 00:00:02'").count()); // ids 2..5 (x.123456 s)
    assertEquals(1, back.where("nul IS NULL").count());
  }

  @Test
  void stringColumnsRoundTrip() {
    String uri = server.uri();
    String table = "strings_rt";
    // Nulls, empty strings, multi-byte UTF-8 and values of up to 3 KB, 10,000 rows a task: many
    // Arrow batches a task, data buffers that grow mid-batch, nulls between values.
    Dataset<Row> df = spark.sql("SELECT id, CASE WHEN id % 5 = 0 THEN NULL WHEN id % 5 = 1 THEN '' "
        + "WHEN id % 5 = 2 THEN CONCAT('ünïcødé ✓ 𝄞 ', CAST(id AS STRING)) "
        + "ELSE REPEAT('x', CAST(id % 3000 AS INT)) END AS s, "
        + "IF(id % 7 = 0, NULL, CAST(id AS STRING)) AS t FROM RANGE(0, 20000, 1, 2)");
    df.write().format("flight-sink").option("uri", uri).option("table", table).mode("append").save();
    Dataset<Row> back = spark.read().format("flight-sink").option("uri", uri).option("table", table).load();
    assertEquals(df.orderBy("id").collectAsList(), back.orderBy("id").collectAsList());
    assertEquals(4000, back.where("s IS NULL").count());
    assertEquals(4000, back.where("s = ''").count());
  }

  private static List<String> strip(List<String> rows) {
    return rows.stream().map(r -> r.replaceAll("\\[B@[0-9a-f]+", "<bin>")).collect(Collectors.toList());
  }

  @Test
  void unsignedNanosecondAndDate64ColumnsAreConverted() throws Exception {
    String uri = server.uri();
    String table = "arrow_types";
    org.apache.arrow.memory.BufferAllocator alloc =
        org.apache.spark.sql.util.ArrowUtils.rootAllocator().newChildAllocator("test", 0, Long.MAX_VALUE);
    org.apache.arrow.vector.types.pojo.Schema schema = new org.apache.arrow.vector.types.pojo.Schema(List.of(
        org.apache.arrow.vector.types.pojo.Field.nullable("u8", new org.apache.arrow.vector.types.pojo.ArrowType.Int(8, false)),
        org.apache.arrow.vector.types.pojo.Field.nullable("u16", new org.apache.arrow.vector.types.pojo.ArrowType.Int(16, false)),
        org.apache.arrow.vector.types.pojo.Field.nullable("u32", new org.apache.arrow.vector.types.pojo.ArrowType.Int(32, false)),
        org.apache.arrow.vector.types.pojo.Field.nullable("tsns", new org.apache.arrow.vector.types.pojo.ArrowType.Timestamp(
            org.apache.arrow.vector.types.TimeUnit.NANOSECOND, "UTC")),
        org.apache.arrow.vector.types.pojo.Field.nullable("tsms", new org.apache.arrow.vector.types.pojo.ArrowType.Timestamp(
            org.apache.arrow.vector.types.TimeUnit.MILLISECOND, null)),
        org.apache.arrow.vector.types.pojo.Field.nullable("d64", new org.apache.arrow.vector.types.pojo.ArrowType.Date(
            org.apache.arrow.vector.types.DateUnit.MILLISECOND))));
    try (org.apache.arrow.vector.VectorSchemaRoot root = org.apache.arrow.vector.VectorSchemaRoot.create(schema, alloc)) {
      root.allocateNew();
      ((org.apache.arrow.vector.UInt1Vector) root.getVector("u8")).setSafe(0, 255);
      ((org.apache.arrow.vector.UInt2Vector) root.getVector("u16")).setSafe(0, 65535);
      ((org.apache.arrow.vector.UInt4Vector) root.getVector("u32")).setSafe(0, -1); // 4294967295
      ((org.apache.arrow.vector.TimeStampNanoTZVector) root.getVector("tsns")).setSafe(0, 1_700_000_000_123_456_789L);
      ((org.apache.arrow.vector.TimeStampMilliVector) root.getVector("tsms")).setSafe(0, 1_700_000_000_123L);
      ((org.apache.arrow.vector.DateMilliVector) root.getVector("d64")).setSafe(0, 19_000L * 86_400_000L);
      for (String c : List.of("u8", "u16", "u32", "tsns", "tsms", "d64")) {
        root.getVector(c).setNull(1);
      }
      root.setRowCount(2);
      Map<String, Object> cmd = new java.util.LinkedHashMap<>();
      cmd.put("table", table);
      cmd.put("query_id", "loader");
      cmd.put("epoch_id", 0);
      cmd.put("create", true);
      try (FlightSinkClient.Put put = FlightSinkClient.get(uri, null).new Put(cmd, root)) {
        put.putNext();
        assertEquals("committed", put.finish().path("status").asText());
      }
    }
    alloc.close();
    Dataset<Row> back = spark.read().format("flight-sink").option("uri", uri).option("table", table).load();
    // The server stores these as Iceberg-compatible types (uint8/16 as int32, uint32 as int64,
    // timestamps in microseconds, date64 as date32; uint64 it refuses).
    assertEquals("struct<u8:int,u16:int,u32:bigint,tsns:timestamp,tsms:timestamp_ntz,d64:date>",
        back.schema().simpleString());
    List<Row> rows = back.collectAsList();
    Row r = rows.get(0).isNullAt(0) ? rows.get(1) : rows.get(0);
    Row n = rows.get(0).isNullAt(0) ? rows.get(0) : rows.get(1);
    assertEquals(255, r.getInt(0));
    assertEquals(65535, r.getInt(1));
    assertEquals(4294967295L, r.getLong(2));
    assertEquals(java.time.Instant.parse("2023-11-14T22:13:20.123456Z"), r.getTimestamp(3).toInstant());
    assertEquals(java.time.LocalDateTime.parse("2023-11-14T22:13:20.123"), r.getAs("tsms"));
    assertEquals(java.time.LocalDate.ofEpochDay(19_000), r.getDate(5).toLocalDate());
    for (int i = 0; i < 6; i++) {
      assertTrue(n.isNullAt(i), "null in column " + i);
    }
  }
}
