package io.flightsink.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Batch reads: one Spark partition per GetFlightInfo endpoint, every ticket pinned to the version
 * described, with the pruned columns and the pushed predicate in the ticket (the server skips row
 * groups and fragments its statistics rule out and filters the rest). Every pushed predicate is
 * also returned to Spark, which evaluates it again after the scan: the server's filter cuts what
 * is read and sent, Spark's keeps the result exact in corners where the two could differ.
 *
 * <p>With {@code readChangeFeed} the scan reads the change feed of {@code startingVersion ..
 * endingVersion} ({@link ChangeFeed}) instead of a version's rows, the same way; predicates on the
 * change columns stay in Spark (the server filters on table columns).
 */
final class FlightSinkScan {
  private FlightSinkScan() {}

  static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns,
      SupportsPushDownV2Filters {
    private final FlightSinkOptions opts;
    private StructType schema;
    private final List<Predicate> pushed = new ArrayList<>();
    private final List<Map<String, Object>> translated = new ArrayList<>();

    Builder(FlightSinkOptions opts, StructType schema) {
      this.opts = opts;
      this.schema = schema;
    }

    @Override
    public void pruneColumns(StructType required) {
      this.schema = required;
    }

    @Override
    public Predicate[] pushPredicates(Predicate[] predicates) {
      if (opts.pushFilters()) {
        for (Predicate p : predicates) {
          if (opts.readChangeFeed() && onChangeColumn(p)) {
            continue;
          }
          Map<String, Object> t = Predicates.translate(p);
          if (t == null) {
            continue;
          }
          translated.add(t);
          if (Predicates.Bounds.fit(filter())) {
            pushed.add(p);
          } else {
            translated.remove(translated.size() - 1); // the server would refuse the filter
          }
        }
      }
      return predicates;
    }

    /** Whether {@code p} reads a column the change feed adds. */
    private static boolean onChangeColumn(Predicate p) {
      for (org.apache.spark.sql.connector.expressions.NamedReference r : p.references()) {
        if (ChangeFeed.isChangeColumn(r.fieldNames()[0])) {
          return true;
        }
      }
      return false;
    }

    @Override
    public Predicate[] pushedPredicates() {
      return pushed.toArray(new Predicate[0]);
    }

    /** The pushed filter: the AND of the translated predicates, or null for none. */
    private Map<String, Object> filter() {
      Map<String, Object> filter = null;
      for (Map<String, Object> t : translated) {
        filter = filter == null ? t : Predicates.nary("and", filter, t);
      }
      return filter;
    }

    @Override
    public Scan build() {
      return new ScanImpl(opts, schema, filter());
    }
  }

  static final class ScanImpl implements Scan, Batch {
    private final FlightSinkOptions opts;
    private final StructType schema;
    private final Map<String, Object> filter;

    ScanImpl(FlightSinkOptions opts, StructType schema, Map<String, Object> filter) {
      this.opts = opts;
      this.schema = schema;
      this.filter = filter;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      String what = opts.readChangeFeed()
          ? " changes from version " + (opts.startsAtLatest() ? FlightSinkOptions.LATEST : opts.startingVersion())
              + (opts.endingVersion() != null ? " to " + opts.endingVersion() : "")
          : opts.version() != null ? " version " + opts.version() : "";
      return "flight-sink " + opts.table() + what
          + " columns=" + List.of(schema.fieldNames())
          + (filter != null ? " filter=" + new String(FlightSinkClient.json(filter)) : "");
    }

    @Override
    public Batch toBatch() {
      if (opts.startsAtLatest()) {
        throw new IllegalArgumentException("flight-sink option startingVersion=latest starts a change feed "
            + "stream; a batch read of the change feed needs a version number");
      }
      return this;
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      if (opts.readChangeFeed()) {
        return new FlightSinkChangeFeedStream(opts, schema, filter, checkpointLocation);
      }
      return new FlightSinkMicroBatchStream(opts, schema, filter);
    }

