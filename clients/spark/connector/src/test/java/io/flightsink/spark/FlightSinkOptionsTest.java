package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Options parsing and validation, without a server. */
class FlightSinkOptionsTest {
  private static final String URI = "grpc://127.0.0.1:8815";

  private static Map<String, String> with(String... kv) {
    Map<String, String> m = map(kv);
    m.putIfAbsent("uri", URI);
    m.putIfAbsent("table", "events");
    return m;
  }

  private static Map<String, String> map(String... kv) {
    Map<String, String> m = new HashMap<>();
    for (int i = 0; i < kv.length; i += 2) {
      m.put(kv[i], kv[i + 1]);
    }
    return m;
  }

  private static String error(Map<String, String> options) {
    return assertThrows(IllegalArgumentException.class, () -> FlightSinkOptions.parse(options)).getMessage();
  }

  @Test
  void defaults() {
    FlightSinkOptions o = FlightSinkOptions.parse(with());
    assertEquals(URI, o.uri());
    assertEquals("events", o.table());
    assertNull(o.token());
    assertNull(o.queryId());
    assertFalse(o.mergeSchema());
    assertTrue(o.create());
    assertEquals(List.of(), o.primaryKey());
    assertNull(o.route());
    assertNull(o.version());
    assertTrue(o.pushFilters());
    assertFalse(o.skipChangeCommits());
    assertEquals(Boolean.TRUE, o.createValue());
  }

  @Test
  void valuesAreTrimmedAndNamesCaseInsensitive() {
    FlightSinkOptions o = FlightSinkOptions.parse(map("URI", " " + URI + " ", "Table", " t ",
        "PRIMARYKEY", " a, ,b ", "mergeschema", "YES", "create", "1", "Query_Id", " q ", "versionAsOf", "7",
        "token", "s3cret", "route", "direct", "pushfilters", "no", "skipChangeCommits", "true"));
    assertEquals(URI, o.uri());
    assertEquals("t", o.table());
    assertEquals(List.of("a", "b"), o.primaryKey());
    assertTrue(o.mergeSchema());
    assertEquals("q", o.queryId());
    assertEquals(7L, o.version());
    assertEquals("s3cret", o.token());
    assertEquals("direct", o.route());
    assertFalse(o.pushFilters());
    assertTrue(o.skipChangeCommits());
    assertEquals(Map.of("primary_key", List.of("a", "b")), o.createValue());
    assertEquals(Boolean.FALSE, FlightSinkOptions.parse(with("create", "false")).createValue());
    assertThrows(UnsupportedOperationException.class, () -> o.primaryKey().add("c"));
  }

  @Test
  void uriAndTableAreRequired() {
    for (Map<String, String> m : List.of(Map.of("uri", URI), Map.of("table", "t"), Map.of("uri", " ", "table", "t"),
        Map.of("uri", URI, "table", ""))) {
      assertTrue(error(m).contains("needs the options uri and table"), m.toString());
    }
  }

  @Test
  void invalidValuesNameTheirOption() {
    assertTrue(error(with("query_id", "  ")).contains("query_id must not be blank"));
    assertTrue(error(with("mergeSchema", "maybe")).contains("mergeSchema must be true or false, got maybe"));
    assertTrue(error(with("version", "x")).contains("version must be an integer, got x"));
    assertTrue(error(with("version", "0")).contains("version must be >= 1, got 0"));
    assertTrue(error(with("version", "3", "versionAsOf", "4")).contains("version (3) and versionAsOf (4) disagree"));
    assertEquals(3L, FlightSinkOptions.parse(with("version", "3", "versionAsOf", " 3")).version());
  }

  @Test
  void unknownOptionsFailNamingTheKnownOnes() {
    String msg = error(with("primary_key", "id", "pushFilter", "false"));
    assertTrue(msg.startsWith("flight-sink: unknown options primary_key, pushFilter; the options are uri, table"), msg);
    assertTrue(msg.contains("primaryKey"), msg);
    // Spark's own options, names starting with __ and the test hook pass.
    FlightSinkOptions.parse(with("path", "x", "checkpointLocation", "/tmp/c", "__internal", "1",
        InjectedFailure.OPTION, "1:0"));
  }

