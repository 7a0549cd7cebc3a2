package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.Collectors;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Partitioned tables created by Spark writes: the option {@code partitionBy} on a stream and a
 * batch write, {@code df.write.partitionBy}, a spec asked of an existing table with another, and a
 * spec the server refuses. Each data file is read back with Spark's Parquet reader to check it
 * holds the rows of its fragment's partition alone.
 */
class FlightSinkPartitionsTest extends SparkServerTest {
  private static final long DAY_MICROS = 86_400_000_000L;
  /** 2024-03-01 as days since 1970-01-01. */
  private static final int FIRST_DAY = 19783;

  /** One JSON input file of rows id in [from, to), ts spread over days FIRST_DAY + (id % days). */
  private static void writeEvents(Path dir, int index, long from, long to, int days) throws Exception {
    Files.createDirectories(dir);
    StringBuilder sb = new StringBuilder();
    for (long i = from; i < to; i++) {
      long micros = (FIRST_DAY + i % days) * DAY_MICROS + (i * 7_919_000_000L) % DAY_MICROS;
      sb.append("{\"id\": ").append(i).append(", \"ts\": \"")
          .append(java.time.Instant.ofEpochSecond(0, micros * 1000)).append("\"}\n");
    }
    Path tmp = dir.getParent().resolve(".tmp-" + index + ".json");
    Files.writeString(tmp, sb.toString(), StandardCharsets.UTF_8);
    Files.move(tmp, dir.resolve(String.format("part-%05d.json", index)), StandardCopyOption.ATOMIC_MOVE);
    Thread.sleep(20); // distinct modification times keep the file source's order
  }

  /** flight-sink inspect --json of the table, from its directory under the server's root. */
  private JsonNode inspect(String table) throws Exception {
    Process p = new ProcessBuilder(TestServer.binary(), "inspect", "--json", server.root.resolve(table).toString())
        .redirectErrorStream(true).start();
    byte[] out = p.getInputStream().readAllBytes();
    assertEquals(0, p.waitFor(), () -> new String(out, StandardCharsets.UTF_8));
    return FlightSinkClient.parse(out);
  }

  /** A data file of the table, by the path inspect shows. */
  private String dataFile(String table, String path) {
    Path p = Path.of(path);
    return (p.isAbsolute() ? p : server.root.resolve(table).resolve(path)).toString();
  }

  /**
   * Checks that each data file of a table partitioned by one field holds rows of its fragment's
   * partition alone ({@code valueSql} computes the partition value of a row in Spark SQL over the
   * file's columns), and returns the partition values seen.
   */
  private TreeSet<String> checkFilesHoldOnePartition(String table, String valueSql) throws Exception {
    TreeSet<String> seen = new TreeSet<>();
    JsonNode frags = inspect(table).path("fragments");
    assertTrue(frags.size() > 0, "no fragments");
    for (JsonNode f : frags) {
      JsonNode part = f.path("partition");
      assertEquals(1, part.size(), "one partition value per fragment: " + f);
      String want = part.get(0).path("value").asText();
      for (JsonNode file : f.path("files")) {
        List<String> got = spark.read().parquet(dataFile(table, file.path("path").asText()))
            .selectExpr("CAST(" + valueSql + " AS STRING)").distinct().collectAsList().stream()
            .map(r -> r.getString(0)).collect(Collectors.toList());
        assertEquals(List.of(want), got, "rows of " + file.path("path").asText() + " (fragment " + f + ")");
      }
      seen.add(want);
    }
    return seen;
  }

  private static JsonNode stats(String uri, String table) {
    return FlightSinkClient.get(uri, null).action("table_stats", Map.of("table", table));
  }

  @Test
  void streamWithPartitionByOptionCreatesADayPartitionedTable(@TempDir Path tmp) throws Exception {
    String table = "part_stream";
    Path src = tmp.resolve("in");
    // Three micro-batches, each over the same 6 days.
    writeEvents(src, 0, 0, 60, 6);
    writeEvents(src, 1, 60, 120, 6);
    writeEvents(src, 2, 120, 180, 6);
    Dataset<Row> in = spark.readStream().schema("id long, ts timestamp").option("maxFilesPerTrigger", 1)
        .json(src.toString()).repartition(2);
    runAvailable(sink(in.writeStream(), table, tmp.resolve("ckpt")).option("partitionBy", "days(ts)"));

    assertEquals("[{\"column\":\"ts\",\"transform\":\"day\"}]", stats(server.uri(), table).path("partition_by").toString());
    assertEquals(range(0, 180), sorted(TestTables.ids(server.uri(), table)));
    TreeSet<String> days = checkFilesHoldOnePartition(table, "unix_date(CAST(ts AS DATE))");
    assertEquals(range(FIRST_DAY, FIRST_DAY + 6).stream().map(String::valueOf).collect(Collectors.toCollection(TreeSet::new)),
        days);
    assertEquals(3, TestTables.epochCommits(server.uri(), table).size());
  }

