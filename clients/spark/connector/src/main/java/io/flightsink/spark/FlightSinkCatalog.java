package io.flightsink.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Spark catalog of one flight-sink server's tables:
 *
 * <pre>
 * spark.sql.catalog.fs=io.flightsink.spark.FlightSinkCatalog
 * spark.sql.catalog.fs.uri=grpc://127.0.0.1:8815
 * spark.sql.catalog.fs.token=...            (optional: the server's --auth-token)
 * </pre>
 *
 * The server has one namespace, {@code default}; {@code fs.default.events} (or {@code fs.events})
 * is the server's table {@code events}. Every operation is one server call or one transaction:
 * CREATE TABLE is an epoch without rows that creates the table (DoPut {@code create}, the schema in
 * the Arrow types the connector writes, with its primary key, MemWAL shards, data codec and
 * partition spec) followed, when TBLPROPERTIES set maintenance settings, by {@code
 * set_table_config} (the table is dropped again if the server refuses them); DROP TABLE [PURGE] is
 * {@code drop_table}; ALTER TABLE ADD COLUMNS is an epoch without rows that merges the new nullable
 * columns into the schema ({@code merge_schema}); SET/UNSET TBLPROPERTIES is {@code
 * set_table_config}; SHOW TABLES is ListFlights; {@code VERSION AS OF n} pins version {@code n},
 * {@code TIMESTAMP AS OF t} the newest version committed at or before {@code t} ({@code history}).
 * What the server cannot do fails with Spark's {@code UNSUPPORTED_FEATURE.TABLE_OPERATION} naming
 * it. The README (clients/spark/README.md) has the SQL.
 */
public final class FlightSinkCatalog implements TableCatalog, SupportsNamespaces {
  /** The server's one namespace. */
  static final String NAMESPACE = "default";

  /** Table properties CREATE TABLE reads itself; every other one is a maintenance setting. */
  private static final Set<String> CREATE_PROPERTIES = Set.of(FlightSinkCatalogTable.PROP_PRIMARY_KEY,
      FlightSinkCatalogTable.PROP_MEMWAL_SHARDS, FlightSinkCatalogTable.PROP_DATA_CODEC);

  /** Properties Spark sets on every CREATE TABLE (USING, OWNER, ...), not the table's. */
  private static final Set<String> SPARK_PROPERTIES = Set.of(TableCatalog.PROP_PROVIDER,
      TableCatalog.PROP_OWNER, TableCatalog.PROP_COMMENT, TableCatalog.PROP_LOCATION,
      TableCatalog.PROP_EXTERNAL, TableCatalog.PROP_IS_MANAGED_LOCATION, TableCatalog.PROP_TABLE_TYPE,
      TableCatalog.PROP_COLLATION);

  private String name;
  private String uri;
  private String token;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    String u = options.get("uri");
    if (u == null || u.isBlank()) {
      throw new IllegalArgumentException("the flight-sink catalog " + name + " needs spark.sql.catalog."
          + name + ".uri, e.g. grpc://127.0.0.1:8815");
    }
    for (String k : options.keySet()) {
      if (!k.equalsIgnoreCase("uri") && !k.equalsIgnoreCase("token")) {
        throw new IllegalArgumentException("the flight-sink catalog " + name + ": unknown option spark.sql.catalog."
            + name + "." + k + "; the options are uri and token");
      }
    }
    this.uri = u.trim();
    String t = options.get("token");
    this.token = t == null || t.isEmpty() ? null : t;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public String[] defaultNamespace() {
    return new String[] {NAMESPACE};
  }

  private FlightSinkClient client() {
    return FlightSinkClient.get(uri, token);
  }

  // ---- namespaces ----

  private static boolean isDefault(String[] namespace) {
    return namespace.length == 0 || (namespace.length == 1 && namespace[0].equals(NAMESPACE));
  }

  @Override
  public String[][] listNamespaces() {
    return new String[][] {{NAMESPACE}};
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    if (namespace.length == 0) {
      return listNamespaces();
    }
    if (!isDefault(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return new String[0][];
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    return isDefault(namespace);
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace) throws NoSuchNamespaceException {
    if (!isDefault(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return Collections.emptyMap();
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata)
      throws NamespaceAlreadyExistsException {
    if (isDefault(namespace)) {
      throw new NamespaceAlreadyExistsException(namespace);
    }
    throw CatalogErrors.unsupported(name + "." + String.join(".", namespace),
        "CREATE NAMESPACE (the server has one namespace, " + NAMESPACE + ")");
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) throws NoSuchNamespaceException {
    if (!isDefault(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    throw CatalogErrors.unsupported(name + "." + NAMESPACE, "ALTER NAMESPACE");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) throws NoSuchNamespaceException {
    if (!isDefault(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    throw CatalogErrors.unsupported(name + "." + NAMESPACE, "DROP NAMESPACE (the server's one namespace)");
  }

  // ---- tables ----

  /** The server's table of an identifier in the default namespace; null for another namespace. */
  private static String table(Identifier ident) {
    return isDefault(ident.namespace()) ? ident.name() : null;
  }

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    if (!isDefault(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    List<String> names = client().listTables();
    Collections.sort(names);
    Identifier[] out = new Identifier[names.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = Identifier.of(new String[] {NAMESPACE}, names.get(i));
    }
    return out;
  }

  private FlightSinkOptions options(String table, Long version) {
    Map<String, String> o = new HashMap<>();
    o.put("uri", uri);
    o.put("table", table);
    o.put("create", "false");
    if (token != null) {
      o.put("token", token);
    }
    if (version != null) {
      o.put("version", Long.toString(version));
    }
    return FlightSinkOptions.parse(o);
  }

  private FlightSinkCatalogTable load(Identifier ident, Long version) throws NoSuchTableException {
    String table = table(ident);
    if (table == null) {
      throw new NoSuchTableException(ident);
    }
    FlightSinkOptions opts = options(table, version);
    try {
      Schema schema = client().schema(FlightSinkScan.tableCmd(opts));
      return new FlightSinkCatalogTable(CatalogErrors.quoted(name, ident), table, version, opts, schema);
    } catch (FlightSinkException e) {
      if (e.isTableNotFound() || "INVALID_TABLE_NAME".equals(e.reason())) {
        throw new NoSuchTableException(ident);
      }
      throw e;
    }
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return load(ident, null);
  }

  /** {@code VERSION AS OF n}: the table as of its version n. */
  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    long v;
    try {
      v = Long.parseLong(version.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("flight-sink: VERSION AS OF takes a table version (an integer >= 1), got "
          + version);
    }
    if (v < 1) {
      throw new IllegalArgumentException("flight-sink: VERSION AS OF takes a table version >= 1, got " + v);
    }
    return load(ident, v);
  }

  /**
   * {@code TIMESTAMP AS OF t} ({@code t} in microseconds since the epoch): the newest version
   * committed at or before {@code t}, from the server's history (the newest 10,000 versions;
   * versions cleanup removed are not readable and not chosen).
   */
  @Override
  public Table loadTable(Identifier ident, long timestamp) throws NoSuchTableException {
    String table = table(ident);
    if (table == null) {
      throw new NoSuchTableException(ident);
    }
    JsonNode history;
    try {
      history = client().action("history", Map.of("table", table, "limit", 10_000));
    } catch (FlightSinkException e) {
      if (e.isTableNotFound()) {
        throw new NoSuchTableException(ident);
      }
      throw e;
    }
    Instant at = Instant.ofEpochSecond(Math.floorDiv(timestamp, 1_000_000L),
        Math.floorMod(timestamp, 1_000_000L) * 1_000L);
    for (JsonNode v : history.path("versions")) { // newest first
      if (v.path("missing").asBoolean() || !v.hasNonNull("timestamp")) {
        continue;
      }
      if (!Instant.parse(v.get("timestamp").asText()).isAfter(at)) {
        return load(ident, v.get("version").asLong());
      }
    }
    throw new IllegalArgumentException("flight-sink: table " + table + " has no readable version committed at or before "
        + at + " (TIMESTAMP AS OF)");
  }

  @Override
  public boolean tableExists(Identifier ident) {
    String table = table(ident);
    if (table == null) {
      return false;
    }
    try {
      client().action("table_stats", Map.of("table", table));
      return true;
    } catch (FlightSinkException e) {
      if (e.isTableNotFound() || "INVALID_TABLE_NAME".equals(e.reason())) {
        return false;
      }
      throw e;
    }
  }

  @Override
  public void invalidateTable(Identifier ident) {
    // Nothing cached: every load asks the server.
  }

  /**
   * CREATE TABLE (and the create of CTAS, {@code writeStream.toTable} of a new table): an epoch
   * without rows whose {@code create} object makes the table, then its maintenance settings. The
   * schema is sent in the Arrow types the connector's writes send (so every later INSERT fits);
   * primary-key columns are NOT NULL.
   */
  @Override
  public Table createTable(Identifier ident, Column[] columns, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    String table = table(ident);
    if (table == null) {
      throw new NoSuchNamespaceException(ident.namespace());
    }
    String quoted = CatalogErrors.quoted(name, ident);
    // The provider (USING) is not checked: every table of this catalog is a flight-sink table,
    // and Spark names its default source (parquet) as the provider of writeStream.toTable's create.
    if (properties.containsKey(TableCatalog.PROP_LOCATION)) {
      throw CatalogErrors.unsupported(quoted, "LOCATION (the server places its tables)");
    }
    Map<String, Object> create = new LinkedHashMap<>();
    List<String> key = new ArrayList<>();
    String pk = properties.get(FlightSinkCatalogTable.PROP_PRIMARY_KEY);
    if (pk != null) {
      for (String k : pk.split(",")) {
        if (!k.isBlank()) {
          key.add(k.trim());
        }
      }
      create.put("primary_key", key);
    }
    String shards = properties.get(FlightSinkCatalogTable.PROP_MEMWAL_SHARDS);
    if (shards != null) {
      int n;
      try {
        n = Integer.parseInt(shards.trim());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("flight-sink: TBLPROPERTIES memwal.shards must be an integer, got " + shards);
      }
      create.put("memwal", Map.of("shards", n));
    }
    String codec = properties.get(FlightSinkCatalogTable.PROP_DATA_CODEC);
    if (codec != null) {
      create.put("data_codec", codec.trim());
    }
    List<Map<String, Object>> spec = PartitionTransforms.toSpec(partitions, quoted);
    if (!spec.isEmpty()) {
      create.put("partition_by", spec); // only when given: a server without partitions takes the rest
    }
    Map<String, String> settings = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : properties.entrySet()) {
      String k = e.getKey();
      if (!CREATE_PROPERTIES.contains(k) && !SPARK_PROPERTIES.contains(k) && !k.startsWith(TableCatalog.OPTION_PREFIX)) {
        settings.put(k, e.getValue());
      }
    }
    if (tableExists(ident)) {
      throw new TableAlreadyExistsException(ident);
    }
    List<Field> fields = new ArrayList<>();
    for (Column c : columns) {
      if (c.defaultValue() != null || c.generationExpression() != null) {
        throw CatalogErrors.unsupported(quoted, "DEFAULT and GENERATED columns (" + c.name() + ")");
      }
      boolean nullable = c.nullable() && key.stream().noneMatch(k -> k.equalsIgnoreCase(c.name()));
      fields.add(SparkArrow.toArrowField(c.name(), c.dataType(), nullable));
    }
    Map<String, Object> cmd = FlightSinkCatalogTable.catalogEpoch(table, "append");
    cmd.put("create", create);
    // Two concurrent CREATEs of one name may both pass the check above; the second's epoch then
    // lands on the first's table as an epoch without rows (or fails on a schema that differs).
    FlightSinkCatalogTable.putEmpty(client(), cmd, new Schema(fields));
    if (!settings.isEmpty()) {
      try {
        client().action("set_table_config", Map.of("table", table, "set", settings));
      } catch (FlightSinkException e) {
        // The settings are part of the CREATE: a table without them is not what was asked for.
        dropQuietly(table, e);
        throw e;
      }
    }
    try {
      return load(ident, null);
    } catch (NoSuchTableException e) {
      throw new FlightSinkException("flight-sink: table " + table + " is gone right after its CREATE TABLE"
          + " (dropped concurrently)");
    }
  }

  private void dropQuietly(String table, Exception cause) {
    try {
      client().action("drop_table", Map.of("table", table));
    } catch (FlightSinkException e) {
      cause.addSuppressed(e);
    }
  }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    List<Column> cols = new ArrayList<>();
    for (StructField f : schema.fields()) {
      cols.add(Column.create(f.name(), f.dataType(), f.nullable()));
    }
    return createTable(ident, cols.toArray(new Column[0]), partitions, properties);
  }

  /**
   * ALTER TABLE: ADD COLUMNS (nullable, top-level, at the end) in one schema-merging epoch
   * without rows; SET/UNSET TBLPROPERTIES of maintenance settings in one {@code
   * set_table_config} (UNSET restores the default). Every change is checked before anything is
   * sent; anything else is refused.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    FlightSinkCatalogTable t = load(ident, null);
    String quoted = t.name();
    List<Field> added = new ArrayList<>();
    Map<String, String> settings = new LinkedHashMap<>();
    for (TableChange c : changes) {
      if (c instanceof TableChange.AddColumn) {
        TableChange.AddColumn a = (TableChange.AddColumn) c;
        if (a.fieldNames().length != 1) {
          throw CatalogErrors.unsupported(quoted, "ADD COLUMNS of a nested field (" + String.join(".", a.fieldNames()) + ")");
        }
        if (a.position() != null) {
          throw CatalogErrors.unsupported(quoted, "ADD COLUMNS with FIRST or AFTER (new columns go last)");
        }
        if (!a.isNullable()) {
          throw CatalogErrors.unsupported(quoted, "ADD COLUMNS of a NOT NULL column (older rows have no value)");
        }
        if (a.defaultValue() != null) {
          throw CatalogErrors.unsupported(quoted, "ADD COLUMNS with a DEFAULT");
        }
        added.add(SparkArrow.toArrowField(a.fieldNames()[0], a.dataType(), true));
      } else if (c instanceof TableChange.SetProperty || c instanceof TableChange.RemoveProperty) {
        String k = c instanceof TableChange.SetProperty ? ((TableChange.SetProperty) c).property()
            : ((TableChange.RemoveProperty) c).property();
        if (CREATE_PROPERTIES.contains(k) || k.equals(FlightSinkCatalogTable.PROP_VERSION)
            || k.equals(FlightSinkCatalogTable.PROP_ROWS)) {
          throw CatalogErrors.unsupported(quoted, "ALTER TABLE SET/UNSET TBLPROPERTIES of " + k
              + " (set when the table is created)");
        }
        if (SPARK_PROPERTIES.contains(k)) {
          throw CatalogErrors.unsupported(quoted, "ALTER TABLE SET/UNSET TBLPROPERTIES of " + k);
        }
        settings.put(k, c instanceof TableChange.SetProperty ? ((TableChange.SetProperty) c).value() : "");
      } else {
        throw CatalogErrors.unsupported(quoted, "ALTER TABLE " + describe(c));
      }
    }
    if (!added.isEmpty()) {
      List<Field> fields = new ArrayList<>();
      for (Field f : t.arrowSchema().getFields()) {
        fields.add(withoutMetadata(f));
      }
      fields.addAll(added);
      Map<String, Object> cmd = FlightSinkCatalogTable.catalogEpoch(ident.name(), "append");
      cmd.put("merge_schema", true);
      FlightSinkCatalogTable.putEmpty(client(), cmd, new Schema(fields));
    }
    if (!settings.isEmpty()) {
      client().action("set_table_config", Map.of("table", ident.name(), "set", settings));
    }
    return load(ident, null);
  }

  /** The field as the table declares it, without the server's field ids (metadata). */
  private static Field withoutMetadata(Field f) {
    List<Field> children = new ArrayList<>();
    for (Field c : f.getChildren()) {
      children.add(withoutMetadata(c));
    }
    FieldType t = new FieldType(f.isNullable(), f.getType(), f.getDictionary(), null);
    return new Field(f.getName(), t, children);
  }

  private static String describe(TableChange c) {
    String kind = c.getClass().getSimpleName(); // RenameColumn, UpdateColumnType, DeleteColumn, ...
    StringBuilder b = new StringBuilder();
    for (char ch : kind.toCharArray()) {
      if (Character.isUpperCase(ch) && b.length() > 0) {
        b.append(' ');
      }
      b.append(Character.toUpperCase(ch));
    }
    if (c instanceof TableChange.ColumnChange) {
      b.append(" (").append(String.join(".", ((TableChange.ColumnChange) c).fieldNames())).append(')');
    }
    return b.toString();
  }

  /** DROP TABLE: the server's {@code drop_table} (every object of the table goes at once). */
  @Override
  public boolean dropTable(Identifier ident) {
    String table = table(ident);
    if (table == null) {
      return false;
    }
    try {
      client().action("drop_table", Map.of("table", table));
      return true;
    } catch (FlightSinkException e) {
      if (e.isTableNotFound() || "INVALID_TABLE_NAME".equals(e.reason())) {
        return false;
      }
      throw e;
    }
  }

  /** DROP TABLE ... PURGE: the same drop (the server keeps nothing of a dropped table). */
  @Override
  public boolean purgeTable(Identifier ident) {
    return dropTable(ident);
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw CatalogErrors.unsupported(CatalogErrors.quoted(name, oldIdent), "RENAME TABLE");
  }

  @Override
  public String toString() {
    return "FlightSinkCatalog(" + name + " at " + uri + ")";
  }
}
