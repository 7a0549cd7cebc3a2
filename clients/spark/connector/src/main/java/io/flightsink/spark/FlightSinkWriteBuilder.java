package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes. {@link SupportsTruncate} gives Spark's complete output mode and {@code
 * mode("overwrite")} (protocol mode {@code complete}: one Overwrite per epoch, an empty epoch
 * truncates); {@link SupportsStreamingUpdateAsAppend} lets update-mode queries run.
 *
 * <p>Spark builds append and update output modes the same way (its {@code build()} is not told
 * which one runs), so the mode of a non-complete streaming epoch is decided by the table: on a
 * table with a primary key (or one about to be created with {@code primaryKey}) every such epoch
 * lands as one Upsert (protocol mode {@code update}), which for an append-only stream of new keys
 * is the same as an append; on a table without one, update is append. On a keyed table with
 * MemWAL shards the keyed epoch is staged like any other and its commit upserts through the
 * shards. Elsewhere staged partitions cannot upsert ({@code UNSUPPORTED}), so a keyed epoch's
 * tasks ship their rows (Arrow IPC) to the driver in their commit messages and the driver lands
 * them in one DoPut: exactly once, one transaction, bounded by the driver's memory ({@code
 * spark.driver.maxResultSize}).
 */
final class FlightSinkWriteBuilder implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
  private static final Logger LOG = LoggerFactory.getLogger(FlightSinkWriteBuilder.class);

  private final FlightSinkOptions opts;
  private final LogicalWriteInfo info;
  private boolean truncate;

  FlightSinkWriteBuilder(FlightSinkOptions opts, LogicalWriteInfo info) {
    this.opts = opts;
    this.info = info;
  }

  @Override
  public WriteBuilder truncate() {
    truncate = true;
    return this;
  }

  @Override
  public Write build() {
    final boolean complete = truncate;
    return new Write() {
      @Override
      public String description() {
        return "flight-sink " + opts.table() + " at " + opts.uri() + (complete ? " (complete)" : "");
      }

      @Override
      public BatchWrite toBatch() {
        String qid = opts.queryId() != null ? opts.queryId() : "spark-write-" + UUID.randomUUID();
        if (!opts.partitionBy().isEmpty()) {
          checkPartitioning(opts, tableKind(opts));
        }
        return new Batch(new EpochSpec(opts, info.schema(), qid, complete ? "complete" : "append", false));
      }

      @Override
      public StreamingWrite toStreaming() {
        // LogicalWriteInfo.queryId() is the streaming query's id (StreamingQuery.id, stable across
        // restarts from the checkpoint), not its per-run runId: see the restart test.
        String qid = opts.queryId() != null ? opts.queryId() : info.queryId();
        String run = streamingRunId(info.queryId());
        if (complete) {
          if (!opts.partitionBy().isEmpty()) {
            checkPartitioning(opts, streamingTableKind(opts, qid));
          }
          return new Streaming(new EpochSpec(opts, info.schema(), qid, "complete", false, run));
        }
        TableKind kind = streamingTableKind(opts, qid);
        checkPartitioning(opts, kind);
        return new Streaming(new EpochSpec(opts, info.schema(), qid, kind.keyed ? "update" : "append",
            kind.collectUpdates(opts), run));
      }
    };
  }

  /** Whether a table has a primary key and MemWAL shards, whether it exists, and its partition spec. */
  static final class TableKind {
    final boolean keyed;
    final boolean memwal;
    final boolean exists;
    /** The spec's fields as {@link PartitionTransforms#fields} names them; empty: unpartitioned. */
    final List<String> partitionBy;

    TableKind(boolean keyed, boolean memwal, boolean exists, List<String> partitionBy) {
      this.keyed = keyed;
      this.memwal = memwal;
      this.exists = exists;
      this.partitionBy = partitionBy;
    }

    /**
     * Whether a keyed epoch goes through the driver: the server upserts staged partitions only
     * when their commit lands in MemWAL shards (a MemWAL table, route not {@code direct}).
     */
    boolean collectUpdates(FlightSinkOptions opts) {
      return keyed && !(memwal && !"direct".equals(opts.route()));
    }
  }

  /** Table kinds remembered at most (the least recently used are forgotten first). */
  static final int MAX_KINDS = 1024;

  /**
   * Table kinds of running streaming queries, by server, table and query id, least recently used
   * first. Spark builds a streaming query's write anew for every micro-batch; the kind is asked
   * for once (one {@code table_stats}) and asked again after an epoch of that query failed or was
   * aborted, or once {@link #MAX_KINDS} more recent queries pushed it out. Guarded by itself.
   */
  private static final Map<String, TableKind> KINDS = new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, TableKind> eldest) {
      return size() > MAX_KINDS;
    }
  };

  private static String kindKey(FlightSinkOptions opts, String queryId) {
    return opts.uri() + "\u0000" + opts.table() + "\u0000" + queryId;
  }

  static TableKind streamingTableKind(FlightSinkOptions opts, String queryId) {
    String key = kindKey(opts, queryId);
    synchronized (KINDS) {
      TableKind k = KINDS.get(key);
      if (k != null) {
        return k;
      }
    }
    TableKind k = tableKind(opts); // outside the lock: a server call
    synchronized (KINDS) {
      KINDS.put(key, k);
    }
    return k;
  }

  /** Whether the kind of a query's table is remembered. */
  static boolean knowsTableKind(FlightSinkOptions opts, String queryId) {
    synchronized (KINDS) {
      return KINDS.containsKey(kindKey(opts, queryId));
    }
  }

  static void forgetTableKind(FlightSinkOptions opts, String queryId) {
    synchronized (KINDS) {
      KINDS.remove(kindKey(opts, queryId));
    }
  }

  /** The table's kind (or that of the table the write will create: keyed, no shards). */
  static TableKind tableKind(FlightSinkOptions opts) {
    try {
      JsonNode stats = opts.client().action("table_stats", Map.of("table", opts.table()));
      JsonNode pk = stats == null ? null : stats.get("primary_key");
      boolean memwal = stats != null && stats.path("memwal").path("shards").size() > 0;
      return new TableKind(pk != null && pk.isArray() && pk.size() > 0, memwal, true,
          PartitionTransforms.fields(stats == null ? null : stats.get("partition_by")));
    } catch (FlightSinkException e) {
      if (e.isTableNotFound()) {
        return new TableKind(opts.create() && !opts.primaryKey().isEmpty(), false, false, List.of());
      }
      throw e;
    }
  }

  /**
   * The run id ({@code StreamingQuery.runId}) of the streaming query {@code sparkQueryId} whose
   * write is being built, or null. Spark builds a micro-batch's write on the query's stream
   * execution thread, whose jobs it runs in a job group named by the run id, beside the local
   * property {@code sql.streaming.queryId} (StreamExecution.runStream, Spark 3 and 4); the
   * DSv2 write is given the query id only ({@link LogicalWriteInfo#queryId()}). The job group is
   * taken only on that thread of that query. The server refuses a run that writes after a newer
   * run of its query began ({@code QUERY_RUN_SUPERSEDED}): two queries started from copies of one
   * checkpoint.
   */
  static String streamingRunId(String sparkQueryId) {
    SparkContext sc = SparkContext.getOrCreate();
    if (sparkQueryId == null || !sparkQueryId.equals(sc.getLocalProperty(STREAMING_QUERY_ID))) {
      return null;
    }
    String group = sc.getLocalProperty(JOB_GROUP_ID);
    return group == null || group.isBlank() ? null : group;
  }

  private static final String STREAMING_QUERY_ID = "sql.streaming.queryId";
  private static final String JOB_GROUP_ID = "spark.jobGroup.id"; // SparkContext.SPARK_JOB_GROUP_ID

  /**
   * Fails when the write asks for a partition spec ({@code partitionBy}) and the table exists with
   * another: a table's spec is set when it is created and never changes, and the server creates
   * nothing for a write to an existing table, so the spec asked for would be dropped silently.
   */
  static void checkPartitioning(FlightSinkOptions opts, TableKind kind) {
    if (opts.partitionBy().isEmpty() || !kind.exists) {
      return;
    }
    List<String> want = PartitionTransforms.fields(opts.partitionBy());
    if (!want.equals(kind.partitionBy)) {
      throw new IllegalArgumentException("flight-sink: table " + opts.table() + " exists "
          + (kind.partitionBy.isEmpty() ? "unpartitioned" : "partitioned by " + kind.partitionBy)
          + ", not partitioned by " + want + " as partitionBy asks; a table's partition spec is set when"
          + " the table is created and never changes: write without partitionBy, or to a new table");
    }
  }

  static int attempt() {
    TaskContext ctx = TaskContext.get();
    return ctx == null ? 0 : ctx.attemptNumber();
  }

  /** The tasks' writers; whole: a streaming write of one partition, whose task commits the epoch. */
  static final class Writers implements DataWriterFactory, StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final EpochSpec spec;
    private final boolean whole;

    Writers(EpochSpec spec, boolean whole) {
      this.spec = spec;
      this.whole = whole;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return createWriter(partitionId, taskId, 0);
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      return new FlightSinkDataWriter(spec, spec.queryId, epochId, partitionId, attempt(), whole);
    }
  }

  /**
   * {@code df.write}: every task stages, the driver commits once (epoch 0 of a fresh query id),
   * a single-partition write too. A task never commits a batch write itself: Spark does not
   * replay a failed batch job, so rows a task committed before the job failed would stay, and
   * running the write again would land them twice.
   */
  static final class Batch implements BatchWrite {
    // As for streaming writes (below): the commit names the stages of the messages it is given.
    @Override
    public boolean useCommitCoordinator() {
      return false;
    }

    private final EpochSpec spec;

    Batch(EpochSpec spec) {
      this.spec = spec;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return new Writers(spec, false);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      EpochCommitter.commit(spec, spec.queryId, 0, messages);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      LOG.warn("flight-sink: write {} to {} aborted; nothing was committed (its stages expire)",
          spec.queryId, spec.opts.table());
    }
  }

  /**
   * Streaming: stage per task, one {@code commit_epoch} per micro-batch on the driver; a
   * single-partition micro-batch is committed by its task's DoPut (FlightSinkDataWriter).
   */
  static final class Streaming implements StreamingWrite {
    private final EpochSpec spec;

    Streaming(EpochSpec spec) {
      this.spec = spec;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      return new Writers(spec, info.numPartitions() == 1);
    }

    // No commit coordinator: the driver commits exactly the stages of the messages Spark hands
    // it, one per partition; a failed or duplicate attempt's stage is never named and expires.
    // The coordinator would add only a race in which a retried attempt is denied while the
    // failure of an authorized earlier attempt is still being processed.
    @Override
    public boolean useCommitCoordinator() {
      return false;
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
      try {
        EpochCommitter.commit(spec, spec.queryId, epochId, messages);
      } catch (RuntimeException e) {
        forgetTableKind(spec.opts, spec.queryId);
        throw e;
      }
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
      forgetTableKind(spec.opts, spec.queryId);
      LOG.warn("flight-sink: epoch {} of {} aborted; nothing was committed (its stages expire)",
          epochId, spec.queryId);
    }
  }
}
