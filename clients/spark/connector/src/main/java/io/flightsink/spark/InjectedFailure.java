package io.flightsink.spark;

import java.io.Serializable;
import java.util.Map;

/**
 * The test hook {@link #OPTION}: {@code "<partition>:<attempt>"} makes that write task attempt
 * fail right after its DoPut was acknowledged (the Python data source's option of the same name);
 * {@code "<partition>:*"} makes every attempt of that partition fail. It rides in the data
 * source's options (the only way from a test's {@code .option(...)} to the tasks) but is not one of
 * {@link FlightSinkOptions}: the write reads it into its {@link EpochSpec}. Never set it in
 * production.
 */
final class InjectedFailure implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The option's name. */
  static final String OPTION = "_testFailAfterStage";

  private final int partition;
  /** The attempt that fails, or -1 for every attempt. */
  private final int attempt;

  private InjectedFailure(int partition, int attempt) {
    this.partition = partition;
    this.attempt = attempt;
  }

  /** The hook the options set, or null for none. */
  static InjectedFailure parse(Map<String, String> options) {
    String f = FlightSinkOptions.get(options, OPTION);
    if (f == null || f.isEmpty()) {
      return null;
    }
    String[] parts = f.split(":");
    try {
      if (parts.length != 2) {
        throw new NumberFormatException();
      }
      int a = parts[1].trim().equals("*") ? -1 : Integer.parseInt(parts[1].trim());
      return new InjectedFailure(Integer.parseInt(parts[0].trim()), a);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("flight-sink option " + OPTION
          + " must be <partition>:<attempt> or <partition>:*, got " + f);
    }
  }

  /** Whether the given task attempt fails. */
  boolean hits(int partition, int attempt) {
    return this.partition == partition && (this.attempt == attempt || this.attempt == -1);
  }

  /** Fails the given attempt when the hook names it; {@code what} says what it sent. */
  static void failIfHit(InjectedFailure f, int partition, int attempt, String what) {
    if (f != null && f.hits(partition, attempt)) {
      throw new IllegalStateException(OPTION + ": injected failure after sending partition "
          + partition + " attempt " + attempt + " (" + what + ")");
    }
  }
}
