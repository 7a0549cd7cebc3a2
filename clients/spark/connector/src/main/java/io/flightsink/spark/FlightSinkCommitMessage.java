package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * What one write task hands the driver: its stage token (null for an empty partition or an epoch
 * the server already had), or, for an epoch the driver writes itself (a keyed update), the
 * partition's rows as Arrow IPC stream bytes, or, from the only task of a single-partition write,
 * the acknowledgement of the DoPut that committed the epoch.
 */
public final class FlightSinkCommitMessage implements WriterCommitMessage {
  private static final long serialVersionUID = 1L;

  public final int partition;
  public final int attempt;
  /** {@code staged}, {@code duplicate}, {@code empty}, {@code collected} or {@code committed}. */
  public final String status;
  public final String stage;
  public final long rows;
  /** Arrow IPC stream of the partition's rows ({@code collected} only). */
  public final byte[] ipc;
  /** The server's acknowledgement (JSON) of an epoch this task committed itself, else null. */
  public final String ack;
  /**
   * The {@code warning} of the server's {@code duplicate} for this task's staged partition (its
   * rows differ from the committed partition's: another query may share the query id), else null.
   */
  public final String warning;

  FlightSinkCommitMessage(int partition, int attempt, String status, String stage, long rows, byte[] ipc,
      JsonNode ack) {
    this(partition, attempt, status, stage, rows, ipc, ack, null);
  }

  FlightSinkCommitMessage(int partition, int attempt, String status, String stage, long rows, byte[] ipc,
      JsonNode ack, String warning) {
    this.partition = partition;
    this.attempt = attempt;
    this.status = status;
    this.stage = stage;
    this.rows = rows;
    this.ipc = ipc;
    this.ack = ack == null ? null : ack.toString();
    this.warning = warning;
  }

  @Override
  public String toString() {
    return "FlightSinkCommitMessage(partition=" + partition + ", attempt=" + attempt + ", status="
        + status + ", stage=" + stage + ", rows=" + rows + ")";
  }
}
