package io.flightsink.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * {@code spark.readStream.format("flight-sink").option("readChangeFeed", "true")
 * .option("startingVersion", N | "latest")}: the table's change feed ({@link ChangeFeed}) as a
 * micro-batch source whose offsets are table versions ({@link VersionOffset}).
 *
 * <p>The offset {@code v} means every change of versions up to {@code v} was read. A query starts
 * at {@code startingVersion - 1}, or, with {@code latest}, at the version that was latest when it
 * first started, kept in the source's checkpoint directory (so a query restarted before its first
 * batch committed starts where it did). The end of each batch is the table's latest version (the
 * same {@code table_stats} look-up as the stream of appends), never below the start; a batch
 * {@code (start, end]} reads the changes of versions {@code start + 1 .. end}, one Spark partition
 * per GetFlightInfo endpoint. The range is pinned, so a replayed batch reads the same changes, and
 * offsets live in Spark's checkpoint: each change is read once across restarts. MemWAL epochs
 * appear at the fold that lands them. A range that reaches a version cleanup removed fails the
 * query with the server's {@code CHANGES_UNAVAILABLE}, naming the oldest version still readable.
 */
final class FlightSinkChangeFeedStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  /** The file in the source's checkpoint directory that keeps where a {@code latest} stream started. */
  static final String START_FILE = "flight-sink-starting-version";

  private final FlightSinkOptions opts;
  private final StructType schema;
  private final Map<String, Object> filter;
  private final String checkpointLocation;
  /** Trigger.AvailableNow's last version (the latest when the query started), or -1. */
  private long availableNowEnd = -1;

  FlightSinkChangeFeedStream(FlightSinkOptions opts, StructType schema, Map<String, Object> filter,
      String checkpointLocation) {
    if (opts.endingVersion() != null) {
      throw new IllegalArgumentException("flight-sink option endingVersion bounds a batch read of the "
          + "change feed; a stream reads on as versions come");
    }
    this.opts = opts;
    this.schema = schema;
    this.filter = filter;
    this.checkpointLocation = checkpointLocation;
  }

  @Override
  public Offset initialOffset() {
    if (!opts.startsAtLatest()) {
      return new VersionOffset(opts.startingVersion() - 1);
    }
    return new VersionOffset(startedAt());
  }

  /**
   * The version a {@code latest} stream starts after: the one recorded in the checkpoint, or the
   * latest now, recorded first.
   */
  private long startedAt() {
    Path file = new Path(checkpointLocation, START_FILE);
    try {
      Configuration conf = SparkSession.active().sessionState().newHadoopConf();
      FileSystem fs = file.getFileSystem(conf);
      if (fs.exists(file)) {
        return read(fs, file);
      }
      long latest = opts.client().latestVersion(opts.table());
      Path tmp = new Path(checkpointLocation, "." + START_FILE + "." + java.util.UUID.randomUUID() + ".tmp");
      try (OutputStream out = fs.create(tmp, false)) {
        out.write(new VersionOffset(latest).json().getBytes(StandardCharsets.UTF_8));
      }
      // Written whole before it is named: a restart reads either no file or this offset. A
      // rename that loses to another writer's keeps theirs, which is the one to start from.
      if (!fs.rename(tmp, file)) {
        fs.delete(tmp, false);
        return read(fs, file);
      }
      return latest;
    } catch (IOException e) {
      throw new FlightSinkException("flight-sink change feed of " + opts.table()
          + ": recording the starting version in " + file + ": " + e);
    }
  }

  private static long read(FileSystem fs, Path file) throws IOException {
    try (InputStream in = fs.open(file)) {
      return VersionOffset.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8)).version;
    }
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return ReadLimit.allAvailable();
  }

  /**
   * The latest version (under Trigger.AvailableNow at most the one latest when the query
   * started), or {@code start} when that is later: a stream started past the latest waits for it.
   */
  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    long latest = availableNowEnd >= 0 ? availableNowEnd : opts.client().latestVersion(opts.table());
    return new VersionOffset(Math.max(latest, ((VersionOffset) start).version));
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNowEnd = opts.client().latestVersion(opts.table());
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is the change feed's");
  }

  @Override
  public Offset deserializeOffset(String json) {
    return VersionOffset.parse(json);
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    long s = ((VersionOffset) start).version;
    long e = ((VersionOffset) end).version;
    if (e <= s) {
      return new InputPartition[0];
    }
    Map<String, Object> cmd = ChangeFeed.command(opts.table(), s + 1, e, ChangeFeed.tableColumns(opts, schema), filter);
    List<InputPartition> out = new ArrayList<>();
    for (FlightEndpoint ep : opts.client().flightInfo(cmd).getEndpoints()) {
      out.add(new FlightSinkScan.Part(ep.getTicket().getBytes()));
    }
    return out.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new FlightSinkScan.ReaderFactory(opts, schema);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
