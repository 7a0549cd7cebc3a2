package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.VectorUnloader;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.util.ArrowUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver's half of a write: lands the epoch {@code (queryId, epochId)} as ONE transaction.
 *
 * <ul>
 *   <li>staged partitions: {@code commit_epoch} with the stage tokens of the attempts Spark kept
 *       (one per partition); {@code duplicate} (a replayed epoch) is success;
 *   <li>collected partitions (a keyed update epoch): one non-staged DoPut of every partition's
 *       rows with mode {@code update}: one Upsert, or {@code duplicate} on a replay;
 *   <li>a single-partition write whose task committed the epoch with its own DoPut: nothing left
 *       to do (the task's acknowledgement is the epoch's).
 * </ul>
 */
final class EpochCommitter {
  private static final Logger LOG = LoggerFactory.getLogger(EpochCommitter.class);

  private EpochCommitter() {}

  static JsonNode commit(EpochSpec spec, String queryId, long epochId, WriterCommitMessage[] messages) {
    List<FlightSinkCommitMessage> msgs = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      if (!(m instanceof FlightSinkCommitMessage)) {
        throw new FlightSinkException("flight-sink: epoch " + epochId + " of " + queryId
            + ": a write task left no commit message (" + m + "); not committing");
      }
      msgs.add((FlightSinkCommitMessage) m);
    }
    JsonNode ack = msgs.size() == 1 && msgs.get(0).ack != null
        ? FlightSinkClient.parse(msgs.get(0).ack.getBytes(StandardCharsets.UTF_8))
        : spec.collect ? putCollected(spec, queryId, epochId, msgs)
        : commitStages(spec, queryId, epochId, msgs);
    String status = ack.path("status").asText();
    if (!status.equals("committed") && !status.equals("duplicate") && !status.equals("empty")) {
      throw new FlightSinkException("flight-sink: epoch " + epochId + " of " + queryId
          + " was not committed to " + spec.opts.table() + ": " + ack);
    }
    LOG.info("flight-sink: epoch {} of {} -> {}", epochId, queryId, ack);
    for (FlightSinkCommitMessage m : msgs) {
      if (m.warning != null) {
        // A task's partition was a duplicate unlike the committed partition (logged on its
        // executor too): said again here, on the driver, where the query's log is read.
        LOG.warn("flight-sink: epoch {} of {} to {}, partition {}: {}", epochId, queryId, spec.opts.table(),
            m.partition, m.warning);
      }
    }
    if (ack.hasNonNull("warning")) {
      // The server found this replay unlike the committed epoch: two queries may share the query
      // id (started from copies of one checkpoint), and this one's rows were dropped.
      LOG.warn("flight-sink: epoch {} of {} to {}: {}", epochId, queryId, spec.opts.table(), ack.get("warning").asText());
    }
    return ack;
  }

  private static JsonNode commitStages(EpochSpec spec, String queryId, long epochId,
      List<FlightSinkCommitMessage> msgs) {
    TreeMap<Integer, String> stages = new TreeMap<>();
    for (FlightSinkCommitMessage m : msgs) {
      if (m.stage == null) {
        continue;
      }
      String prev = stages.put(m.partition, m.stage);
      if (prev != null) {
        throw new FlightSinkException("flight-sink: epoch " + epochId + ": two stages for partition "
            + m.partition + "; not committing");
      }
    }
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("table", spec.opts.table());
    body.put("query_id", queryId);
    body.put("epoch_id", epochId);
    body.put("mode", spec.mode);
    body.put("stages", new ArrayList<>(stages.values()));
    if (spec.opts.mergeSchema()) {
      body.put("merge_schema", true);
    }
    if (spec.opts.route() != null) {
      body.put("route", spec.opts.route()); // on a MemWAL table "auto" lands the epoch in its shards
    }
    if (spec.runId != null) {
      body.put("run_id", spec.runId);
    }
    FlightSinkClient client = spec.opts.client();
    try {
      return client.action("commit_epoch", body);
    } catch (FlightSinkException e) {
      if (!e.isTableNotFound() || !stages.isEmpty()) {
        throw e;
      }
      if (!spec.mode.equals("complete")) {
        // Every partition was empty and the table does not exist yet: nothing to commit.
        return FlightSinkClient.JSON.createObjectNode().put("status", "empty");
      }
      if (!spec.opts.create()) {
        throw e;
      }
      // An empty complete epoch before the table exists: create it from the epoch's schema and
      // commit the empty overwrite in one DoPut.
      return putRows(spec, queryId, epochId, List.of());
    }
  }

  private static JsonNode putCollected(EpochSpec spec, String queryId, long epochId,
      List<FlightSinkCommitMessage> msgs) {
    List<byte[]> parts = new ArrayList<>();
    long rows = 0;
    for (FlightSinkCommitMessage m : msgs) {
      if (m.ipc != null && m.rows > 0) {
        parts.add(m.ipc);
        rows += m.rows;
      }
    }
    if (rows == 0 && !spec.mode.equals("complete")) {
      return FlightSinkClient.JSON.createObjectNode().put("status", "empty");
    }
    return putRows(spec, queryId, epochId, parts);
  }

  /** One non-staged DoPut of the given Arrow IPC streams (none: an empty epoch). */
  private static JsonNode putRows(EpochSpec spec, String queryId, long epochId, List<byte[]> parts) {
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", spec.opts.table());
    cmd.put("query_id", queryId);
    cmd.put("epoch_id", epochId);
    cmd.put("mode", spec.mode);
    cmd.put("create", spec.opts.createValue());
    if (spec.opts.route() != null) {
      cmd.put("route", spec.opts.route());
    }
    if (spec.opts.mergeSchema()) {
      cmd.put("merge_schema", true);
    }
    if (spec.runId != null) {
      cmd.put("run_id", spec.runId);
    }
    try (BufferAllocator alloc = ArrowUtils.rootAllocator()
            .newChildAllocator("flight-sink driver put", 0, Long.MAX_VALUE);
         VectorSchemaRoot root = VectorSchemaRoot.create(FlightSinkDataWriter.arrowSchema(spec.schema), alloc)) {
      long total = 0;
      for (byte[] p : parts) {
        try (ArrowStreamReader r = new ArrowStreamReader(new ByteArrayInputStream(p), alloc)) {
          while (r.loadNextBatch()) {
            total += r.getVectorSchemaRoot().getRowCount();
          }
        }
      }
      cmd.put("rows", total);
      try (FlightSinkClient.Put put = spec.opts.client().new Put(cmd, root)) {
        for (byte[] p : parts) {
          try (ArrowStreamReader r = new ArrowStreamReader(new ByteArrayInputStream(p), alloc)) {
            VectorSchemaRoot src = r.getVectorSchemaRoot();
            while (r.loadNextBatch()) {
              VectorUnloader unloader = new VectorUnloader(src);
              try (ArrowRecordBatch rb = unloader.getRecordBatch()) {
                new VectorLoader(root).load(rb);
              }
              put.putNext();
            }
          }
        }
        return put.finish();
      }
    } catch (IOException e) {
      throw new IllegalStateException("flight-sink: reading a collected partition", e);
    }
  }
}
