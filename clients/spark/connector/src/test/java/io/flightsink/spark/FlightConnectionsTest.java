package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.flight.Location;
import org.junit.jupiter.api.Test;

/**
 * The connection registry is bounded and closes what it drops, without a server: a Flight client
 * connects lazily, so connections to ports nothing listens on open and close without a call.
 */
class FlightConnectionsTest {
  private static Location loc(int port) {
    return Location.forGrpcInsecure("127.0.0.1", port);
  }

  private static String key(int port) {
    return "connections-test-" + port;
  }

  @Test
  void idleConnectionsAreBoundedAndClosed() {
    FlightConnections.closeIdle();
    List<FlightConnections.Connection> first = new ArrayList<>();
    int n = FlightConnections.MAX_IDLE + 5;
    for (int i = 1; i <= n; i++) {
      try (FlightConnections.Lease l = FlightConnections.acquire(key(i), loc(i))) {
        first.add(l.connection);
      }
      assertTrue(FlightConnections.open() <= FlightConnections.MAX_IDLE + 1,
          "open after " + i + ": " + FlightConnections.open());
    }
    assertTrue(FlightConnections.open() <= FlightConnections.MAX_IDLE);
    assertFalse(FlightConnections.isOpen(key(1)), "the least recently used went first");
    assertTrue(FlightConnections.isOpen(key(n)));
    // A dropped connection's allocator is closed: it refuses new buffers.
    assertThrowsOnAllocate(first.get(0));
    // Asking again opens a new one.
    try (FlightConnections.Lease l = FlightConnections.acquire(key(1), loc(1))) {
      assertNotSame(first.get(0), l.connection);
    }
    assertTrue(FlightConnections.closeIdle() > 0);
    assertTrue(FlightConnections.open() == 0);
    assertThrowsOnAllocate(first.get(n - 1));
  }

  @Test
  void aConnectionInUseIsNeverClosedUnderItsLease() {
    FlightConnections.closeIdle();
    FlightConnections.Lease held = FlightConnections.acquire(key(1000), loc(1000));
    try (FlightConnections.Lease again = FlightConnections.acquire(key(1000), loc(1000))) {
      assertSame(held.connection, again.connection, "one connection per key");
    }
    for (int i = 1001; i <= 1001 + FlightConnections.MAX_IDLE + 2; i++) {
      FlightConnections.acquire(key(i), loc(i)).close();
    }
    assertTrue(FlightConnections.isOpen(key(1000)), "not evicted while leased");
    FlightConnections.closeIdle(); // as at shutdown: the leased one stays open until released
    held.connection.allocator.buffer(8).close();
    held.close();
    held.close(); // a second release changes nothing
    assertThrowsOnAllocate(held.connection);
  }

  private static void assertThrowsOnAllocate(FlightConnections.Connection c) {
    boolean refused;
    try {
      c.allocator.buffer(8).close();
      refused = false;
    } catch (RuntimeException e) {
      refused = true;
    }
    assertTrue(refused, "the connection's allocator is closed");
  }
}
