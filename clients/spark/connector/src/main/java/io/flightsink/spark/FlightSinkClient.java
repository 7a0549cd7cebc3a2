package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
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
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * A Flight connection to one flight-sink server, shared by every task of a JVM (driver or
 * executor) that talks to that server with that token. Requests are JSON ({@code
 * docs/protocol.md}); every failure is a {@link FlightSinkException} carrying the server's reason.
 */
final class FlightSinkClient {
  static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, FlightSinkClient> CLIENTS = new ConcurrentHashMap<>();

  final String uri;
  private final FlightClient client;
  private final CallOption[] callOptions;
  final BufferAllocator allocator;

  private FlightSinkClient(String uri, String token) {
    this.uri = uri;
    this.allocator =
        ArrowUtils.rootAllocator().newChildAllocator("flight-sink-client " + uri, 0, Long.MAX_VALUE);
    this.client = FlightClient.builder(allocator, location(uri)).build();
    if (token != null) {
      CallHeaders h = new FlightCallHeaders();
      h.insert("authorization", "Bearer " + token);
      this.callOptions = new CallOption[] {new HeaderCallOption(h)};
    } else {
      this.callOptions = new CallOption[0];
    }
  }

  static FlightSinkClient get(String uri, String token) {
    return CLIENTS.computeIfAbsent(uri + "\u0000" + (token == null ? "" : token),
        k -> new FlightSinkClient(uri, token));
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

  CallOption[] options() {
    return callOptions;
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
    java.util.function.Supplier<JsonNode> call = () -> {
      Iterator<Result> it = client.doAction(new Action(type, json(body)), callOptions);
      JsonNode out = null;
      while (it.hasNext()) {
        Result r = it.next();
        if (out == null) {
          out = parse(r.getBody());
        }
      }
      return out;
    };
    try {
      return IDEMPOTENT_ACTIONS.contains(type) ? retryUnavailable(call) : call.get();
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("action " + type + " " + new String(json(body), StandardCharsets.UTF_8), uri, e);
    }
  }

  /** The names of the server's tables (ListFlights: one PATH descriptor per table). */
  List<String> listTables() {
    try {
      return retryUnavailable(() -> {
        List<String> names = new ArrayList<>();
        for (FlightInfo info : client.listFlights(org.apache.arrow.flight.Criteria.ALL, callOptions)) {
          List<String> path = info.getDescriptor().getPath();
          if (path != null && !path.isEmpty()) {
            names.add(path.get(0));
          }
        }
        return names;
      });
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("ListFlights", uri, e);
    }
  }

  FlightInfo flightInfo(Object cmd) {
    try {
      return retryUnavailable(() -> client.getInfo(FlightDescriptor.command(json(cmd)), callOptions));
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("GetFlightInfo " + new String(json(cmd), StandardCharsets.UTF_8), uri, e);
    }
  }

  Schema schema(Object cmd) {
    try {
      SchemaResult r = retryUnavailable(() -> client.getSchema(FlightDescriptor.command(json(cmd)), callOptions));
      return r.getSchema();
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("GetSchema " + new String(json(cmd), StandardCharsets.UTF_8), uri, e);
    }
  }

  FlightStream doGet(byte[] ticket) {
    try {
      return client.getStream(new Ticket(ticket), callOptions);
    } catch (FlightRuntimeException e) {
      throw FlightSinkException.wrap("DoGet", uri, e);
    }
  }

  /** The first and the longest wait between looks at a DoPut stream whose buffer is full. */
  static final long READY_WAIT_MIN_NANOS = 50_000L;
  static final long READY_WAIT_MAX_NANOS = 10_000_000L;

  /** One DoPut stream: {@link #putNext()} each filled batch of the root, then {@link #finish()}. */
  final class Put implements AutoCloseable {
    private final String what;
    private final SyncPutListener listener = new SyncPutListener();
    private final FlightClient.ClientStreamListener stream;
    private boolean done;

    Put(Object cmd, VectorSchemaRoot root) {
      this.what = "DoPut " + new String(json(cmd), StandardCharsets.UTF_8);
      try {
        stream = client.startPut(FlightDescriptor.command(json(cmd)), root, listener, callOptions);
      } catch (FlightRuntimeException e) {
        throw FlightSinkException.wrap(what, uri, e);
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

    /** Cancels an unfinished stream: the server commits nothing of it. */
    @Override
    public void close() {
      if (!done) {
        done = true;
        try {
          stream.error(new RuntimeException("flight-sink: write aborted"));
          stream.getResult();
        } catch (Exception ignored) {
          // the cancel itself is what we wanted
        }
      }
    }
  }
}