  @Test
  void theTestHookIsReadBesideTheOptions() {
    assertNull(InjectedFailure.parse(with()));
    InjectedFailure one = InjectedFailure.parse(with(InjectedFailure.OPTION, "1:0"));
    assertTrue(one.hits(1, 0));
    assertFalse(one.hits(1, 1));
    assertFalse(one.hits(0, 0));
    InjectedFailure every = InjectedFailure.parse(with(InjectedFailure.OPTION.toLowerCase(), "2:*"));
    assertTrue(every.hits(2, 0) && every.hits(2, 5));
    assertThrows(IllegalStateException.class, () -> InjectedFailure.failIfHit(one, 1, 0, "stage s"));
    InjectedFailure.failIfHit(one, 1, 1, "stage s");
    InjectedFailure.failIfHit(null, 1, 0, "stage s");
    assertTrue(error(with(InjectedFailure.OPTION, "1")).contains(InjectedFailure.OPTION + " must be"));
    assertTrue(error(with(InjectedFailure.OPTION, "a:b")).contains(InjectedFailure.OPTION + " must be"));
  }

  @Test
  void changeFeedOptions() {
    FlightSinkOptions o = FlightSinkOptions.parse(with("readChangeFeed", "true", "startingVersion", "3",
        "endingVersion", "7"));
    assertTrue(o.readChangeFeed());
    assertEquals(3L, o.startingVersion());
    assertEquals(7L, o.endingVersion());
    assertFalse(o.startsAtLatest());
    FlightSinkOptions latest = FlightSinkOptions.parse(with("readchangefeed", "true", "STARTINGVERSION", " Latest "));
    assertTrue(latest.startsAtLatest());
    assertNull(latest.startingVersion());
    assertNull(latest.endingVersion());
    assertFalse(FlightSinkOptions.parse(with()).readChangeFeed());

    assertTrue(error(with("readChangeFeed", "true")).contains("readChangeFeed needs startingVersion"));
    assertTrue(error(with("startingVersion", "1")).contains("set readChangeFeed=true"));
    assertTrue(error(with("endingVersion", "1")).contains("set readChangeFeed=true"));
    assertTrue(error(with("readChangeFeed", "true", "startingVersion", "1", "version", "2"))
        .contains("not version/versionAsOf"));
    assertTrue(error(with("readChangeFeed", "true", "startingVersion", "0")).contains("startingVersion must be >= 1"));
    assertTrue(error(with("readChangeFeed", "true", "startingVersion", "first"))
        .contains("startingVersion must be an integer"));
    assertTrue(error(with("readChangeFeed", "true", "startingVersion", "5", "endingVersion", "4"))
        .contains("endingVersion (4) is before startingVersion (5)"));
    assertTrue(error(with("readChangeFeed", "true", "startingVersion", "latest", "endingVersion", "4"))
        .contains("endingVersion needs a startingVersion number"));
  }

  @Test
  void withLaysOptionsOverTheTables() {
    FlightSinkOptions o = FlightSinkOptions.parse(with("pushFilters", "false"));
    assertSame(o, o.with(Map.of()));
    FlightSinkOptions w = o.with(Map.of("pushFilters", "true", "version", "2"));
    assertTrue(w.pushFilters());
    assertEquals(2L, w.version());
    assertEquals("events", w.table());
    assertFalse(o.pushFilters(), "the original is unchanged");
    assertThrows(IllegalArgumentException.class, () -> o.with(Map.of("typo", "1")));
  }

  @Test
  void survivesSerialization() throws Exception {
    FlightSinkOptions o = FlightSinkOptions.parse(with("primaryKey", "a,b", "version", "4", "token", "t"));
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(o);
    }
    FlightSinkOptions back;
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      back = (FlightSinkOptions) in.readObject();
    }
    assertEquals(o.primaryKey(), back.primaryKey());
    assertEquals(4L, back.version());
    assertEquals("t", back.token());
    assertEquals(o.raw(), back.raw());
  }
}
