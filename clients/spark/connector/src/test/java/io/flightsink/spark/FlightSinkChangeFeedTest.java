package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.util.ArrowUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The change feed ({@code readChangeFeed}) end to end: batch ranges of a keyed table, and streams
 * of a keyed MemWAL table and a keyless one into a flight-sink table, checked against the feed the
 * server serves over Flight.
 */
class FlightSinkChangeFeedTest extends SparkServerTest {
  private long epochs;

  private void createKeyed(String table, boolean memwal) {
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("table", table);
    req.put("schema", List.of(Map.of("name", "id", "type", "int64"), Map.of("name", "v", "type", "utf8")));
    req.put("primary_key", List.of("id"));
    if (memwal) {
      req.put("memwal", Map.of("shards", 2));
    }
    FlightSinkClient.get(server.uri(), null).action("create_table", req);
  }

  /** One epoch of rows (id, v) in {@code mode} (append or update), acknowledged. */
  private void put(String table, String mode, long[] ids, String v) {
    Schema schema = new Schema(List.of(Field.nullable("id", new ArrowType.Int(64, true)),
        Field.nullable("v", ArrowType.Utf8.INSTANCE)));
    try (BufferAllocator alloc = ArrowUtils.rootAllocator().newChildAllocator("cf-put", 0, Long.MAX_VALUE);
         VectorSchemaRoot root = VectorSchemaRoot.create(schema, alloc)) {
      root.allocateNew();
      for (int i = 0; i < ids.length; i++) {
        ((BigIntVector) root.getVector("id")).setSafe(i, ids[i]);
        ((VarCharVector) root.getVector("v")).setSafe(i, (v + ids[i]).getBytes());
      }
      root.setRowCount(ids.length);
      Map<String, Object> cmd = new LinkedHashMap<>();
      cmd.put("table", table);
      cmd.put("query_id", "cf-writer");
      cmd.put("epoch_id", epochs++);
      cmd.put("mode", mode);
      cmd.put("create", true);
      try (FlightSinkClient.Put p = FlightSinkClient.get(server.uri(), null).new Put(cmd, root)) {
        p.putNext();
        String status = p.finish().path("status").asText();
        assertTrue(status.equals("committed"), status);
      }
    }
  }

  private void fold(String table) {
    FlightSinkClient c = FlightSinkClient.get(server.uri(), null);
    c.action("flush_memwal", Map.of("table", table));
    c.action("fold_memwal_shard", Map.of("table", table));
  }

  /** "version type id v" of every change row, sorted. */
  private static List<String> changes(List<Map<String, Object>> rows) {
    List<String> out = new ArrayList<>();
    for (Map<String, Object> r : rows) {
      out.add(r.get("_commit_version") + " " + r.get("_change_type") + " " + r.get("id") + " " + r.get("v"));
    }
    Collections.sort(out);
    return out;
  }

  private static List<String> changesOf(Dataset<Row> df) {
    List<Map<String, Object>> rows = new ArrayList<>();
    for (Row r : df.collectAsList()) {
      Map<String, Object> m = new LinkedHashMap<>();
      for (String c : List.of("_commit_version", "_change_type", "id", "v")) {
        m.put(c, r.getAs(c));
      }
      rows.add(m);
    }
    return changes(rows);
  }

  /** The server's feed of versions from..latest, read straight over Flight. */
  private List<String> serverFeed(String table, long from) {
    return changes(TestTables.rows(server.uri(), FlightSinkClient.json(
        ChangeFeed.command(table, from, null, null, null))));
  }

  private Dataset<Row> batch(String table, String from, String to) {
    var r = spark.read().format("flight-sink").option("uri", server.uri()).option("table", table)
        .option("readChangeFeed", "true").option("startingVersion", from);
    return (to == null ? r : r.option("endingVersion", to)).load();
  }

  @Test
  void batchReadsOfAKeyedTable() {
    String t = "cf_batch";
    createKeyed(t, false); // version 1: no changes
    put(t, "append", new long[] {0, 1, 2}, "a"); // 2
    put(t, "update", new long[] {1, 3}, "b"); // 3: key 1 updated, key 3 new
    FlightSinkClient.get(server.uri(), null).action("delete", Map.of("table", t,
        "where", Map.of("op", "=", "column", "id", "value", 0))); // 4
    Dataset<Row> all = batch(t, "1", "4");
    assertEquals(List.of("id", "v", "_change_type", "_commit_version", "_commit_timestamp"),
        List.of(all.schema().fieldNames()));
    assertEquals(List.of("2 insert 0 a0", "2 insert 1 a1", "2 insert 2 a2", "3 insert 3 b3",
        "3 update_postimage 1 b1", "3 update_preimage 1 a1", "4 delete 0 a0"), changesOf(all));
    assertEquals(List.of("3 insert 3 b3", "3 update_postimage 1 b1", "3 update_preimage 1 a1"),
        changesOf(batch(t, "3", "3")));
    assertEquals(serverFeed(t, 2), changesOf(batch(t, "2", null)), "no endingVersion: to the latest");
    assertEquals(7, all.count(), "a count reads one table column");
    // A filter on a table column is pushed, one on a change column stays in Spark.
    Dataset<Row> post = all.where("id = 1 AND _change_type = 'update_postimage'");
    assertEquals(List.of("3 update_postimage 1 b1"), changesOf(post));
    String plan = post.queryExecution().executedPlan().toString();
    assertTrue(plan.contains("\"column\":\"id\"") && !plan.contains("\"column\":\"_change_type\""), plan);

    Exception latest = assertThrows(Exception.class, () -> batch(t, "latest", null).collectAsList());
    assertTrue(String.valueOf(latest.getMessage()).contains("needs a version number"), latest.getMessage());
    Exception none = assertThrows(Exception.class, () -> spark.read().format("flight-sink")
        .option("uri", server.uri()).option("table", t).option("readChangeFeed", "true").load());
    assertTrue(String.valueOf(none.getMessage()).contains("readChangeFeed needs startingVersion"), none.getMessage());
  }

