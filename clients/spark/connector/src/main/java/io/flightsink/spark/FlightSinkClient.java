package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallHeaders;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.PutResult;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SchemaResult;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A handle on one flight-sink server for one token: each call leases the JVM's shared connection
 * to it ({@link FlightConnections}, bounded and closed), so a handle is cheap and never goes
 * stale. Requests are JSON ({@code docs/protocol.md}); every failure is a {@link
 * FlightSinkException} carrying the server's reason.
 */
final class FlightSinkClient {
  static final ObjectMapper JSON = new ObjectMapper();

  final String uri;
  private final String key;
  private final Location location;
  private final CallOption[] callOptions;

  private FlightSinkClient(String uri, String token) {
    this.uri = uri;
    this.key = uri + "\u0000" + (token == null ? "" : token);
    this.location = location(uri);
    if (token != null) {
      CallHeaders h = new FlightCallHeaders();
      h.insert("authorization", "Bearer " + token);
      this.callOptions = new CallOption[] {new HeaderCallOption(h)};
    } else {
      this.callOptions = new CallOption[0];
    }
  }

  /** The handle for {@code uri} and {@code token} (null: none); fails on a URI that is not Flight's. */
  static FlightSinkClient get(String uri, String token) {
    return new FlightSinkClient(uri, token);
  }

  /** A lease on the shared connection; close it when the call or stream ends. */
  private FlightConnections.Lease lease() {
    return FlightConnections.acquire(key, location);
  }

  /** Runs {@code call} on a leased connection. */
  private <T> T leased(java.util.function.Function<FlightClient, T> call) {
    try (FlightConnections.Lease l = lease()) {
      return call.apply(l.client());
    }
  }

  private static Location location(String uri) {
    URI u = URI.create(uri.contains("://") ? uri : "grpc://" + uri);
    String scheme = u.getScheme();
    switch (scheme) {
      case "grpc":
      case "grpc+tcp":
        return Location.forGrpcInsecure(u.getHost(), u.getPort());
      case "grpc+tls":
        return Location.forGrpcTls(u.getHost(), u.getPort());
      default:
        throw new IllegalArgumentException(
            "flight-sink uri must be grpc://host:port, grpc+tcp:// or grpc+tls://, got " + uri);
    }
  }

