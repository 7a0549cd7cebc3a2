package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.util.ArrowUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's writer: streams the partition's rows as Arrow batches in ONE DoPut carrying {@code
 * "partition": {"id", "attempt"}} (the server stages them) and returns the stage token in its
 * commit message. An empty partition sends nothing. In collect mode (a keyed update epoch, which
 * the server cannot stage) the rows go to the driver in the commit message instead.
 *
 * <p>The one task of a single-partition streaming write ({@code whole}) lands the epoch itself: one
 * non-staged DoPut with {@code (query id, epoch id)}, which commits the epoch in one transaction
 * (an upsert for a keyed update epoch) or answers {@code duplicate} for an epoch the server already
 * has, so a retried attempt or a replayed epoch commits nothing twice. The driver then has nothing
 * left to commit. An empty partition still leaves the epoch to the driver (an empty complete epoch
 * truncates).
 *
 * <p>The DoPut starts with the first row, so a task streams its rows while Spark computes them;
 * the stage stays invisible until the driver's {@code commit_epoch} names it. A failure or abort
 * cancels the stream (nothing is staged); a stage of an attempt that failed later is never
 * committed (the server's cleanup removes it).
 */
final class FlightSinkDataWriter implements DataWriter<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(FlightSinkDataWriter.class);

  /**
   * Rows per Arrow batch at most; a batch is also sent once its vectors hold 1 MiB, measured after
   * every row, so a batch stays within one row's size of that, far below the server's message
   * limit (256 MiB) unless one row is that large.
   */
  static final int BATCH_ROWS = 8192;
  static final long BATCH_BYTES = 1L << 20;

  private final EpochSpec spec;
  private final String queryId;
  private final long epochId;
  private final int partition;
  private final int attempt;
  private final boolean whole;

  private BufferAllocator allocator;
  private VectorSchemaRoot root;
  private ArrowWriter arrow;
  private FlightSinkClient.Put put;
  private ArrowStreamWriter ipcWriter;
  private ByteArrayOutputStream ipc;
  private int pending;
  private long rows;

  /** whole: this is the write's only partition, whose DoPut commits the epoch (above). */
  FlightSinkDataWriter(EpochSpec spec, String queryId, long epochId, int partition, int attempt, boolean whole) {
    this.spec = spec;
    this.queryId = queryId;
    this.epochId = epochId;
    this.partition = partition;
    this.attempt = attempt;
    this.whole = whole;
  }

  static Schema arrowSchema(org.apache.spark.sql.types.StructType schema) {
    return SparkArrow.toArrowSchema(schema);
  }

  private void open() {
    allocator = ArrowUtils.rootAllocator()
        .newChildAllocator("flight-sink writer " + partition + "." + attempt, 0, Long.MAX_VALUE);
    root = VectorSchemaRoot.create(arrowSchema(spec.schema), allocator);
    arrow = SparkArrow.writer(root);
    if (spec.collect && !whole) {
      ipc = new ByteArrayOutputStream();
      ipcWriter = new ArrowStreamWriter(root, null, Channels.newChannel(ipc));
      try {
        ipcWriter.start();
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    } else {
      put = spec.opts.client().new Put(command(), root);
    }
  }

  private Map<String, Object> command() {
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", spec.opts.table());
    cmd.put("query_id", queryId);
    cmd.put("epoch_id", epochId);
    cmd.put("mode", spec.mode);
    if (!whole) {
      Map<String, Object> part = new LinkedHashMap<>();
      part.put("id", partition);
      part.put("attempt", attempt);
      cmd.put("partition", part);
    }
    cmd.put("create", spec.opts.createValue());
    if (spec.opts.route() != null) {
      cmd.put("route", spec.opts.route());
    }
    if (spec.opts.mergeSchema()) {
      cmd.put("merge_schema", true); // only when true: older servers see the requests they know
    }
    if (spec.runId != null) {
      cmd.put("run_id", spec.runId);
    }
    return cmd;
  }

  @Override
  public void write(InternalRow row) {
    if (root == null) {
      open();
    }
    arrow.write(row);
    pending++;
    rows++;
    if (pending >= BATCH_ROWS || SparkArrow.sizeInBytes(arrow) >= BATCH_BYTES) {
      flush();
    }
  }

  private void flush() {
    if (pending == 0) {
      return;
    }
    arrow.finish();
    if (ipcWriter != null) {
      try {
        ipcWriter.writeBatch();
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    } else {
      put.putNext();
    }
    arrow.reset();
    pending = 0;
  }

  @Override
  public WriterCommitMessage commit() {
    if (root == null) {
      return new FlightSinkCommitMessage(partition, attempt, "empty", null, 0, null, null);
    }
    flush();
    if (ipcWriter != null) {
      try {
        ipcWriter.end();
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
      return new FlightSinkCommitMessage(partition, attempt, "collected", null, rows, ipc.toByteArray(), null);
    }
    JsonNode ack = put.finish();
    String status = ack.path("status").asText();
    if (whole) {
      if (!status.equals("committed") && !status.equals("duplicate")) {
        throw new FlightSinkException("flight-sink: epoch " + epochId + " of " + queryId
            + " was not committed to " + spec.opts.table() + ": " + ack);
      }
      failIfInjected(ack.toString());
      return new FlightSinkCommitMessage(partition, attempt, status, null, ack.path("rows").asLong(rows), null, ack);
    }
    if (!status.equals("staged") && !status.equals("duplicate")) {
      throw new FlightSinkException("flight-sink: partition " + partition + " of epoch " + epochId
          + " of " + queryId + ": unexpected acknowledgement " + ack);
    }
    String stage = ack.hasNonNull("stage") ? ack.get("stage").asText() : null;
    String warning = ack.hasNonNull("warning") ? ack.get("warning").asText() : null;
    if (warning != null) {
      LOG.warn("flight-sink: partition {} of epoch {} of {} to {}: {}", partition, epochId, queryId,
          spec.opts.table(), warning);
    }
    failIfInjected("stage " + stage);
    return new FlightSinkCommitMessage(partition, attempt, status, stage, ack.path("rows").asLong(rows), null,
        null, warning);
  }

  /** The test hook {@link InjectedFailure}: fails this attempt once its rows were sent. */
  private void failIfInjected(String what) {
    InjectedFailure.failIfHit(spec.failure, partition, attempt, what);
  }

  @Override
  public void abort() {
    if (put != null) {
      put.close(); // cancels the DoPut when it has not finished: nothing is staged
    }
  }

  @Override
  public void close() {
    if (put != null) {
      put.close();
      put = null;
    }
    if (root != null) {
      root.close();
      root = null;
    }
    if (allocator != null) {
      allocator.close();
      allocator = null;
    }
  }
}
