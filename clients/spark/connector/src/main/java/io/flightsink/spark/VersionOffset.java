package io.flightsink.spark;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * The offset of the connector's streaming reads, {@code {"version": v}}: the table version whose
 * changes (or appended rows) the stream has read up to, inclusive. Spark keeps it in the
 * checkpoint's offset log, so a restarted query reads from where its last batch ended.
 */
final class VersionOffset extends Offset {
  final long version;

  VersionOffset(long version) {
    this.version = version;
  }

  /** The offset {@link #json()} wrote. */
  static VersionOffset parse(String json) {
    return new VersionOffset(FlightSinkClient.parse(json.getBytes(StandardCharsets.UTF_8)).path("version").asLong());
  }

  @Override
  public String json() {
    return "{\"version\": " + version + "}";
  }
}
