package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Streaming reads of appends end to end: offsets are versions, each appended row once across
 * restarts, change commits skipped or failing the query.
 */
class FlightSinkStreamingReadTest extends SparkServerTest {
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
    long latest = ((VersionOffset) mbs.latestOffset()).version;
    InputPartition[] parts = mbs.planInputPartitions(new VersionOffset(latest - 1),
        new VersionOffset(latest));
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
}