  @Test
  void batchWritesCreatePartitionedTablesAndAnotherSpecFails() throws Exception {
    String uri = server.uri();
    Dataset<Row> df = spark.range(0, 300, 1, 3).selectExpr("id", "concat('k', CAST(id % 3 AS STRING)) AS k");

    // df.write.partitionBy: Spark hands the columns to the data source.
    df.write().format("flight-sink").option("uri", uri).option("table", "part_by_k").partitionBy("k")
        .mode("append").save();
    assertEquals("[{\"column\":\"k\",\"transform\":\"identity\"}]", stats(uri, "part_by_k").path("partition_by").toString());
    assertEquals(new TreeSet<>(List.of("k0", "k1", "k2")), checkFilesHoldOnePartition("part_by_k", "k"));

    // The option, Iceberg's syntax.
    df.write().format("flight-sink").option("uri", uri).option("table", "part_bucket")
        .option("partitionBy", "bucket(4, id)").mode("append").save();
    assertEquals("[{\"column\":\"id\",\"transform\":\"bucket[4]\"}]", stats(uri, "part_bucket").path("partition_by").toString());
    assertEquals(range(0, 300), sorted(TestTables.ids(uri, "part_bucket")));

    // The same spec again appends; none appends; another fails before writing anything.
    df.write().format("flight-sink").option("uri", uri).option("table", "part_bucket")
        .option("partitionBy", "bucket(4, id)").mode("append").save();
    df.write().format("flight-sink").option("uri", uri).option("table", "part_bucket").mode("append").save();
    int before = TestTables.epochCommits(uri, "part_bucket").size();
    Throwable e = assertThrows(Exception.class, () -> df.write().format("flight-sink").option("uri", uri)
        .option("table", "part_bucket").option("partitionBy", "truncate(10, id)").mode("append").save());
    String msg = messages(e);
    assertTrue(msg.contains("exists partitioned by [bucket[4](id)], not partitioned by [truncate[10](id)]"), msg);
    e = assertThrows(Exception.class, () -> df.write().format("flight-sink").option("uri", uri)
        .option("table", "part_bucket").partitionBy("k").mode("append").save());
    assertTrue(messages(e).contains("not partitioned by [identity(k)]"), messages(e));
    assertEquals(before, TestTables.epochCommits(uri, "part_bucket").size(), "a refused write committed");
    assertEquals(900, TestTables.ids(uri, "part_bucket").size());
  }

  @Test
  void aSpecTheServerRefusesSurfacesItsReasonAndCreatesNothing(@TempDir Path tmp) throws Exception {
    String uri = server.uri();
    Dataset<Row> df = spark.range(0, 10).selectExpr("id", "CAST(id AS STRING) AS s");
    Throwable e = assertThrows(Exception.class, () -> df.write().format("flight-sink").option("uri", uri)
        .option("table", "part_bad").option("partitionBy", "days(s)").mode("append").save());
    String msg = messages(e);
    assertTrue(msg.contains("INVALID_PARTITION_SPEC") && msg.contains("s"), msg);
    FlightSinkException missing = assertThrows(FlightSinkException.class, () -> stats(uri, "part_bad"));
    assertTrue(missing.isTableNotFound(), missing.getMessage());

    // A stream: its first epoch fails the query with the same reason.
    Path src = tmp.resolve("in");
    writeEvents(src, 0, 0, 10, 2);
    Dataset<Row> in = spark.readStream().schema("id long, ts timestamp").json(src.toString());
    var q = sink(in.writeStream(), "part_bad_stream", tmp.resolve("ckpt")).option("partitionBy", "hours(id)")
        .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow()).start();
    try {
      q.awaitTermination();
    } catch (Exception ignored) {
      // the failure is read from q.exception() below
    }
    assertTrue(q.exception().isDefined(), "the query should fail");
    msg = messages(q.exception().get());
    assertTrue(msg.contains("INVALID_PARTITION_SPEC"), msg);
    assertTrue(assertThrows(FlightSinkException.class, () -> stats(uri, "part_bad_stream")).isTableNotFound());
  }

  /** Every message of a throwable's cause chain. */
  static String messages(Throwable e) {
    List<String> out = new ArrayList<>();
    for (Throwable t = e; t != null; t = t.getCause()) {
      out.add(String.valueOf(t.getMessage()));
    }
    return String.join(" <- ", out);
  }
}
