package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;

/** Reads a table straight over Flight (not through the connector's read path). */
final class TestTables {
  private TestTables() {}

  /** Every row of the table, as column name to Java value maps. */
  static List<Map<String, Object>> rows(String uri, String table) {
    return rows(uri, FlightSinkClient.json(Map.of("table", table)));
  }

  /** Every row DoGet of {@code ticket} returns, as column name to Java value maps. */
  static List<Map<String, Object>> rows(String uri, byte[] ticket) {
    FlightSinkClient c = FlightSinkClient.get(uri, null);
    List<Map<String, Object>> out = new ArrayList<>();
    try (FlightSinkClient.Get s = c.doGet(ticket)) {
      while (s.next()) {
        VectorSchemaRoot root = s.getRoot();
        for (int i = 0; i < root.getRowCount(); i++) {
          Map<String, Object> row = new LinkedHashMap<>();
          for (FieldVector v : root.getFieldVectors()) {
            Object o = v.getObject(i);
            row.put(v.getName(), o instanceof org.apache.arrow.vector.util.Text ? o.toString() : o);
          }
          out.add(row);
        }
      }
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
    return out;
  }

  static List<Long> ids(String uri, String table) {
    List<Long> out = new ArrayList<>();
    for (Map<String, Object> r : rows(uri, table)) {
      out.add(((Number) r.get("id")).longValue());
    }
    return out;
  }

  /** The table's history, oldest first. */
  static List<JsonNode> history(String uri, String table) {
    JsonNode h = FlightSinkClient.get(uri, null).action("history", Map.of("table", table, "limit", 10000));
    List<JsonNode> out = new ArrayList<>();
    (h.isArray() ? h : h.path("versions")).forEach(out::add);
    java.util.Collections.reverse(out);
    return out;
  }

  /** "query_id/epoch_id" of every epoch commit, oldest first. */
  static List<String> epochCommits(String uri, String table) {
    List<String> out = new ArrayList<>();
    for (JsonNode v : history(uri, table)) {
      JsonNode p = v.path("properties");
      if (p.has("flight_sink.streaming.query_id")) {
        out.add(p.get("flight_sink.streaming.query_id").asText() + "/"
            + p.get("flight_sink.streaming.epoch_id").asText());
      }
    }
    return out;
  }

  static List<String> operations(String uri, String table) {
    List<String> out = new ArrayList<>();
    for (JsonNode v : history(uri, table)) {
      out.add(v.path("operation").asText());
    }
    return out;
  }
}
