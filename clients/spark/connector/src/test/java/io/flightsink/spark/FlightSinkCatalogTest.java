package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.spark.SparkUnsupportedOperationException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link FlightSinkCatalog} in real Spark (local[2,2]) against a real server: the SQL flows
 * (DDL, DML, time travel, streaming by table name) and every catalog method's error path, called
 * both through SQL and on the catalog directly.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FlightSinkCatalogTest {
  private TestServer server;
  private SparkSession spark;
  private FlightSinkCatalog catalog;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start();
    spark = SparkSession.builder()
        .master("local[2,2]")
        .appName("flight-sink-catalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.catalog.fs", FlightSinkCatalog.class.getName())
        .config("spark.sql.catalog.fs.uri", server.uri())
        .getOrCreate();
    spark.sparkContext().setLogLevel("ERROR");
    catalog = new FlightSinkCatalog();
    catalog.initialize("fs", new CaseInsensitiveStringMap(Map.of("uri", server.uri())));
  }

  @AfterAll
  void stop() throws Exception {
    if (spark != null) {
      spark.stop();
    }
    if (server != null) {
      server.close();
    }
  }

  private FlightSinkClient client() {
    return FlightSinkClient.get(server.uri(), null);
  }

  private List<Row> sql(String q) {
    return spark.sql(q).collectAsList();
  }

  private List<Long> ids(String q) {
    return sql(q).stream().map(r -> r.getLong(0)).sorted().collect(Collectors.toList());
  }

  private static Identifier ident(String table) {
    return Identifier.of(new String[] {"default"}, table);
  }

  /** The message of a failure, its causes' included. */
  private static String messages(Throwable t) {
    StringBuilder b = new StringBuilder();
    for (Throwable c = t; c != null; c = c.getCause()) {
      b.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage()).append('\n');
    }
    return b.toString();
  }

  private static void assertFails(Executable r, String... fragments) {
    Throwable t = assertThrows(Throwable.class, r);
    String m = messages(t);
    for (String f : fragments) {
      assertTrue(m.contains(f), () -> "want \"" + f + "\" in:\n" + m);
    }
  }

  @Test
  void sqlLifecycleOfAKeyedTable() {
    sql("CREATE TABLE fs.default.ev (id BIGINT, k STRING, v DOUBLE) "
        + "TBLPROPERTIES ('primary_key'='id', 'compaction.min_fragments'='8', 'data_codec'='lz4_raw')");
    JsonNode stats = client().action("table_stats", Map.of("table", "ev"));
    assertEquals("id", stats.path("primary_key").get(0).asText());
    assertEquals(0, stats.path("rows").asLong());
    JsonNode config = client().action("get_table_config", Map.of("table", "ev"));
    boolean stored = false;
    for (JsonNode s : config.path("settings")) {
      stored |= s.path("key").asText().equals("compaction.min_fragments") && s.path("stored").asBoolean()
          && s.path("value").asText().equals("8");
    }
    assertTrue(stored, config::toString);

    sql("INSERT INTO fs.default.ev VALUES (1, 'a', 1.5), (2, 'b', 2.5), (3, 'c', 3.5)");
    long v1 = client().action("table_stats", Map.of("table", "ev")).path("version").asLong();
    Instant afterFirst = Instant.now();
    sql("INSERT INTO fs.ev SELECT id, CONCAT('x', CAST(id AS STRING)), id * 1.0 FROM range(10, 15)");
    assertEquals(List.of(1L, 2L, 3L, 10L, 11L, 12L, 13L, 14L), ids("SELECT id FROM fs.default.ev"));
    assertEquals(List.of("Create", "UpdateConfig", "Append", "Append"),
        TestTables.operations(server.uri(), "ev"), "one transaction per INSERT");

    // A pushed filter shows in the plan; the rows match Spark's own evaluation.
    String plan = spark.sql("SELECT id FROM fs.default.ev WHERE id >= 12").queryExecution().executedPlan().toString();
    assertTrue(plan.contains("filter={\"op\":\">=\",\"column\":\"id\",\"value\":12}"), plan);
    assertEquals(List.of(12L, 13L, 14L), ids("SELECT id FROM fs.default.ev WHERE id >= 12"));

    sql("DELETE FROM fs.default.ev WHERE id IN (2, 13)");
    assertEquals(List.of(1L, 3L, 10L, 11L, 12L, 14L), ids("SELECT id FROM fs.default.ev"));
    assertEquals("Delete", lastOperation("ev"));

    // Time travel: by version, and by a time between the two INSERTs.
    assertEquals(List.of(1L, 2L, 3L), ids("SELECT id FROM fs.default.ev VERSION AS OF " + v1));
    assertEquals(List.of(1L, 2L, 3L),
        ids("SELECT id FROM fs.default.ev TIMESTAMP AS OF '" + afterFirst + "'"));
    assertFails(() -> sql("SELECT * FROM fs.default.ev TIMESTAMP AS OF '2001-01-01 00:00:00'"),
        "no readable version committed at or before 2001-01-01T00:00:00Z");
    assertFails(() -> sql("SELECT * FROM fs.default.ev VERSION AS OF 99"), "VERSION_NOT_FOUND");
    assertFails(() -> sql("SELECT * FROM fs.default.ev VERSION AS OF 'x'"), "VERSION AS OF takes a table version");

    sql("ALTER TABLE fs.default.ev ADD COLUMNS (note STRING, n INT)");
    assertEquals("Append", lastOperation("ev"));
    sql("INSERT INTO fs.default.ev VALUES (20, 'n', 0.5, 'hello', 7)");
    List<Row> added = sql("SELECT id, note, n FROM fs.default.ev WHERE id IN (1, 20) ORDER BY id");
    assertEquals("[[1,null,null], [20,hello,7]]", added.toString());

    sql("ALTER TABLE fs.default.ev SET TBLPROPERTIES ('cleanup.keep_last'='50')");
    sql("ALTER TABLE fs.default.ev UNSET TBLPROPERTIES ('compaction.min_fragments')");
    Map<String, String> props = describe("fs.default.ev");
    assertEquals("id", props.get("primary_key"));
    assertEquals("7", props.get("rows"));
    assertEquals(Long.toString(client().action("table_stats", Map.of("table", "ev")).path("version").asLong()),
        props.get("version"));
    assertEquals("50", props.get("cleanup.keep_last"));
    assertFalse(props.containsKey("compaction.min_fragments"), props::toString);

    List<String> tables = sql("SHOW TABLES IN fs.default").stream().map(r -> r.getString(1)).collect(Collectors.toList());
    assertTrue(tables.contains("ev"), tables::toString);

    sql("INSERT OVERWRITE fs.default.ev SELECT 100L, 'o', 1.0, 'x', 1");
    assertEquals("Overwrite", lastOperation("ev"));
    assertEquals(List.of(100L), ids("SELECT id FROM fs.default.ev"));
    sql("DELETE FROM fs.default.ev");
    assertEquals(List.of(), ids("SELECT id FROM fs.default.ev"));

    sql("DROP TABLE fs.default.ev");
    assertFalse(catalog.tableExists(ident("ev")));
    assertFails(() -> sql("SELECT * FROM fs.default.ev"), "TABLE_OR_VIEW_NOT_FOUND");
  }

  private String lastOperation(String table) {
    List<String> ops = TestTables.operations(server.uri(), table);
    return ops.get(ops.size() - 1);
  }

  /** DESCRIBE TABLE EXTENDED's "Table Properties" as a map, plus its partitioning rows. */
  private Map<String, String> describe(String table) {
    Map<String, String> out = new HashMap<>();
    for (Row r : sql("DESCRIBE TABLE EXTENDED " + table)) {
      String name = r.getString(0);
      String value = r.getString(1);
      if (name.equals("Table Properties") && value != null) {
        String inner = value.substring(1, value.length() - 1);
        for (String kv : inner.split(",")) {
          int eq = kv.indexOf('=');
          if (eq > 0) {
            out.put(kv.substring(0, eq).trim(), kv.substring(eq + 1).trim());
          }
        }
      } else if (name.startsWith("Part ")) {
        out.put(name, value);
      }
    }
    return out;
  }

  @Test
  void ctasAndTypesTheConnectorWrites() {
    sql("CREATE TABLE fs.default.ctas TBLPROPERTIES ('memwal.shards'='2') AS "
        + "SELECT id, CAST(id AS DECIMAL(10, 2)) AS d, DATE'2024-01-02' AS day, "
        + "named_struct('a', id, 'b', 'x') AS s FROM range(0, 5)");
    assertEquals(List.of(0L, 1L, 2L, 3L, 4L), ids("SELECT id FROM fs.default.ctas"));
    assertEquals("2.00", sql("SELECT d FROM fs.default.ctas WHERE id = 2").get(0).getDecimal(0).toPlainString());
    assertEquals("2", describe("fs.default.ctas").get("memwal.shards"));
    sql("INSERT INTO fs.default.ctas SELECT id, CAST(id AS DECIMAL(10, 2)), DATE'2024-01-03', "
        + "named_struct('a', id, 'b', 'y') FROM range(5, 7)");
    assertEquals(7, sql("SELECT * FROM fs.default.ctas").size());
    sql("DROP TABLE fs.default.ctas PURGE");
    assertFalse(catalog.tableExists(ident("ctas")));
  }

  @Test
  void streamingByTableNameExactlyOnceAcrossARestart(@TempDir Path tmp) throws Exception {
    sql("CREATE TABLE fs.default.src (id BIGINT, k STRING)");
    sql("CREATE TABLE fs.default.dst (id BIGINT, k STRING)");
    sql("INSERT INTO fs.default.src SELECT id, 'a' FROM range(0, 10)");
    String ckpt = tmp.resolve("ckpt").toString();
    StreamingQuery q = spark.readStream().table("fs.default.src").writeStream()
        .option("checkpointLocation", ckpt).trigger(Trigger.AvailableNow()).toTable("fs.default.dst");
    q.awaitTermination();
    assertTrue(q.exception().isEmpty(), () -> "query failed: " + q.exception().get());
    sql("INSERT INTO fs.default.src SELECT id, 'b' FROM range(10, 15)");
    StreamingQuery q2 = spark.readStream().table("fs.default.src").writeStream()
        .option("checkpointLocation", ckpt).trigger(Trigger.AvailableNow()).toTable("fs.default.dst");
    q2.awaitTermination();
    assertTrue(q2.exception().isEmpty(), () -> "query failed: " + q2.exception().get());
    List<Long> want = new ArrayList<>();
    for (long i = 0; i < 15; i++) {
      want.add(i);
    }
    assertEquals(want, ids("SELECT id FROM fs.default.dst"), "every row once across the restart");
    assertEquals(q.id().toString(), TestTables.epochCommits(server.uri(), "dst").get(0).split("/")[0],
        "epochs stamped with the query's id");
    sql("DROP TABLE fs.default.src");
    sql("DROP TABLE fs.default.dst");
  }

  @Test
  void unsupportedStatementsFailNamingTheOperation() {
    sql("CREATE TABLE fs.default.un (id BIGINT, k STRING) TBLPROPERTIES ('primary_key'='id')");
    sql("INSERT INTO fs.default.un VALUES (1, 'a')");
    assertFails(() -> sql("UPDATE fs.default.un SET k = 'b' WHERE id = 1"), "UPDATE");
    assertFails(() -> sql("MERGE INTO fs.default.un t USING (SELECT 1L AS id, 'z' AS k) s ON t.id = s.id "
        + "WHEN MATCHED THEN UPDATE SET t.k = s.k"), "MERGE");
    // A condition the server cannot evaluate exactly as Spark does is refused, and deletes nothing.
    assertFails(() -> sql("DELETE FROM fs.default.un WHERE k LIKE 'a%'"), "`fs`.`default`.`un`");
    assertEquals(List.of(1L), ids("SELECT id FROM fs.default.un"));
    assertFails(() -> sql("ALTER TABLE fs.default.un RENAME TO fs.default.un2"),
        "UNSUPPORTED_FEATURE.TABLE_OPERATION", "RENAME TABLE");
    assertFails(() -> sql("ALTER TABLE fs.default.un RENAME COLUMN k TO k2"),
        "UNSUPPORTED_FEATURE.TABLE_OPERATION", "ALTER TABLE RENAME COLUMN (k)");
    assertFails(() -> sql("ALTER TABLE fs.default.un DROP COLUMN k"), "ALTER TABLE DELETE COLUMN (k)");
    assertFails(() -> sql("ALTER TABLE fs.default.un SET TBLPROPERTIES ('primary_key'='k')"),
        "UNSUPPORTED_FEATURE.TABLE_OPERATION", "TBLPROPERTIES of primary_key");
    assertFails(() -> sql("ALTER TABLE fs.default.un SET TBLPROPERTIES ('no.such.setting'='1')"),
        "INVALID_REQUEST", "no.such.setting");
    // USING names no format here: the table is a flight-sink table whatever it says.
    sql("CREATE TABLE fs.default.pq (id BIGINT) USING parquet");
    assertEquals("flight-sink", sql("DESCRIBE TABLE EXTENDED fs.default.pq").stream()
        .filter(r -> r.getString(0).equals("Provider")).findFirst().get().getString(1));
    sql("DROP TABLE fs.default.pq");
    sql("DROP TABLE fs.default.un");
  }

  // ---- each catalog method's error path, on the catalog itself ----

  @Test
  void initializeNeedsAUriAndKnownOptions() {
    FlightSinkCatalog c = new FlightSinkCatalog();
    assertFails(() -> c.initialize("x", new CaseInsensitiveStringMap(Map.of())), "spark.sql.catalog.x.uri");
    assertFails(() -> c.initialize("x", new CaseInsensitiveStringMap(Map.of("uri", server.uri(), "tokn", "t"))),
        "unknown option spark.sql.catalog.x.tokn");
  }

  @Test
  void loadTableErrors() {
    assertThrows(NoSuchTableException.class, () -> catalog.loadTable(ident("missing")));
    assertThrows(NoSuchTableException.class,
        () -> catalog.loadTable(Identifier.of(new String[] {"other"}, "missing")));
    assertThrows(NoSuchTableException.class, () -> catalog.loadTable(ident("bad/name")));
    assertThrows(NoSuchTableException.class, () -> catalog.loadTable(ident("missing"), "1"));
    assertThrows(NoSuchTableException.class, () -> catalog.loadTable(ident("missing"), 0L));
    assertThrows(IllegalArgumentException.class, () -> catalog.loadTable(ident("missing"), "0"));
    assertFalse(catalog.tableExists(ident("missing")));
    assertFalse(catalog.tableExists(Identifier.of(new String[] {"a", "b"}, "missing")));
  }

  @Test
  void createTableErrors() throws Exception {
    Column[] cols = {Column.create("id", DataTypes.LongType), Column.create("k", DataTypes.StringType)};
    Transform[] none = new Transform[0];
    catalog.createTable(ident("dup"), cols, none, Map.of());
    assertThrows(TableAlreadyExistsException.class, () -> catalog.createTable(ident("dup"), cols, none, Map.of()));
    catalog.dropTable(ident("dup"));

    assertThrows(NoSuchNamespaceException.class,
        () -> catalog.createTable(Identifier.of(new String[] {"other"}, "t"), cols, none, Map.of()));
    assertFails(() -> catalog.createTable(ident("sh"), cols, none, Map.of("memwal.shards", "two")),
        "memwal.shards must be an integer");
    assertFails(() -> catalog.createTable(ident("sh"), cols, none, Map.of("memwal.shards", "0")), "shards");
    assertFails(() -> catalog.createTable(ident("pk"), cols, none, Map.of("primary_key", "nope")), "nope");
    assertFails(() -> catalog.createTable(ident("co"), cols, none, Map.of("data_codec", "brotli")), "data_codec");
    assertFails(() -> catalog.createTable(ident("loc"), cols, none, Map.of("location", "/tmp/x")), "LOCATION");
    // A refused maintenance setting leaves no table behind.
    assertFails(() -> catalog.createTable(ident("cfg"), cols, none, Map.of("compaction.min_fragments", "-3")),
        "compaction.min_fragments");
    for (String t : List.of("sh", "pk", "co", "loc", "cfg")) {
      assertFalse(catalog.tableExists(ident(t)), t);
    }
    SparkUnsupportedOperationException e = assertThrows(SparkUnsupportedOperationException.class,
        () -> catalog.createTable(ident("tr"), cols, new Transform[] {Expressions.bucket(4, "id", "k")}, Map.of()));
    assertEquals("UNSUPPORTED_FEATURE.TABLE_OPERATION", e.getCondition());
    assertFalse(catalog.tableExists(ident("tr")));
  }

  @Test
  void alterTableErrors() throws Exception {
    assertThrows(NoSuchTableException.class,
        () -> catalog.alterTable(ident("missing"), TableChange.setProperty("cleanup.keep_last", "3")));
    catalog.createTable(ident("alt"), new Column[] {Column.create("id", DataTypes.LongType)}, new Transform[0], Map.of());
    long before = client().action("table_stats", Map.of("table", "alt")).path("version").asLong();
    // Every change is checked before anything is sent: the valid first change is not applied.
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.alterTable(ident("alt"),
        TableChange.addColumn(new String[] {"ok"}, DataTypes.StringType),
        TableChange.addColumn(new String[] {"req"}, DataTypes.StringType, false)));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.alterTable(ident("alt"),
        TableChange.addColumn(new String[] {"s", "x"}, DataTypes.StringType)));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.alterTable(ident("alt"),
        TableChange.addColumn(new String[] {"f"}, DataTypes.StringType, true, null,
            TableChange.ColumnPosition.first(), null)));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.alterTable(ident("alt"),
        TableChange.updateColumnType(new String[] {"id"}, DataTypes.IntegerType)));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.alterTable(ident("alt"),
        TableChange.setProperty("memwal.shards", "4")));
    assertEquals(before, client().action("table_stats", Map.of("table", "alt")).path("version").asLong(),
        "a refused ALTER committed nothing");
    catalog.dropTable(ident("alt"));
  }

  @Test
  void dropRenameAndNamespaceErrors() throws Exception {
    assertFalse(catalog.dropTable(ident("missing")));
    assertFalse(catalog.purgeTable(ident("missing")));
    assertFalse(catalog.dropTable(Identifier.of(new String[] {"other"}, "missing")));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.renameTable(ident("a"), ident("b")));

    assertEquals(1, catalog.listNamespaces().length);
    assertEquals(0, catalog.listNamespaces(new String[] {"default"}).length);
    assertThrows(NoSuchNamespaceException.class, () -> catalog.listNamespaces(new String[] {"other"}));
    assertThrows(NoSuchNamespaceException.class, () -> catalog.listTables(new String[] {"other"}));
    assertThrows(NoSuchNamespaceException.class, () -> catalog.loadNamespaceMetadata(new String[] {"other"}));
    assertThrows(NamespaceAlreadyExistsException.class, () -> catalog.createNamespace(new String[] {"default"}, Map.of()));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.createNamespace(new String[] {"other"}, Map.of()));
    assertThrows(SparkUnsupportedOperationException.class, () -> catalog.dropNamespace(new String[] {"default"}, true));
    assertThrows(NoSuchNamespaceException.class, () -> catalog.dropNamespace(new String[] {"other"}, true));
    assertFails(() -> sql("CREATE NAMESPACE fs.other"), "CREATE NAMESPACE");
  }

  // ---- partitioning ----

  @Test
  void partitionTransformsMapToTheServersSpec() {
    Transform[] spark = {Expressions.days("ts"), Expressions.bucket(16, "id"),
        Expressions.apply("truncate", Expressions.literal(4), Expressions.column("s")), Expressions.years("ts"),
        Expressions.months("ts"), Expressions.hours("ts"), Expressions.identity("region")};
    List<Map<String, Object>> spec = PartitionTransforms.toSpec(spark, "`fs`.`default`.`t`");
    assertEquals("[{column=ts, transform=day}, {column=id, transform=bucket[16]}, {column=s, transform=truncate[4]}, "
        + "{column=ts, transform=year}, {column=ts, transform=month}, {column=ts, transform=hour}, "
        + "{column=region, transform=identity}]", spec.toString());
    Transform[] back = PartitionTransforms.fromSpec(FlightSinkClient.parse(FlightSinkClient.json(spec)));
    List<String> described = new ArrayList<>();
    for (Transform t : back) {
      described.add(t.describe());
    }
    assertEquals("[days(ts), bucket(16, id), truncate(4, s), years(ts), months(ts), hours(ts), region]",
        described.toString());
    assertThrows(SparkUnsupportedOperationException.class, () -> PartitionTransforms.toSpec(
        new Transform[] {Expressions.apply("zorder", Expressions.column("a"))}, "t"));
    assertThrows(SparkUnsupportedOperationException.class, () -> PartitionTransforms.toSpec(
        new Transform[] {Expressions.apply("bucket", Expressions.column("a"))}, "t"));
  }

  /**
   * A partitioned table by SQL: the server keeps the spec, DESCRIBE shows it, and a DELETE of one
   * day removes just that day.
   */
  @Test
  void partitionedTableBySql() {
    sql("CREATE TABLE fs.default.pt (id BIGINT, ts TIMESTAMP, s STRING) "
        + "PARTITIONED BY (days(ts), bucket(4, id)) TBLPROPERTIES ('primary_key'='id')");
    Map<String, String> d = describe("fs.default.pt");
    assertEquals("days(ts)", d.get("Part 0"));
    assertEquals("bucket(4, id)", d.get("Part 1"));
    sql("INSERT INTO fs.default.pt VALUES (1, TIMESTAMP'2024-01-01 10:00:00', 'a'), "
        + "(2, TIMESTAMP'2024-01-02 10:00:00', 'b'), (3, TIMESTAMP'2024-01-02 11:00:00', 'c')");
    sql("DELETE FROM fs.default.pt WHERE ts >= TIMESTAMP'2024-01-02 00:00:00'");
    assertEquals(List.of(1L), ids("SELECT id FROM fs.default.pt"));
    sql("DROP TABLE fs.default.pt");
  }
}
