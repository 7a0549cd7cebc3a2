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
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.DataStreamWriter;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Streaming writes end to end: exactly once across retried tasks and replayed epochs, MemWAL
 * tables, single-partition epochs, complete and update output modes.
 */
class FlightSinkStreamingWriteTest extends SparkServerTest {
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
        .option(InjectedFailure.OPTION, "1:0");
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
        .option(InjectedFailure.OPTION, "1:0"));
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
        .option(InjectedFailure.OPTION, "0:0"));
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
        .option(InjectedFailure.OPTION, "1:0"));
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
}
