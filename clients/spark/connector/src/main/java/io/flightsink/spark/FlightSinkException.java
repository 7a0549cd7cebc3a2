package io.flightsink.spark;

import io.flightsink.spark.shaded.com.google.protobuf.Any;
import io.flightsink.spark.shaded.com.google.rpc.ErrorInfo;
import io.flightsink.spark.shaded.com.google.rpc.Status;
import org.apache.arrow.flight.ErrorFlightMetadata;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;

/**
 * A failed flight-sink call: the gRPC code, the server's message and the stable reason of its
 * {@code google.rpc.ErrorInfo} detail ({@code docs/protocol.md}, Errors), when it sent one.
 */
public final class FlightSinkException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String reason;
  private final FlightStatusCode code;

  FlightSinkException(String message, FlightStatusCode code, String reason, Throwable cause) {
    super(message, cause);
    this.code = code;
    this.reason = reason;
  }

  FlightSinkException(String message) {
    this(message, null, null, null);
  }

  /** The ErrorInfo reason ({@code TABLE_NOT_FOUND}, ...) or null. */
  public String reason() {
    return reason;
  }

  /** The Flight status code, or null for an error found by the client itself. */
  public FlightStatusCode code() {
    return code;
  }

  boolean isTableNotFound() {
    return "TABLE_NOT_FOUND".equals(reason) || (reason == null && code == FlightStatusCode.NOT_FOUND);
  }

  static FlightSinkException wrap(String what, String uri, FlightRuntimeException e) {
    String reason = reasonOf(e);
    FlightStatusCode code = e.status().code();
    String msg = what + " on " + uri + ": " + code + (reason != null ? " " + reason : "") + ": "
        + e.status().description();
    return new FlightSinkException(msg, code, reason, e);
  }

  private static String reasonOf(FlightRuntimeException e) {
    ErrorFlightMetadata md = e.status().metadata();
    if (md == null || !md.containsKey("grpc-status-details-bin")) {
      return null;
    }
    try {
      Status st = Status.parseFrom(md.getByte("grpc-status-details-bin"));
      for (Any a : st.getDetailsList()) {
        if (a.is(ErrorInfo.class)) {
          return a.unpack(ErrorInfo.class).getReason();
        }
      }
    } catch (Exception ignored) {
      // A detail this client cannot read: fall back on the code.
    }
    return null;
  }
}
