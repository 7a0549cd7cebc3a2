"""The JVM Spark connector (clients/spark) from PySpark: every write mode and a pushed-down read.

    make spark-jar                                      # clients/spark/target/flight-sink-spark-*.jar
    make run &                                          # flight-sink on grpc://127.0.0.1:8815
    python examples/spark_jvm_connector.py              # or: --start-server (a throw-away server)

The jar goes on ``spark.jars`` (``--jars`` for spark-submit / spark-shell); ``format("flight-sink")``
is then the JVM DataSource V2 connector, nothing to register. Steps:

1. a streaming write (``rate-micro-batch`` source, append mode): each micro-batch is one
   transaction, exactly once across restarts (stamped with the query's StreamingQuery.id);
2. a streaming aggregate in complete mode: each micro-batch is one Overwrite;
3. the same aggregate in update mode into a table with a primary key: each micro-batch is one
   Upsert;
4. batch writes: ``mode("append")`` and ``mode("overwrite")``, one transaction each;
5. a batch read with a pushed filter, column pruning and time travel (``versionAsOf``).
"""

from __future__ import annotations

import argparse
import glob
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _jar() -> str:
    jars = sorted(glob.glob(str(REPO_ROOT / "clients" / "spark" / "target" / "flight-sink-spark-*.jar")))
    if not jars:
        sys.exit("no clients/spark/target/flight-sink-spark-*.jar: run `make spark-jar` first")
    return jars[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", default="grpc://127.0.0.1:8815")
    ap.add_argument("--prefix", default="jvm_example", help="table name prefix")
    ap.add_argument("--jar", default=None, help="the connector jar (default: clients/spark/target)")
    ap.add_argument("--start-server", action="store_true")
    args = ap.parse_args()

    from pyspark.sql import SparkSession, functions as F

    from flight_sink import Client, TableNotFoundError

    server = None
    if args.start_server:
        from flight_sink.local_server import LocalServer, build_server

        server = LocalServer.start(build_server(REPO_ROOT), Path(tempfile.mkdtemp(prefix="flight-sink-ex-")))
        args.uri = server.uri
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("flight-sink-jvm-example")
        .config("spark.jars", args.jar or _jar())
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    client = Client(args.uri)
    ckpt = Path(tempfile.mkdtemp(prefix="flight-sink-ex-ckpt-"))
    events, counts, latest, batch = (f"{args.prefix}_{n}" for n in ("events", "counts", "latest", "batch"))

    def sink(df, table, name):
        return (df.writeStream.format("flight-sink").option("uri", args.uri).option("table", table)
                .option("checkpointLocation", str(ckpt / name)))

    def epochs(table):
        """How many streaming epochs the table has committed (0 before it exists)."""
        try:
            hist = client.history(table, limit=10000)
        except TableNotFoundError:
            return 0
        return sum(1 for h in hist if "flight_sink.streaming.epoch_id" in h.properties)

    def run_epochs(q, table, n):
        """Let the query commit n epochs into table, then stop it."""
        while q.isActive and epochs(table) < n:
            time.sleep(0.2)
        if q.exception() is not None:
            raise SystemExit(f"query failed: {q.exception()}")
        q.stop()

    # 1. streaming append
    rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 100).load()
            .selectExpr("value AS id", "value % 5 AS k", "timestamp AS ts"))
    q = sink(rate, events, "events").trigger(processingTime="200 milliseconds").start()
    run_epochs(q, events, 3)
    print(f"1. streaming append: {client.table_stats(events).rows} rows in {events}, "
          f"query id {q.id}")

    # 2. complete mode and 3. update mode (keyed) over the events table's rows
    src = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 50).load()
    agg = src.groupBy((F.col("value") % 5).alias("k")).agg(F.count("*").alias("n"), F.max("value").alias("last"))
    q = sink(agg, counts, "counts").outputMode("complete").trigger(processingTime="200 milliseconds").start()
    run_epochs(q, counts, 2)
    print("2. complete mode:", sorted((r["k"], r["n"]) for r in client.read(counts).to_pylist()),
          [h.operation for h in client.history(counts)][:2])
    q = (sink(agg, latest, "latest").outputMode("update").option("primaryKey", "k")
         .trigger(processingTime="200 milliseconds").start())
    run_epochs(q, latest, 2)
    print("3. update mode (primary key k):", sorted((r["k"], r["n"]) for r in client.read(latest).to_pylist()),
          [h.operation for h in client.history(latest)][:2])

    # 4. batch writes
    df = spark.range(0, 1000, 1, 4).selectExpr("id", "concat('k', CAST(id % 3 AS STRING)) AS k")
    df.write.format("flight-sink").option("uri", args.uri).option("table", batch).mode("append").save()
    first = client.table_stats(batch).version
    df.write.format("flight-sink").option("uri", args.uri).option("table", batch).mode("append").save()
    print(f"4. two batch appends: {client.table_stats(batch).rows} rows")

    # 5. reads: the filter goes to the server in the DoGet tickets, only `id` is read
    read = spark.read.format("flight-sink").option("uri", args.uri).option("table", batch).load()
    hits = read.where("id >= 990 AND k = 'k1'").select("id")
    print("5. pushed-down read:", sorted(r["id"] for r in hits.collect()))
    hits.explain()
    old = (spark.read.format("flight-sink").option("uri", args.uri).option("table", batch)
           .option("versionAsOf", first).load())
    print(f"   version {first}: {old.count()} rows; now: {read.count()} rows")
    df.where("id < 10").write.format("flight-sink").option("uri", args.uri).option("table", batch) \
        .mode("overwrite").save()
    print(f"   after overwrite: {client.table_stats(batch).rows} rows")

    spark.stop()
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