  static byte[] json(Object o) {
    try {
      return JSON.writeValueAsBytes(o);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  static JsonNode parse(byte[] b) {
    try {
      return JSON.readTree(b);
    } catch (Exception e) {
      throw new FlightSinkException("flight-sink: a reply that is not JSON: "
          + new String(b, StandardCharsets.UTF_8));
    }
  }

  /**
   * Attempts of an idempotent call that fails {@code UNAVAILABLE} (a server restarting, a
   * connection refused or dropped): the first and up to four more, {@link
   * #UNAVAILABLE_FIRST_WAIT_MS} apart doubling (about 4 s in all, longer than gRPC's first
   * reconnect backoff of about 1 s, within which a channel fails calls at once).
   */
  static final int UNAVAILABLE_ATTEMPTS = 5;
  static final long UNAVAILABLE_FIRST_WAIT_MS = 250;

  /**
   * The actions the connector may send twice: reads, and {@code commit_epoch}, whose second
   * arrival answers {@code duplicate} when the first landed.
   */
  private static final java.util.Set<String> IDEMPOTENT_ACTIONS = java.util.Set.of("table_stats", "history", "commit_epoch");

  /** Runs {@code call}, again after a wait while it fails UNAVAILABLE (UNAVAILABLE_ATTEMPTS). */
  private static <T> T retryUnavailable(java.util.function.Supplier<T> call) {
    long wait = UNAVAILABLE_FIRST_WAIT_MS;
    for (int attempt = 1; ; attempt++) {
      try {
        return call.get();
      } catch (FlightRuntimeException e) {
        if (e.status().code() != org.apache.arrow.flight.FlightStatusCode.UNAVAILABLE
            || attempt >= UNAVAILABLE_ATTEMPTS) {
          throw e;
        }
      }
      try {
        Thread.sleep(wait);
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        throw new FlightSinkException("flight-sink: interrupted while waiting to retry an unavailable server");
      }
      wait *= 2;
    }
  }

  /**
   * Runs a DoAction and returns its (single) JSON result, or null when it returned none. An
   * idempotent action ({@link #IDEMPOTENT_ACTIONS}) is retried while the server is unavailable.
   */
  JsonNode action(String type, Object body) {
    java.util.function.Supplier<JsonNode> call = () -> leased(client -> {
      Iterator<Result> it = client.doAction(new Action(type, json(body)), callOptions);
      JsonNode out = null;
      while (it.hasNext()) {
        Result r = it.next();
        if (out == null) {
          out = parse(r.getBody());
        }
      }
      return out;
    });
    try {
      return IDEMPOTENT_ACTIONS.contains(type) ? retryUnavailable(call) : call.get();
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("action " + type + " " + new String(json(body), StandardCharsets.UTF_8), uri, e);
    }
  }

  /**
   * The table's latest version ({@code table_stats}' {@code version}): the end offset of a
   * streaming read; 0 for a table that does not exist yet.
   */
  long latestVersion(String table) {
    try {
      JsonNode stats = action("table_stats", java.util.Map.of("table", table));
      return stats == null ? 0 : stats.path("version").asLong(0);
    } catch (FlightSinkException e) {
      if (e.isTableNotFound()) {
        return 0;
      }
      throw e;
    }
  }

  /** The names of the server's tables (ListFlights: one PATH descriptor per table). */
  List<String> listTables() {
    try {
      return retryUnavailable(() -> leased(c -> {
        List<String> names = new ArrayList<>();
        for (FlightInfo info : c.listFlights(org.apache.arrow.flight.Criteria.ALL, callOptions)) {
          List<String> path = info.getDescriptor().getPath();
          if (path != null && !path.isEmpty()) {
            names.add(path.get(0));
          }
        }
        return names;
      }));
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("ListFlights", uri, e);
    }
  }

  FlightInfo flightInfo(Object cmd) {
    try {
      return retryUnavailable(() -> leased(c -> c.getInfo(FlightDescriptor.command(json(cmd)), callOptions)));
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("GetFlightInfo " + new String(json(cmd), StandardCharsets.UTF_8), uri, e);
    }
  }

  Schema schema(Object cmd) {
    try {
      SchemaResult r = retryUnavailable(
          () -> leased(c -> c.getSchema(FlightDescriptor.command(json(cmd)), callOptions)));
      return r.getSchema();
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("GetSchema " + new String(json(cmd), StandardCharsets.UTF_8), uri, e);
    }
  }

  /** Starts a DoGet of {@code ticket}; the stream holds its connection until closed. */
  Get doGet(byte[] ticket) {
    FlightConnections.Lease l = lease();
    try {
      return new Get(l, l.client().getStream(new Ticket(ticket), callOptions));
    } catch (FlightRuntimeException e) {
      l.close();
      throw FlightSinkException.wrap("DoGet", uri, e);
    } catch (RuntimeException e) {
      l.close();
      throw e;
    }
  }

  /** One DoGet stream (Flight's {@link FlightStream}) and the lease it reads on. */
  static final class Get implements AutoCloseable {
    private final FlightConnections.Lease lease;
    private final FlightStream stream;

    private Get(FlightConnections.Lease lease, FlightStream stream) {
      this.lease = lease;
      this.stream = stream;
    }

    /** Loads the next batch into {@link #getRoot()}; false at the end. */
    boolean next() {
      return stream.next();
    }

    VectorSchemaRoot getRoot() {
      return stream.getRoot();
    }

    /** Ends the call early (the server stops sending). */
    void cancel(String message) {
      stream.cancel(message, null);
    }

    @Override
    public void close() throws Exception {
      try {
        stream.close();
      } finally {
        lease.close(); // after the stream: its buffers come from the connection's allocator
      }
    }
  }

  /** The first and the longest wait between looks at a DoPut stream whose buffer is full. */
  static final long READY_WAIT_MIN_NANOS = 50_000L;
  static final long READY_WAIT_MAX_NANOS = 10_000_000L;

  /** One DoPut stream: {@link #putNext()} each filled batch of the root, then {@link #finish()}. */
  final class Put implements AutoCloseable {
    private final String what;
    private final SyncPutListener listener = new SyncPutListener();
    private final FlightConnections.Lease lease;
    private final FlightClient.ClientStreamListener stream;
    private boolean done;

    Put(Object cmd, VectorSchemaRoot root) {
      this.what = "DoPut " + new String(json(cmd), StandardCharsets.UTF_8);
      this.lease = lease();
      try {
        stream = lease.client().startPut(FlightDescriptor.command(json(cmd)), root, listener, callOptions);
      } catch (RuntimeException e) {
        lease.close();
        if (e instanceof FlightRuntimeException) {
          throw FlightSinkException.wrap(what, uri, (FlightRuntimeException) e);
        }
        throw e;
      }
    }

    /**
     * Sends the root's current batch, waiting while gRPC's buffer is full. Flight's client gives
     * no ready notification (its DoPut observer is not a gRPC ClientResponseObserver, so {@code
     * setOnReadyHandler} throws once the call started), so the wait blocks on the listener for a
     * growing interval ({@link #READY_WAIT_MIN_NANOS} doubling up to {@link
     * #READY_WAIT_MAX_NANOS}) between looks at the stream: a full buffer costs no CPU, and a call
     * the server ended (it refused the stream: a schema mismatch, an unknown table), which never
     * becomes ready again, wakes the wait at once with the server's error.
     */
    void putNext() {
      try {
        long wait = READY_WAIT_MIN_NANOS;
        while (!stream.isReady()) {
          PutResult early = listener.poll(wait, java.util.concurrent.TimeUnit.NANOSECONDS);
          if (early != null) {
            early.close(); // the server acknowledges after the stream's end; nothing to keep
          }
          wait = Math.min(wait * 2, READY_WAIT_MAX_NANOS);
        }
        stream.putNext();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new FlightSinkException(what + ": interrupted");
      } catch (java.util.concurrent.ExecutionException e) {
        Throwable c = e.getCause();
        if (c instanceof FlightRuntimeException) {
          throw FlightSinkException.wrap(what, uri, (FlightRuntimeException) c);
        }
        throw new FlightSinkException(what + " on " + uri + ": " + c, null, null, c);
      } catch (FlightRuntimeException e) {
        throw FlightSinkException.wrap(what, uri, e);
      }
    }

    /** Ends the stream and returns the acknowledgement (the server's JSON). */
    JsonNode finish() {
      try {
        stream.completed();
        stream.getResult();
        done = true;
        List<JsonNode> acks = new ArrayList<>();
        PutResult r;
        while ((r = listener.poll(0, java.util.concurrent.TimeUnit.MILLISECONDS)) != null) {
          try (PutResult pr = r) {
            ArrowBuf md = pr.getApplicationMetadata();
            if (md != null) {
              long n = md.readableBytes() > 0 ? md.readableBytes() : md.capacity();
              byte[] b = new byte[(int) n];
              md.getBytes(0, b);
              acks.add(parse(b));
            }
          }
        }
        if (acks.isEmpty()) {
          throw new FlightSinkException(what + " on " + uri + ": no acknowledgement");
        }
        return acks.get(acks.size() - 1);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new FlightSinkException(what + ": interrupted");
      } catch (java.util.concurrent.ExecutionException e) {
        Throwable c = e.getCause();
        if (c instanceof FlightRuntimeException) {
          throw FlightSinkException.wrap(what, uri, (FlightRuntimeException) c);
        }
        throw new FlightSinkException(what + " on " + uri + ": " + c, null, null, c);
      } catch (FlightRuntimeException e) {
        throw FlightSinkException.wrap(what, uri, e);
      }
    }

    /** Cancels an unfinished stream (the server commits nothing of it) and releases the connection. */
    @Override
    public void close() {
      try {
        if (!done) {
          done = true;
          try {
            stream.error(new RuntimeException("flight-sink: write aborted"));
            stream.getResult();
          } catch (Exception ignored) {
            // the cancel itself is what we wanted
          }
        }
      } finally {
        lease.close();
      }
    }
  }
}
