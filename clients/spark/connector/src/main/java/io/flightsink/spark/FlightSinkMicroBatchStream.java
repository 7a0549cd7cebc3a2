package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.readStream.format("flight-sink")}: a micro-batch source whose offsets are table
 * versions, as the Python data source's stream reader ({@code clients/pyspark}) reads them.
 *
 * <p>The offset is {@code {"version": v}}. The first micro-batch of a new query reads the whole
 * table at the latest version, one Spark partition per endpoint; each later one reads the rows the
 * versions in {@code (start, end]} appended, each once across restarts (the versions are pinned,
 * so a replayed batch reads the same rows). Versions are classified by the {@code history} action:
 * {@code Append} (epochs, plain appends, MemWAL folds): its rows are read; {@code Create}, {@code
 * Rewrite} (compaction) and index or config changes: skipped; {@code Overwrite}, {@code Delete},
 * {@code Update}, {@code Upsert}: the query fails naming the version unless {@code
 * skipChangeCommits} is true, which skips the whole version. The rows of a run of Appends {@code
 * a..b} are the fragments of version {@code b} that version {@code a - 1} does not have (an Append
 * only adds fragments), read with DoGet tickets {@code {"table", "version": b, "fragments": [...],
 * "columns"}}, one partition per endpoint group of {@code b}.
 */
final class FlightSinkMicroBatchStream implements MicroBatchStream {
  private static final Logger LOG = LoggerFactory.getLogger(FlightSinkMicroBatchStream.class);
  private static final Set<String> APPENDS = Set.of("Append");
  private static final Set<String> NO_ROW_CHANGE =
      Set.of("Create", "Rewrite", "CreateIndex", "OptimizeIndex", "UpdateConfig");
  private static final Set<String> ROW_CHANGES = Set.of("Overwrite", "Delete", "Update", "Upsert");

  private final FlightSinkOptions opts;
  private final StructType schema;
  private final Map<String, Object> filter;
  private final boolean skipChangeCommits;

  FlightSinkMicroBatchStream(FlightSinkOptions opts, StructType schema, Map<String, Object> filter) {
    this.opts = opts;
    this.schema = schema;
    this.filter = filter;
    this.skipChangeCommits = opts.skipChangeCommits();
  }

  @Override
  public Offset initialOffset() {
    return new VersionOffset(0);
  }

  @Override
  public Offset latestOffset() {
    return new VersionOffset(latestVersion());
  }

  private long latestVersion() {
    return opts.client().latestVersion(opts.table());
  }

  @Override
  public Offset deserializeOffset(String json) {
    return VersionOffset.parse(json);
  }

  private List<String> columns() {
    List<String> cols = new ArrayList<>(List.of(schema.fieldNames()));
    if (cols.isEmpty()) {
      StructType all = ArrowConversions.sparkSchema(opts.client().schema(FlightSinkScan.tableCmd(opts)));
      cols.add(all.fieldNames()[0]);
    }
    return cols;
  }

  private FlightInfo info(long version, boolean withColumns) {
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", opts.table());
    cmd.put("version", version);
    if (withColumns) {
      cmd.put("columns", columns());
      if (filter != null) {
        cmd.put("filter", filter);
      }
    }
    return opts.client().flightInfo(cmd);
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    long s = ((VersionOffset) start).version;
    long e = ((VersionOffset) end).version;
    List<InputPartition> out = new ArrayList<>();
    if (e <= s) {
      return new InputPartition[0];
    }
    if (s == 0) {
      for (FlightEndpoint ep : info(e, true).getEndpoints()) {
        out.add(new FlightSinkScan.Part(ep.getTicket().getBytes()));
      }
      return out.toArray(new InputPartition[0]);
    }
    for (long[] run : runs(s, e)) {
      List<List<Long>> before = baseFragments(info(run[0] - 1, false));
      List<List<Long>> after = baseFragments(info(run[1], false));
      Set<Long> old = new HashSet<>();
      before.forEach(old::addAll);
      for (List<Long> group : after) {
        List<Long> fresh = new ArrayList<>();
        for (Long f : group) {
          if (!old.contains(f)) {
            fresh.add(f);
          }
        }
        if (!fresh.isEmpty()) {
          Map<String, Object> ticket = new LinkedHashMap<>();
          ticket.put("table", opts.table());
          ticket.put("version", run[1]);
          ticket.put("fragments", fresh);
          ticket.put("columns", columns());
          if (filter != null) {
            ticket.put("filter", filter);
          }
          out.add(new FlightSinkScan.Part(FlightSinkClient.json(ticket)));
        }
      }
    }
    return out.toArray(new InputPartition[0]);
  }

