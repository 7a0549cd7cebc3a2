package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertTrue;

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
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.DataStreamWriter;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;

/**
 * The fixture of the end-to-end suites: the connector in real Spark (local[2,2]: two cores, a
 * failed task is retried once) against a real flight-sink server built from this checkout, and
 * the helpers they share. The server describes every fragment as its own endpoint ({@code
 * --endpoint-bytes 1}), so reads have one Spark partition per fragment.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class SparkServerTest {
  static final String SCHEMA = "id long, k string, v long";

  TestServer server;
  SparkSession spark;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start("--endpoint-bytes", "1");
    spark = SparkSession.builder()
        .master("local[2,2]")
        .appName(getClass().getSimpleName())
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
  static void writeJson(Path dir, int index, long from, long to, String key) throws IOException {
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

  Dataset<Row> files(Path dir) {
    return spark.readStream().schema(SCHEMA).option("maxFilesPerTrigger", 1).json(dir.toString());
  }

  DataStreamWriter<Row> sink(DataStreamWriter<Row> w, String table, Path ckpt) {
    return w.format("flight-sink").option("uri", server.uri()).option("table", table)
        .option("checkpointLocation", ckpt.toString());
  }

  static StreamingQuery runAvailable(DataStreamWriter<Row> w) throws Exception {
    StreamingQuery q = w.trigger(Trigger.AvailableNow()).start();
    q.awaitTermination();
    assertTrue(q.exception().isEmpty(), () -> "query failed: " + q.exception().get());
    return q;
  }

  /** Creates table (id long, k string, v long) with two MemWAL shards. */
  void createMemWalTable(String table) {
    FlightSinkClient.get(server.uri(), null).action("create_table", Map.of("table", table,
        "schema", List.of(Map.of("name", "id", "type", "int64"), Map.of("name", "k", "type", "utf8"),
            Map.of("name", "v", "type", "int64")),
        "memwal", Map.of("shards", 2)));
  }

  /**
   * Makes the checkpoint forget that epoch was committed (as after a crash between the sink's
   * commit and Spark's commit log): a restarted query replays it.
   */
  static void forgetCommit(Path ckpt, int epoch) throws IOException {
    Files.delete(ckpt.resolve("commits").resolve(Integer.toString(epoch)));
    Files.deleteIfExists(ckpt.resolve("commits").resolve("." + epoch + ".crc"));
  }

  /** Two input files (rows 0..9 and 10..13 over keys k0..k2) as the count and max of v by k. */
  Dataset<Row> keyCounts(Path tmp) throws IOException {
    Path src = tmp.resolve("in");
    writeJson(src, 0, 0, 10, null);
    writeJson(src, 1, 10, 14, null);
    return files(src).groupBy("k").agg(functions.count("*").as("n"), functions.max("v").as("maxv"));
  }

  /** Column n of every row of a table keyed by k, by key; fails on a key seen twice. */
  Map<String, Long> counts(String table) {
    Map<String, Long> got = new TreeMap<>();
    for (Map<String, Object> r : TestTables.rows(server.uri(), table)) {
      Long prev = got.put((String) r.get("k"), ((Number) r.get("n")).longValue());
      assertTrue(prev == null, "key " + r.get("k") + " twice");
    }
    return got;
  }

  /** Stage files (staged partitions of multi-writer epochs) the server holds for table. */
  long stagedParts(String table) throws IOException {
    Path dir = server.root.resolve(table).resolve("_staging");
    if (!Files.isDirectory(dir)) {
      return 0;
    }
    try (var files = Files.list(dir)) {
      return files.count();
    }
  }

  static List<Long> range(long from, long to) {
    return LongStream.range(from, to).boxed().collect(Collectors.toList());
  }

  static List<Long> sorted(List<Long> in) {
    List<Long> out = new ArrayList<>(in);
    Collections.sort(out);
    return out;
  }
}
