package io.flightsink.spark;

import java.io.Serializable;
import org.apache.spark.sql.types.StructType;

/**
 * What the tasks of one write need to know, decided on the driver: the options, the data schema,
 * the query id (null: streaming epochs take the epoch id Spark hands each writer), the protocol
 * mode, whether the partitions are staged or collected for one driver-side DoPut, the run of
 * the streaming query (Spark's {@code StreamingQuery.runId}, sent as {@code run_id}; null for a
 * batch write or when unknown), and the test hook {@link InjectedFailure} when the options set it.
 */
final class EpochSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  final FlightSinkOptions opts;
  final StructType schema;
  final String queryId;
  /** {@code append}, {@code complete} or {@code update}. */
  final String mode;
  /** True: tasks ship their rows to the driver, which upserts the epoch in one DoPut. */
  final boolean collect;
  /** The test hook's failure, or null. */
  final InjectedFailure failure;
  final String runId;

  EpochSpec(FlightSinkOptions opts, StructType schema, String queryId, String mode, boolean collect) {
    this(opts, schema, queryId, mode, collect, null);
  }

  EpochSpec(FlightSinkOptions opts, StructType schema, String queryId, String mode, boolean collect,
      String runId) {
    this.opts = opts;
    this.schema = schema;
    this.queryId = queryId;
    this.mode = mode;
    this.collect = collect;
    this.failure = InjectedFailure.parse(opts.raw());
    this.runId = runId;
  }
}