  @Test
  void streamOfAKeyedMemWalTableReadsEveryChangeOnceAcrossRestarts(@TempDir Path tmp) throws Exception {
    String src = "cf_stream_src";
    String dst = "cf_stream_dst";
    Path ckpt = tmp.resolve("ckpt");
    createKeyed(src, true);
    Runnable copy = () -> {
      try {
        Dataset<Row> in = spark.readStream().format("flight-sink").option("uri", server.uri()).option("table", src)
            .option("readChangeFeed", "true").option("startingVersion", "1").load();
        runAvailable(sink(in.writeStream(), dst, ckpt));
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    put(src, "update", new long[] {0, 1, 2, 3, 4}, "a");
    fold(src);
    copy.run();
    put(src, "update", new long[] {3, 4, 5}, "b");
    put(src, "update", new long[] {4, 5, 6}, "c"); // keys 4 and 5 twice in one fold
    fold(src);
    FlightSinkClient.get(server.uri(), null).action("delete", Map.of("table", src,
        "where", Map.of("op", "=", "column", "id", "value", 0)));
    copy.run();
    List<String> want = serverFeed(src, 1);
    assertTrue(want.contains("3 update_preimage 4 a4") || want.stream().anyMatch(s -> s.endsWith("update_postimage 4 c4")),
        "the feed has the fold's upserts: " + want);
    assertEquals(want, changes(TestTables.rows(server.uri(), dst)), "every change once across the restart");

    // The sink forgets it committed the last epoch: the restarted query replays that batch's
    // pinned range, and the sink's dedupe keeps each change once.
    List<String> commits = TestTables.epochCommits(server.uri(), dst);
    int last = Integer.parseInt(commits.get(commits.size() - 1).split("/")[1]);
    forgetCommit(ckpt, last);
    put(src, "update", new long[] {7}, "d");
    fold(src);
    copy.run();
    assertEquals(serverFeed(src, 1), changes(TestTables.rows(server.uri(), dst)), "the replayed batch landed once");
  }

  @Test
  void streamFromLatestStartsWhereItFirstStarted(@TempDir Path tmp) throws Exception {
    String src = "cf_latest_src";
    String dst = "cf_latest_dst";
    Path ckpt = tmp.resolve("ckpt");
    put(src, "append", new long[] {0, 1, 2}, "a");
    Runnable copy = () -> {
      try {
        Dataset<Row> in = spark.readStream().format("flight-sink").option("uri", server.uri()).option("table", src)
            .option("readChangeFeed", "true").option("startingVersion", "latest").load();
        runAvailable(sink(in.writeStream(), dst, ckpt));
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    copy.run(); // no new version: no batch, but the start is recorded in the checkpoint
    long before = FlightSinkClient.get(server.uri(), null).latestVersion(src);
    // A source asked for its start again (as after a driver killed before its first batch was in
    // the offset log) starts where it first did, though the table moved on.
    FlightSinkOptions o = FlightSinkOptions.parse(Map.of("uri", server.uri(), "table", src,
        "readChangeFeed", "true", "startingVersion", "latest"));
    String sourceDir = tmp.resolve("source").toString();
    long first = ((VersionOffset) new FlightSinkChangeFeedStream(o, new org.apache.spark.sql.types.StructType(), null,
        sourceDir).initialOffset()).version;
    assertEquals(before, first);
    put(src, "append", new long[] {3, 4}, "b");
    long again = ((VersionOffset) new FlightSinkChangeFeedStream(o, new org.apache.spark.sql.types.StructType(), null,
        sourceDir).initialOffset()).version;
    assertEquals(first, again, "the recorded start, not the latest version now");
    copy.run();
    assertEquals(serverFeed(src, before + 1), changes(TestTables.rows(server.uri(), dst)),
        "the changes after the version latest at the first start, none before");
    assertEquals(List.of(3L, 4L), TestTables.ids(server.uri(), dst).stream().sorted().collect(Collectors.toList()));
    assertTrue(Files.exists(ckpt.resolve("sources").resolve("0").resolve(FlightSinkChangeFeedStream.START_FILE)));
  }

  @Test
  void aRangeReachingACleanedVersionFailsNamingTheOldest() throws Exception {
    String t = "cf_cleaned";
    put(t, "append", new long[] {0}, "a");
    put(t, "append", new long[] {1}, "a");
    put(t, "append", new long[] {2}, "a");
    Thread.sleep(1100); // cleanup's shortest age is one second
    FlightSinkClient.get(server.uri(), null).action("cleanup", Map.of("table", t, "older_than_seconds", 1,
        "keep_last", 1));
    Exception e = assertThrows(Exception.class, () -> batch(t, "1", null).collectAsList());
    assertTrue(String.valueOf(e.getMessage()).contains("CHANGES_UNAVAILABLE"), e.getMessage());
  }
}
