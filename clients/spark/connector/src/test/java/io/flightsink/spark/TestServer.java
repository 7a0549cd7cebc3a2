package io.flightsink.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real flight-sink server for the tests: the binary from {@code FLIGHT_SINK_BIN}, or built from
 * this checkout with {@code go build ./cmd/flight-sink} (once per JVM); started on a free loopback
 * port ({@code --listen 127.0.0.1:0}, the bound address read from its "flight-sink serving" log
 * line) with tables in a temporary root, stopped with SIGTERM.
 */
final class TestServer implements AutoCloseable {
  private static final Pattern SERVING = Pattern.compile("flight-sink serving.*?addr=(\\S+)");
  private static String binary;

  final Process proc;
  final String addr;
  final Path root;
  final Path log;

  private TestServer(Process proc, String addr, Path root, Path log) {
    this.proc = proc;
    this.addr = addr;
    this.root = root;
    this.log = log;
  }

  String uri() {
    return "grpc://" + addr;
  }

  static synchronized String binary() throws IOException, InterruptedException {
    if (binary != null) {
      return binary;
    }
    String env = System.getenv("FLIGHT_SINK_BIN");
    if (env != null && !env.isEmpty()) {
      if (!new File(env).canExecute()) {
        throw new IllegalStateException("FLIGHT_SINK_BIN=" + env + " is not an executable file");
      }
      return binary = env;
    }
    File repo = new File(System.getProperty("flightsink.repo", "../../..")).getCanonicalFile();
    File out = new File(repo, "clients/spark/target/test-bin/flight-sink");
    out.getParentFile().mkdirs();
    Process p = new ProcessBuilder("go", "build", "-o", out.getPath(), "./cmd/flight-sink")
        .directory(repo).inheritIO().start();
    if (p.waitFor() != 0) {
      throw new IllegalStateException("go build ./cmd/flight-sink failed in " + repo);
    }
    return binary = out.getPath();
  }

  static TestServer start(String... extraArgs) throws Exception {
    Path root = Files.createTempDirectory("flight-sink-root-");
    Path log = Files.createTempFile("flight-sink-", ".log");
    List<String> cmd = new ArrayList<>(List.of(binary(), "serve", "--listen", "127.0.0.1:0", "--root", root.toString()));
    cmd.addAll(List.of(extraArgs));
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
    pb.environment().keySet().removeIf(k -> k.startsWith("FLIGHT_SINK_"));
    pb.environment().put("FLIGHT_SINK_HTTP_LISTEN", "off");
    Process proc = pb.start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (System.nanoTime() < deadline) {
      String text = Files.readString(log, StandardCharsets.UTF_8);
      Matcher m = SERVING.matcher(text);
      if (m.find()) {
        return new TestServer(proc, m.group(1).replace("\"", ""), root, log);
      }
      if (!proc.isAlive()) {
        throw new IllegalStateException("flight-sink exited with " + proc.exitValue() + ":\n" + text);
      }
      Thread.sleep(50);
    }
    proc.destroyForcibly();
    throw new IllegalStateException("flight-sink did not start:\n" + Files.readString(log));
  }

  String log() throws IOException {
    return Files.readString(log, StandardCharsets.UTF_8);
  }

  @Override
  public void close() throws Exception {
    proc.destroy(); // SIGTERM: the server drains and exits
    if (!proc.waitFor(15, TimeUnit.SECONDS)) {
      proc.destroyForcibly();
      proc.waitFor();
    }
  }
}