    /** The GetFlightInfo command; an empty projection (a count) reads the first column only. */
    Map<String, Object> command() {
      if (opts.readChangeFeed()) {
        return ChangeFeed.command(opts.table(), opts.startingVersion(), opts.endingVersion(),
            ChangeFeed.tableColumns(opts, schema), filter);
      }
      Map<String, Object> cmd = new LinkedHashMap<>();
      cmd.put("table", opts.table());
      if (opts.version() != null) {
        cmd.put("version", opts.version());
      }
      List<String> cols = new ArrayList<>(List.of(schema.fieldNames()));
      if (cols.isEmpty()) {
        StructType all = ArrowConversions.sparkSchema(opts.client().schema(tableCmd(opts)));
        cols.add(all.fieldNames()[0]);
      }
      cmd.put("columns", cols);
      if (filter != null) {
        cmd.put("filter", filter);
      }
      return cmd;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      FlightInfo info = opts.client().flightInfo(command());
      List<InputPartition> parts = new ArrayList<>();
      for (FlightEndpoint ep : info.getEndpoints()) {
        parts.add(new Part(ep.getTicket().getBytes()));
      }
      return parts.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ReaderFactory(opts, schema);
    }
  }

  /** The GetSchema command of the read the options describe (a version's rows or the change feed). */
  static Map<String, Object> tableCmd(FlightSinkOptions opts) {
    if (opts.readChangeFeed()) {
      return ChangeFeed.schemaCommand(opts);
    }
    Map<String, Object> cmd = new LinkedHashMap<>();
    cmd.put("table", opts.table());
    if (opts.version() != null) {
      cmd.put("version", opts.version());
    }
    return cmd;
  }

  /** One endpoint's ticket (opaque, passed to DoGet unchanged). */
  static final class Part implements InputPartition {
    private static final long serialVersionUID = 1L;
    final byte[] ticket;

    Part(byte[] ticket) {
      this.ticket = ticket;
    }
  }

  static final class ReaderFactory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;
    private final FlightSinkOptions opts;
    private final StructType schema;

    ReaderFactory(FlightSinkOptions opts, StructType schema) {
      this.opts = opts;
      this.schema = schema;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("flight-sink reads are columnar");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new Reader(opts, schema, ((Part) partition).ticket);
    }
  }

  /** Reads one ticket's Arrow batches as Spark columnar batches (zero-copy where types allow). */
  static final class Reader implements PartitionReader<ColumnarBatch> {
    private final StructType schema;
    private final FlightSinkClient.Get stream;
    private final BufferAllocator alloc;
    private final List<ValueVector> owned = new ArrayList<>();
    private ColumnarBatch batch;
    private boolean finished;

    Reader(FlightSinkOptions opts, StructType schema, byte[] ticket) {
      this.schema = schema;
      this.alloc = ArrowUtils.rootAllocator().newChildAllocator("flight-sink reader", 0, Long.MAX_VALUE);
      this.stream = opts.client().doGet(ticket);
    }

    @Override
    public boolean next() {
      releaseOwned();
      try {
        while (stream.next()) {
          VectorSchemaRoot root = stream.getRoot();
          int n = root.getRowCount();
          if (n == 0) {
            continue;
          }
          ColumnVector[] cols = new ColumnVector[schema.size()];
          for (int i = 0; i < cols.length; i++) {
            FieldVector v = root.getVector(schema.fields()[i].name());
            if (v == null) {
              throw new FlightSinkException("flight-sink: the server's stream has no column "
                  + schema.fields()[i].name() + " (schema " + root.getSchema() + ")");
            }
            // The stream loads its next batch into this root, and Spark may close the batch it
            // was given (closing a struct vector drops its children, which that load then
            // misses): the batch's buffers move out of the root into vectors this reader owns
            // until Spark asks for the next batch, zero-copy.
            cols[i] = ArrowConversions.column(v, alloc, owned);
          }
          batch = new ColumnarBatch(cols, n);
          return true;
        }
        finished = true;
        return false;
      } catch (org.apache.arrow.flight.FlightRuntimeException e) {
        throw FlightSinkException.wrap("DoGet", "server", e);
      }
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    private void releaseOwned() {
      for (ValueVector v : owned) {
        v.close();
      }
      owned.clear();
    }

    @Override
    public void close() {
      releaseOwned();
      try {
        if (!finished) {
          // Spark stopped early (a LIMIT, a failed task): end the DoGet instead of draining it.
          stream.cancel("flight-sink: reader closed");
        }
        stream.close();
      } catch (Exception ignored) {
        // closing a finished or failed stream
      }
      alloc.close();
    }
  }
}
