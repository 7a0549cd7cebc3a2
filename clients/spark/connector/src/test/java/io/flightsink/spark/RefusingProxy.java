package io.flightsink.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A loopback TCP proxy to a server that closes its first {@code refuse} connections as soon as
 * they are accepted (what a client sees while a server restarts: gRPC UNAVAILABLE) and forwards
 * every later one.
 */
final class RefusingProxy implements AutoCloseable {
  private final ServerSocket listener;
  private final String host;
  private final int port;
  private final AtomicInteger refused = new AtomicInteger();
  private final int refuse;

  RefusingProxy(String target, int refuse) throws IOException {
    int colon = target.lastIndexOf(':');
    this.host = target.substring(0, colon);
    this.port = Integer.parseInt(target.substring(colon + 1));
    this.refuse = refuse;
    this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    Thread t = new Thread(this::acceptLoop, "refusing-proxy");
    t.setDaemon(true);
    t.start();
  }

  String uri() {
    return "grpc://127.0.0.1:" + listener.getLocalPort();
  }

  int refused() {
    return refused.get();
  }

  private void acceptLoop() {
    while (!listener.isClosed()) {
      try {
        Socket in = listener.accept();
        if (refused.get() < refuse) {
          refused.incrementAndGet();
          in.close();
          continue;
        }
        Socket out = new Socket(host, port);
        pipe(in, out);
        pipe(out, in);
      } catch (IOException e) {
        return; // closed
      }
    }
  }

  private static void pipe(Socket from, Socket to) {
    Thread t = new Thread(() -> {
      try (InputStream i = from.getInputStream(); OutputStream o = to.getOutputStream()) {
        i.transferTo(o);
      } catch (IOException ignored) {
        // the other side closed
      } finally {
        try {
          from.close();
          to.close();
        } catch (IOException ignored) {
          // closing
        }
      }
    }, "refusing-proxy-pipe");
    t.setDaemon(true);
    t.start();
  }

  @Override
  public void close() throws IOException {
    listener.close();
  }
}