  /** The fragment ids of each base endpoint (MemWAL endpoints are skipped: their rows are read
   * once a fold appended them to the table). */
  private List<List<Long>> baseFragments(FlightInfo info) {
    List<List<Long>> groups = new ArrayList<>();
    for (FlightEndpoint ep : info.getEndpoints()) {
      JsonNode t = FlightSinkClient.parse(ep.getTicket().getBytes());
      if (t.path("memwal").asBoolean(false)) {
        continue;
      }
      if (!t.has("fragments")) {
        throw new FlightSinkException("flight-sink streaming reads need a server whose "
            + "GetFlightInfo tickets list their fragments (docs/protocol.md, Endpoint tickets)");
      }
      List<Long> g = new ArrayList<>();
      t.get("fragments").forEach(x -> g.add(x.asLong()));
      groups.add(g);
    }
    return groups;
  }

  /** Runs [first, last] of consecutive Append versions in (start, end]. */
  private List<long[]> runs(long start, long end) {
    long limit = latestVersion() - start;
    if (limit > 10000) {
      throw new FlightSinkException("flight-sink stream of " + opts.table() + ": " + limit
          + " versions behind (more than the history action lists); restart the query from a new checkpoint");
    }
    Map<Long, String> ops = new HashMap<>();
    Set<Long> missing = new HashSet<>();
    JsonNode hist = opts.client().action("history",
        Map.of("table", opts.table(), "limit", Math.max(limit, 1)));
    // {"format_version", "table", "latest_version", "versions": [...]}, newest first.
    for (JsonNode h : hist.isArray() ? hist : hist.path("versions")) {
      long v = h.path("version").asLong();
      ops.put(v, h.path("operation").asText());
      if (h.path("missing").asBoolean(false)) {
        missing.add(v);
      }
    }
    List<long[]> runs = new ArrayList<>();
    for (long v = start + 1; v <= end; v++) {
      String op = ops.get(v);
      if (op == null || missing.contains(v)) {
        throw new FlightSinkException("flight-sink stream of " + opts.table() + ": version " + v
            + " was cleaned up before the stream read it; restart the query from a new checkpoint");
      }
      if (APPENDS.contains(op)) {
        if (!runs.isEmpty() && runs.get(runs.size() - 1)[1] == v - 1) {
          runs.get(runs.size() - 1)[1] = v;
        } else {
          runs.add(new long[] {v, v});
        }
      } else if (NO_ROW_CHANGE.contains(op)) {
        continue;
      } else if (ROW_CHANGES.contains(op) && skipChangeCommits) {
        LOG.info("flight-sink stream of {}: skipping {} version {} (skipChangeCommits)", opts.table(), op, v);
      } else if (ROW_CHANGES.contains(op)) {
        throw new FlightSinkException("flight-sink stream of " + opts.table() + ": version " + v
            + " is an " + op + ", which changed or removed rows a stream of appends cannot express; "
            + "set the option skipChangeCommits=true to skip such versions");
      } else {
        throw new FlightSinkException("flight-sink stream of " + opts.table() + ": version " + v
            + " has operation " + op + ", which this connector does not know how to read as a stream");
      }
    }
    return runs;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new FlightSinkScan.ReaderFactory(opts, schema);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
