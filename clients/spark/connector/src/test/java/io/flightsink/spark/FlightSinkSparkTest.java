package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.DataStreamWriter;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * The connector in real Spark (local[2,2]: two cores, a failed task is retried once) against a
 * real flight-sink server built from this checkout. The server describes every fragment as its
 * own endpoint ({@code --endpoint-bytes 1}), so reads have one Spark partition per fragment.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FlightSinkSparkTest {
  private static final String SCHEMA = "id long, k string, v long";

  private TestServer server;
  private SparkSession spark;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start("--endpoint-bytes", "1");
    spark = SparkSession.builder()
        .master("local[2,2]")
        .appName("flight-sink-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.schemaInference", "false")
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

  // -- helpers ------------------------------------------------------------------------------

  /** One input file, written aside and renamed into the watched directory. */
  private static void writeJson(Path dir, int index, long from, long to, String key) throws IOException {
    Files.createDirectories(dir);
    StringBuilder sb = new StringBuilder();
    for (long i = from; i < to; i++) {
      String k = key != null ? key : "k" + (i % 3);
      sb.append("{\"id\": ").append(i).append(", \"k\": \"").append(k).append("\", \"v\": ").append(i).append("}\n");
    }
    Path tmp = dir.getParent().resolve(".tmp-" + index + ".json");
    Files.writeString(tmp, sb.toString(), StandardCharsets.UTF_8);
    Files.move(tmp, dir.resolve(String.format("part-%05d.json", index)), StandardCopyOption.ATOMIC_MOVE);
    // Distinct modification times keep the file source's order (not a timing assertion).
    try {
      Thread.sleep(20);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private Dataset<Row> files(Path dir) {
    return spark.readStream().schema(SCHEMA).option("maxFilesPerTrigger", 1).json(dir.toString());
  }

  private DataStreamWriter<Row> sink(DataStreamWriter<Row> w, String table, Path ckpt) {
    return w.format("flight-sink").option("uri", server.uri()).option("table", table)
        .option("checkpointLocation", ckpt.toString());
  }

  private static StreamingQuery runAvailable(DataStreamWriter<Row> w) throws Exception {
    StreamingQuery q = w.trigger(Trigger.AvailableNow()).start();
    q.awaitTermination();
    assertTrue(q.exception().isEmpty(), () -> "query failed: " + q.exception().get());
    return q;
  }

  /** Creates table (id long, k string, v long) with two MemWAL shards. */
  private void createMemWalTable(String table) {
    FlightSinkClient.get(server.uri(), null).action("create_table", Map.of("table", table,
        "schema", List.of(Map.of("name", "id", "type", "int64"), Map.of("name", "k", "type", "utf8"),
            Map.of("name", "v", "type", "int64")),
        "memwal", Map.of("shards", 2)));
  }

  /**
   * Makes the checkpoint forget that epoch was committed (as after a crash between the sink's
   * commit and Spark's commit log): a restarted query replays it.
   */
  private static void forgetCommit(Path ckpt, int epoch) throws IOException {
    Files.delete(ckpt.resolve("commits").resolve(Integer.toString(epoch)));
    Files.deleteIfExists(ckpt.resolve("commits").resolve("." + epoch + ".crc"));
  }

  /** Two input files (rows 0..9 and 10..13 over keys k0..k2) as the count and max of v by k. */
  private Dataset<Row> keyCounts(Path tmp) throws IOException {
    Path src = tmp.resolve("in");
    writeJson(src, 0, 0, 10, null);
    writeJson(src, 1, 10, 14, null);
    return files(src).groupBy("k").agg(functions.count("*").as("n"), functions.max("v").as("maxv"));
  }

  /** Column n of every row of a table keyed by k, by key; fails on a key seen twice. */
  private Map<String, Long> counts(String table) {
    Map<String, Long> got = new TreeMap<>();
    for (Map<String, Object> r : TestTables.rows(server.uri(), table)) {
      Long prev = got.put((String) r.get("k"), ((Number) r.get("n")).longValue());
      assertTrue(prev == null, "key " + r.get("k") + " twice");
    }
    return got;
  }

  /** Stage files (staged partitions of multi-writer epochs) the server holds for table. */
  private long stagedParts(String table) throws IOException {
    Path dir = server.root.resolve(table).resolve("_staging");
    if (!Files.isDirectory(dir)) {
      return 0;
    }
    try (var files = Files.list(dir)) {
      return files.count();
    }
  }

  private static List<Long> range(long from, long to) {
    return LongStream.range(from, to).boxed().collect(Collectors.toList());
  }

  private static List<Long> sorted(List<Long> in) {
    List<Long> out = new ArrayList<>(in);
    Collections.sort(out);
    return out;
  }

  // -- streaming writes -----------------------------------------------------------------------

  @Test
  void streamingWriteRetriedTaskAndReplayedEpochLandOnce(@TempDir Path tmp) throws Exception {
    String table = "stream_once";
    Path src = tmp.resolve("in");
    Path ckpt = tmp.resolve("ckpt");
    writeJson(src, 0, 0, 30, null);
    writeJson(src, 1, 30, 60, null);
    // Partition 1's first attempt of every epoch fails right after its stage was acknowledged;
    // Spark retries it, and only the retry's stage is committed.
    DataStreamWriter<Row> w = sink(files(src).repartition(2).writeStream(), table, ckpt)
        .option(FlightSinkOptions.TEST_FAIL_AFTER_STAGE, "1:0");
    StreamingQuery q = runAvailable(w);
    String qid = q.id().toString();
    assertEquals(range(0, 60), sorted(TestTables.ids(server.uri(), table)), "every row exactly once");
    assertEquals(List.of(qid + "/0", qid + "/1"), TestTables.epochCommits(server.uri(), table),
        "one commit per epoch, stamped with StreamingQuery.id");

    // Spark forgets it committed epoch 1 (as after a crash between the sink's commit and the
    // commit log): the restarted query replays epoch 1, which the server answers `duplicate`,
    // then runs epoch 2.
    forgetCommit(ckpt, 1);
    writeJson(src, 2, 60, 90, null);
    StreamingQuery q2 = runAvailable(sink(files(src).repartition(2).writeStream(), table, ckpt)
        .option(FlightSinkOptions.TEST_FAIL_AFTER_STAGE, "1:0"));
    assertEquals(q.id(), q2.id(), "the query id survives the restart");
    assertNotEquals(q.runId(), q2.runId());
    assertEquals(range(0, 90), sorted(TestTables.ids(server.uri(), table)), "the replayed epoch landed once");
    assertEquals(List.of(qid + "/0", qid + "/1", qid + "/2"), TestTables.epochCommits(server.uri(), table));
  }

  /** Copies a checkpoint directory (as a user starting a second query from it would). */
  private static void copyTree(Path from, Path to) throws IOException {
    try (var paths = Files.walk(from)) {
      for (Path p : (Iterable<Path>) paths::iterator) {
        Path dst = to.resolve(from.relativize(p).toString());
        if (Files.isDirectory(p)) {
          Files.createDirectories(dst);
        } else {
          Files.copy(p, dst, StandardCopyOption.REPLACE_EXISTING);
        }
      }
    }
  }

  /**
   * Starts {@link CopiedCheckpointQuery} in its own JVM (another Spark application) on the given
   * checkpoint, and returns it once its query runs.
   */
  private Process secondApplication(String table, Path src, Path ckpt, List<String> out) throws Exception {
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.addAll(java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments());
    cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), CopiedCheckpointQuery.class.getName(),
        server.uri(), table, src.toString(), ckpt.toString()));
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
    String first = awaitLine(p, out, "RUN ");
    assertTrue(first.startsWith("RUN "), () -> "second application: " + out);
    return p;
  }

  /** Reads the process's output until a line starting with one of prefixes, and returns it. */
  private static String awaitLine(Process p, List<String> out, String... prefixes) throws IOException {
    java.io.BufferedReader r = p.inputReader(StandardCharsets.UTF_8);
    for (String line = r.readLine(); line != null; line = r.readLine()) {
      out.add(line);
      for (String pre : prefixes) {
        if (line.startsWith(pre)) {
          return line;
        }
      }
    }
    return "";
  }

  /** Has the second application process every input file, and returns its answer. */
  private static String sync(Process p, List<String> out) throws IOException {
    p.outputWriter(StandardCharsets.UTF_8).append("sync\n").flush();
    return awaitLine(p, out, "SYNCED", "FAILED");
  }

  @Test
  void queryFromCopiedCheckpointIsRefused(@TempDir Path tmp) throws Exception {
    String table = "stream_copied_ckpt";
    Path src = tmp.resolve("in");
    Path ckpt = tmp.resolve("ckpt");
    writeJson(src, 0, 0, 10, null);
    StreamingQuery a = sink(files(src).repartition(2).writeStream(), table, ckpt)
        .trigger(Trigger.ProcessingTime("50 milliseconds")).start();
    Process b = null;
    List<String> bOut = new ArrayList<>();
    try {
      a.processAllAvailable();
      // Every epoch commit names the run that wrote it: Spark's StreamingQuery.runId.
      JsonNode first = TestTables.history(server.uri(), table).get(1).path("properties");
      assertEquals(a.runId().toString(), first.path("flight_sink.streaming.run_id").asText(), first::toString);

      // A second application starts a query from a copy of the running query's checkpoint: the
      // same query id, another run, both alive.
      Path copy = tmp.resolve("ckpt-copy");
      copyTree(ckpt, copy);
      b = secondApplication(table, src, copy, bOut);
      writeJson(src, 1, 10, 20, null);
      assertEquals("SYNCED", sync(b, bOut), () -> "the copy's query: " + bOut); // b wrote epoch 1
      // From here on every write of a comes after the newer run b wrote: refused, and a fails
      // with the server's reason instead of either query dropping the other's rows in silence.
      writeJson(src, 2, 20, 30, null);
      // (A ceiling, not a timing: a query never refused runs on, and would be waited for forever.)
      Exception e = org.junit.jupiter.api.Assertions.assertThrows(
          org.apache.spark.sql.streaming.StreamingQueryException.class, () -> a.awaitTermination(300_000));
      assertTrue(String.valueOf(e.getMessage()).contains("QUERY_RUN_SUPERSEDED")
              && String.valueOf(e.getMessage()).contains("copies of one checkpoint"),
          () -> "query failed with: " + e);
      assertEquals("SYNCED", sync(b, bOut), () -> "the newer run goes on: " + bOut);
      assertEquals(range(0, 30), sorted(TestTables.ids(server.uri(), table)), "every row once");
    } finally {
      a.stop();
      if (b != null) {
        b.outputWriter(StandardCharsets.UTF_8).close(); // the end of its input: it stops
        if (!b.waitFor(60, java.util.concurrent.TimeUnit.SECONDS)) {
          b.destroyForcibly();
        }
      }
    }
  }

  @Test
  void singlePartitionEpochsCommittedByTheirTaskLandOnce(@TempDir Path tmp) throws Exception {
    String table = "stream_whole";
    createMemWalTable(table);
    Path src = tmp.resolve("in");
    Path ckpt = tmp.resolve("ckpt");
    writeJson(src, 0, 0, 25, null);
    writeJson(src, 1, 25, 50, null);
    // One partition a micro-batch: its task's DoPut commits the epoch. The first attempt of every
    // epoch fails right after that DoPut was acknowledged; the retry's DoPut answers duplicate.
    StreamingQuery q = runAvailable(sink(files(src).writeStream(), table, ckpt)
        .option(FlightSinkOptions.TEST_FAIL_AFTER_STAGE, "0:0"));
    assertEquals(range(0, 50), sorted(TestTables.ids(server.uri(), table)), "every row exactly once");
    assertEquals(List.of(), TestTables.epochCommits(server.uri(), table), "every epoch landed in MemWAL");
    JsonNode stream = FlightSinkClient.get(server.uri(), null).action("table_stats", Map.of("table", table))
        .path("streams").path(q.id().toString());
    assertEquals(1, stream.path("epoch").asLong(), () -> "table_stats streams: " + stream);
    assertEquals(0, stagedParts(table), "no task staged a part");

    // The restarted query replays epoch 1 (its commit was forgotten): a duplicate.
    forgetCommit(ckpt, 1);
    writeJson(src, 2, 50, 75, null);
    runAvailable(sink(files(src).writeStream(), table, ckpt));
    assertEquals(range(0, 75), sorted(TestTables.ids(server.uri(), table)), "the replayed epoch landed once");
  }

  @Test
  void singlePartitionUpdateEpochUpsertsFromItsTask(@TempDir Path tmp) throws Exception {
    String table = "stream_update_whole";
    // A keyed table without MemWAL shards: a multi-partition update epoch goes through the
    // driver; a single-partition one is upserted by its task's DoPut. Both land the same table
    // (neither stages), so this checks the task's upsert is right, not which path ran.
    Dataset<Row> agg = keyCounts(tmp).coalesce(1);
    StreamingQuery q = runAvailable(sink(agg.writeStream().outputMode("update"), table, tmp.resolve("ckpt"))
        .option("primaryKey", "k"));
    assertEquals(Map.of("k0", 5L, "k1", 5L, "k2", 4L), counts(table), "the latest count of every key, once");
    List<String> ops = TestTables.operations(server.uri(), table);
    assertTrue(ops.contains("Upsert"), ops.toString());
    String qid = q.id().toString();
    assertEquals(List.of(qid + "/0", qid + "/1"), TestTables.epochCommits(server.uri(), table));
  }

  @Test
  void memWalTableWrittenByFourPartitionStream(@TempDir Path tmp) throws Exception {
    String table = "stream_memwal";
    createMemWalTable(table);
    Path src = tmp.resolve("in");
    Path ckpt = tmp.resolve("ckpt");
    writeJson(src, 0, 0, 40, null);
    writeJson(src, 1, 40, 80, null);
    // Four tasks stage each epoch; partition 1's first attempt fails after its stage was
    // acknowledged and only the retry's stage is committed.
    StreamingQuery q = runAvailable(sink(files(src).repartition(4).writeStream(), table, ckpt)
        .option(FlightSinkOptions.TEST_FAIL_AFTER_STAGE, "1:0"));
    assertEquals(range(0, 80), sorted(TestTables.ids(server.uri(), table)), "every row exactly once");
    // An epoch on the direct route is a base version stamped with its identity; through MemWAL
    // no version is (a fold stamps none), and the shards report the query's last epoch.
    assertEquals(List.of(), TestTables.epochCommits(server.uri(), table), "every epoch landed in MemWAL");
    JsonNode stream = FlightSinkClient.get(server.uri(), null).action("table_stats", Map.of("table", table))
        .path("streams").path(q.id().toString());
    assertEquals(1, stream.path("epoch").asLong(), () -> "table_stats streams: " + stream);

    // The restarted query replays epoch 1 (its commit was forgotten): a duplicate from the shards.
    forgetCommit(ckpt, 1);
    writeJson(src, 2, 80, 120, null);
    runAvailable(sink(files(src).repartition(4).writeStream(), table, ckpt));
    assertEquals(range(0, 120), sorted(TestTables.ids(server.uri(), table)), "the replayed epoch landed once");
    assertEquals(List.of(), TestTables.epochCommits(server.uri(), table));
  }

  @Test
  void refusedStagedPutFailsTheQuery(@TempDir Path tmp) throws Exception {
    String table = "stream_refused";
    // The table's v is a string; the stream's v is a long: the server refuses each task's DoPut
    // at its start (the schema message), and the task fails with the server's error instead of
    // waiting for a stream that can no longer take a batch.
    FlightSinkClient.get(server.uri(), null).action("create_table", Map.of("table", table,
        "schema", List.of(Map.of("name", "id", "type", "int64"), Map.of("name", "k", "type", "utf8"),
            Map.of("name", "v", "type", "utf8"))));
    Path src = tmp.resolve("in");
    writeJson(src, 0, 0, 20000, null); // more than one batch a task
    StreamingQuery q = sink(files(src).repartition(2).writeStream(), table, tmp.resolve("ckpt"))
        .trigger(Trigger.AvailableNow()).start();
    Exception e = org.junit.jupiter.api.Assertions.assertThrows(Exception.class, q::awaitTermination);
    assertTrue(String.valueOf(e.getMessage()).contains("SCHEMA"), () -> "query failed with: " + e);
    assertEquals(List.of(), TestTables.ids(server.uri(), table), "nothing committed");
  }

  @Test
  void queryIdOptionWins(@TempDir Path tmp) throws Exception {
    String table = "stream_qid";
    Path src = tmp.resolve("in");
    writeJson(src, 0, 0, 10, null);
    runAvailable(sink(files(src).writeStream(), table, tmp.resolve("ckpt")).option("query_id", "my-query"));
    assertEquals(List.of("my-query/0"), TestTables.epochCommits(server.uri(), table));
  }

  @Test
  void completeModeAggregateAndEmptyEpochs(@TempDir Path tmp) throws Exception {
    String table = "stream_complete";
    Path src = tmp.resolve("in");
    writeJson(src, 0, 0, 3, "a");
    writeJson(src, 1, 3, 5, "b");
    writeJson(src, 2, 5, 15, "a");
    // Counts only grow; keys with 10 or more rows leave the result. Epoch 0: {a: 3}; epoch 1:
    // {a: 3, b: 2}; epoch 2: {b: 2} (a reached 13).
    Dataset<Row> agg = files(src).groupBy("k").count().where("count < 10");
    runAvailable(sink(agg.writeStream().outputMode("complete"), table, tmp.resolve("ckpt")));
    List<Map<String, Object>> rows = TestTables.rows(server.uri(), table);
    assertEquals(1, rows.size(), rows.toString());
    assertEquals("b", rows.get(0).get("k"));
    assertEquals(2L, ((Number) rows.get(0).get("count")).longValue());
    assertEquals(3, Collections.frequency(TestTables.operations(server.uri(), table), "Overwrite"),
        "one Overwrite per epoch");

    // A fourth epoch whose result is empty truncates the table.
    writeJson(src, 3, 15, 30, "b");
    runAvailable(sink(agg.writeStream().outputMode("complete"), table, tmp.resolve("ckpt")));
    assertEquals(0, TestTables.rows(server.uri(), table).size(), "an empty complete epoch truncates");
    assertEquals(4, Collections.frequency(TestTables.operations(server.uri(), table), "Overwrite"));

    // An empty first epoch of a table that does not exist yet creates it, empty.
    String empty = "stream_complete_empty";
    Dataset<Row> none = files(src).groupBy("k").count().where("count < 0");
    runAvailable(sink(none.writeStream().outputMode("complete"), empty, tmp.resolve("ckpt-empty")));
    assertEquals(0, TestTables.rows(server.uri(), empty).size());
    Dataset<Row> back = spark.read().format("flight-sink").option("uri", server.uri()).option("table", empty).load();
    assertEquals(List.of("k", "count"), List.of(back.schema().fieldNames()));
  }

  @Test
  void updateModeUpsertsKeyedTable(@TempDir Path tmp) throws Exception {
    String table = "stream_update";
    Dataset<Row> agg = keyCounts(tmp);
    StreamingQuery q = runAvailable(sink(agg.writeStream().outputMode("update"), table, tmp.resolve("ckpt"))
        .option("primaryKey", "k"));
    Map<String, long[]> want = new TreeMap<>();
    for (long i = 0; i < 14; i++) {
      long[] a = want.computeIfAbsent("k" + (i % 3), x -> new long[2]);
      a[0]++;
      a[1] = Math.max(a[1], i);
    }
    Map<String, long[]> got = new TreeMap<>();
    for (Map<String, Object> r : TestTables.rows(server.uri(), table)) {
      long[] prev = got.put((String) r.get("k"),
          new long[] {((Number) r.get("n")).longValue(), ((Number) r.get("maxv")).longValue()});
      assertTrue(prev == null, "key " + r.get("k") + " twice");
    }
    assertEquals(want.keySet(), got.keySet());
    for (String k : want.keySet()) {
      assertEquals(want.get(k)[0], got.get(k)[0], "count of " + k);
      assertEquals(want.get(k)[1], got.get(k)[1], "max of " + k);
    }
    List<String> ops = TestTables.operations(server.uri(), table);
    assertTrue(ops.contains("Upsert"), ops.toString());
    String qid = q.id().toString();
    assertEquals(List.of(qid + "/0", qid + "/1"), TestTables.epochCommits(server.uri(), table));
  }

  @Test
  void updateModeUpsertsKeyedMemWalTableFromStagedTasks(@TempDir Path tmp) throws Exception {
    String table = "stream_update_memwal";
    FlightSinkClient.get(server.uri(), null).action("create_table", Map.of("table", table,
        "schema", List.of(Map.of("name", "k", "type", "utf8"), Map.of("name", "n", "type", "int64"),
            Map.of("name", "maxv", "type", "int64")),
        "primary_key", List.of("k"), "memwal", Map.of("shards", 2)));
    FlightSinkOptions opts = FlightSinkOptions.parse(Map.of("uri", server.uri(), "table", table));
    assertFalse(FlightSinkWriteBuilder.tableKind(opts).collectUpdates(opts),
        "a keyed MemWAL table's update epochs are staged by the tasks, not collected on the driver");
    Dataset<Row> agg = keyCounts(tmp);
    runAvailable(sink(agg.writeStream().outputMode("update"), table, tmp.resolve("ckpt")));
    assertEquals(Map.of("k0", 5L, "k1", 5L, "k2", 4L), counts(table), "the latest count of every key, once");
    assertEquals(List.of(), TestTables.epochCommits(server.uri(), table), "every epoch landed in MemWAL");
  }

  // -- batch writes and reads -------------------------------------------------------------------

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
  void streamingReadAppendsAcrossRestartsAndChangeCommits(@TempDir Path tmp) throws Exception {
    String uri = server.uri();
    String src = "sread_src";
    String dst = "sread_dst";
    Path ckpt = tmp.resolve("ckpt");
    spark.range(0, 100, 1, 2).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("append").save();
    // The first micro-batch reads the table as it is; each later one the versions' new rows.
    Runnable copy = () -> {
      try {
        Dataset<Row> in = spark.readStream().format("flight-sink").option("uri", uri).option("table", src)
            .option("skipChangeCommits", "true").load().where("id NOT IN (7, 117, 203)"); // pushed: not(in)
        runAvailable(sink(in.writeStream(), dst, ckpt));
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    copy.run();
    List<Long> want = range(0, 100).stream().filter(i -> i != 7 && i != 117 && i != 203).collect(Collectors.toList());
    assertEquals(want, sorted(TestTables.ids(uri, dst)));
    spark.range(100, 150, 1, 2).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("append").save();
    spark.range(150, 160, 1, 1).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("append").save();
    copy.run();
    want = range(0, 160).stream().filter(i -> i != 7 && i != 117 && i != 203).collect(Collectors.toList());
    assertEquals(want, sorted(TestTables.ids(uri, dst)), "each appended row once, across the restart");

    // An Overwrite changes rows a stream of appends cannot express: skipped with
    // skipChangeCommits, and the appends after it are read.
    spark.range(0, 5, 1, 1).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("overwrite").save();
    spark.range(200, 210, 1, 1).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("append").save();
    copy.run();
    want.addAll(range(200, 210).stream().filter(i -> i != 7 && i != 117 && i != 203).collect(Collectors.toList()));
    assertEquals(want, sorted(TestTables.ids(uri, dst)));

    // The pushed predicate travels in the fragment tickets of a later micro-batch: the server
    // leaves the rows out (read here through the stream's own partitions, without Spark's filter).
    Map<String, String> o = Map.of("uri", uri, "table", src);
    FlightSinkTable t = (FlightSinkTable) new FlightSinkDataSource().getTable(
        new FlightSinkDataSource().inferSchema(new CaseInsensitiveStringMap(o)), null, o);
    FlightSinkScan.Builder b = (FlightSinkScan.Builder) t.newScanBuilder(new CaseInsensitiveStringMap(Map.of()));
    Predicate ge = new Predicate(">=", new org.apache.spark.sql.connector.expressions.Expression[] {
        org.apache.spark.sql.connector.expressions.Expressions.column("id"),
        new org.apache.spark.sql.connector.expressions.LiteralValue<>(205L, org.apache.spark.sql.types.DataTypes.LongType)});
    b.pushPredicates(new Predicate[] {ge});
    org.apache.spark.sql.connector.read.streaming.MicroBatchStream mbs = b.build().toMicroBatchStream(tmp.toString());
    long latest = ((FlightSinkMicroBatchStream.VersionOffset) mbs.latestOffset()).version;
    InputPartition[] parts = mbs.planInputPartitions(new FlightSinkMicroBatchStream.VersionOffset(latest - 1),
        new FlightSinkMicroBatchStream.VersionOffset(latest));
    assertTrue(parts.length >= 1);
    List<Long> got = new ArrayList<>();
    for (InputPartition p : parts) {
      String ticket = new String(((FlightSinkScan.Part) p).ticket, StandardCharsets.UTF_8);
      assertTrue(ticket.contains("\"fragments\"") && ticket.contains("\"filter\""), ticket);
      try (PartitionReader<ColumnarBatch> r = mbs.createReaderFactory().createColumnarReader(p)) {
        while (r.next()) {
          for (int i = 0; i < r.get().numRows(); i++) {
            got.add(r.get().column(0).getLong(i));
          }
        }
      }
    }
    assertEquals(range(205, 210), sorted(got), "the last append's rows with id >= 205");

    // Without skipChangeCommits the Overwrite fails the query, naming the version.
    Dataset<Row> strict = spark.readStream().format("flight-sink").option("uri", uri).option("table", src).load();
    runAvailable(sink(strict.writeStream(), "sread_strict", tmp.resolve("ckpt-strict")));
    List<Long> now = new ArrayList<>(range(0, 5));
    now.addAll(range(200, 210));
    assertEquals(now, sorted(TestTables.ids(uri, "sread_strict")),
        "a new query's first batch is the table as it is (the overwrite's 5 rows, 10 appended)");
    spark.range(300, 301, 1, 1).write().format("flight-sink").option("uri", uri).option("table", src)
        .mode("overwrite").save();
    StreamingQuery q2 = sink(strict.writeStream(), "sread_strict", tmp.resolve("ckpt-strict"))
        .trigger(Trigger.AvailableNow()).start();
    try {
      q2.awaitTermination();
    } catch (org.apache.spark.sql.streaming.StreamingQueryException expected) {
      // the failure is checked below
    }
    assertTrue(q2.exception().isDefined(), "an Overwrite fails a stream without skipChangeCommits");
    assertTrue(q2.exception().get().getMessage().contains("is an Overwrite"), q2.exception().get().getMessage());
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

  @Test
  void predicateTranslation() {
    org.apache.spark.sql.connector.expressions.NamedReference id =
        org.apache.spark.sql.connector.expressions.Expressions.column("id");
    org.apache.spark.sql.connector.expressions.Expression five =
        new org.apache.spark.sql.connector.expressions.LiteralValue<>(5L, org.apache.spark.sql.types.DataTypes.LongType);
    Predicate lt = new Predicate("<", new org.apache.spark.sql.connector.expressions.Expression[] {five, id});
    assertEquals("{\"op\":\">\",\"column\":\"id\",\"value\":5}",
        new String(FlightSinkClient.json(Predicates.translate(lt)), StandardCharsets.UTF_8));
    Predicate like = new Predicate("STARTS_WITH", new org.apache.spark.sql.connector.expressions.Expression[] {id, five});
    assertEquals(null, Predicates.translate(like));
    Predicate and = new org.apache.spark.sql.connector.expressions.filter.And(lt, like);
    assertEquals(Predicates.translate(lt), Predicates.translate(and), "AND pushes its translatable side");
    Predicate not = new org.apache.spark.sql.connector.expressions.filter.Not(and);
    assertEquals(null, Predicates.translate(not), "NOT of a half-translated AND is not pushed");
  }
}
