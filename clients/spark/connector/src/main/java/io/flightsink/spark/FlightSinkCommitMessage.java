package io.flightsink.spark;

import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * What one write task hands the driver: its stage token (null for an empty partition or an epoch
 * the server already had), or, for an epoch the driver writes itself (a keyed update), the
 * partition's rows as Arrow IPC stream bytes.
 */
public final class FlightSinkCommitMessage implements WriterCommitMessage {
  private static final long serialVersionUID = 1L;

  public final int partition;
  public final int attempt;
  /** {@code staged}, {@code duplicate}, {@code empty} or {@code collected}. */
  public final String status;
  public final String stage;
  public final long rows;
  /** Arrow IPC stream of the partition's rows ({@code collected} only). */
  public final byte[] ipc;

  FlightSinkCommitMessage(int partition, int attempt, String status, String stage, long rows, byte[] ipc) {
    this.partition = partition;
    this.attempt = attempt;
    this.status = status;
    this.stage = stage;
    this.rows = rows;
    this.ipc = ipc;
  }

  @Override
  public String toString() {
    return "FlightSinkCommitMessage(partition=" + partition + ", attempt=" + attempt + ", status="
        + status + ", stage=" + stage + ", rows=" + rows + ")";
  }
}
