package io.flightsink.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.sql.util.ArrowUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The JVM's open Flight connections (a gRPC channel and its Arrow allocator), one per server and
 * token, shared by every task of the JVM (driver or executor) and reference counted: a call or
 * stream holds a {@link Lease} for as long as it uses the connection.
 *
 * <p>Bounded and closed: at most {@link #MAX_IDLE} connections stay open while no lease holds
 * them; opening one more closes the least recently used idle ones. A connection in use is never
 * closed under its leases; one evicted while in use is closed when its last lease is released. A
 * JVM shutdown hook closes every idle connection. A closed connection is opened again by the next
 * {@link #acquire}, so {@link FlightSinkClient} handles never go stale.
 */
final class FlightConnections {
  private static final Logger LOG = LoggerFactory.getLogger(FlightConnections.class);

  /** Idle connections kept open at most. */
  static final int MAX_IDLE = 16;

  /** By key, least recently used first. Guarded by the class lock, as is every Connection's leases/open. */
  private static final LinkedHashMap<String, Connection> OPEN = new LinkedHashMap<>(16, 0.75f, true);

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(FlightConnections::closeIdle, "flight-sink-connections"));
  }

  private FlightConnections() {}

  /** One gRPC channel to one server and the allocator its streams read into. */
  static final class Connection {
    final String key;
    final FlightClient client;
    final BufferAllocator allocator;
    /** Guarded by FlightConnections.class. */
    private int leases;
    /** Guarded by FlightConnections.class; false once evicted (closed when its leases end). */
    private boolean cached = true;
    private boolean closed;

    private Connection(String key, Location location) {
      this.key = key;
      this.allocator =
          ArrowUtils.rootAllocator().newChildAllocator("flight-sink " + location.getUri(), 0, Long.MAX_VALUE);
      this.client = FlightClient.builder(allocator, location).build();
    }

    /** Closes the channel (waiting a little for calls to end) and the allocator. */
    private void close() {
      try {
        client.close();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (Exception e) {
        LOG.debug("flight-sink: closing the connection to {}", key, e);
      }
      try {
        allocator.close();
      } catch (RuntimeException e) {
        // Buffers still held by a stream that was never closed: the allocator reports them.
        LOG.warn("flight-sink: closing the connection's allocator: {}", e.getMessage());
      }
    }
  }

  /** A use of a connection; release it exactly once (close). */
  static final class Lease implements AutoCloseable {
    final Connection connection;
    private boolean released;

    private Lease(Connection connection) {
      this.connection = connection;
    }

    FlightClient client() {
      return connection.client;
    }

    @Override
    public void close() {
      if (released) {
        return;
      }
      released = true;
      release(connection);
    }
  }

  /** A lease on the connection for {@code key} (at {@code location}), opening it if none is open. */
  static Lease acquire(String key, Location location) {
    List<Connection> evicted = new ArrayList<>();
    Lease lease;
    synchronized (FlightConnections.class) {
      Connection c = OPEN.get(key);
      if (c == null) {
        c = new Connection(key, location);
        OPEN.put(key, c);
        evictIdle(evicted);
      }
      c.leases++;
      lease = new Lease(c);
    }
    closeAll(evicted); // outside the lock: closing waits for the channel
    return lease;
  }

  private static void release(Connection c) {
    boolean close;
    synchronized (FlightConnections.class) {
      c.leases--;
      close = c.leases == 0 && !c.cached && !c.closed;
      if (close) {
        c.closed = true;
      }
    }
    if (close) {
      c.close();
    }
  }

  /** Removes the least recently used idle connections beyond MAX_IDLE into {@code out}. REQUIRES: the class lock. */
  private static void evictIdle(List<Connection> out) {
    int idle = 0;
    for (Connection c : OPEN.values()) {
      if (c.leases == 0) {
        idle++;
      }
    }
    for (Iterator<Connection> it = OPEN.values().iterator(); it.hasNext() && idle > MAX_IDLE; ) {
      Connection c = it.next();
      if (c.leases == 0) {
        it.remove();
        c.cached = false;
        c.closed = true;
        out.add(c);
        idle--;
      }
    }
  }

  /**
   * Closes every connection no lease holds (run at JVM shutdown); one in use is closed when its
   * last lease is released. Returns how many were closed now.
   */
  static int closeIdle() {
    List<Connection> idle = new ArrayList<>();
    synchronized (FlightConnections.class) {
      for (Iterator<Map.Entry<String, Connection>> it = OPEN.entrySet().iterator(); it.hasNext(); ) {
        Connection c = it.next().getValue();
        it.remove();
        c.cached = false;
        if (c.leases == 0) {
          c.closed = true;
          idle.add(c);
        }
      }
    }
    closeAll(idle);
    return idle.size();
  }

  private static void closeAll(List<Connection> cs) {
    for (Connection c : cs) {
      c.close();
    }
  }

  /** The number of connections the registry holds open (idle or in use). */
  static synchronized int open() {
    return OPEN.size();
  }

  /** Whether the registry holds a connection for {@code key}. */
  static synchronized boolean isOpen(String key) {
    return OPEN.containsKey(key);
  }
}
