#!/usr/bin/env python3
"""Latency from an acknowledged upsert epoch to its change reaching a Spark readChangeFeed stream
and the Python client's follow_changes.

`make bench-change-feed` runs this with the project virtualenv's PySpark and the JVM connector's
jar (clients/spark/target/flight-sink-spark-*.jar, `make spark-jar`). It starts the flight-sink
server given by --bin on a free loopback port over a temporary root and, per route, creates a keyed
table (id int64, v utf8; primary key id):

  direct   a plain table: every epoch is an Upsert version at once
  memwal   a table with two MemWAL shards: an epoch is acknowledged on the shards' WAL and reaches
           the feed at the fold that lands it (the server's own flush and fold schedule)

One Spark session (local[2], the jar on spark.jars) runs, per route, a stream
readStream.format("flight-sink").option("readChangeFeed", "true").option("startingVersion",
"latest") with trigger(processingTime=--trigger-ms) into foreachBatch. A writer thread in the
same process puts --epochs upsert epochs (--keys rows each, half of them existing keys) every
--interval seconds with the Python client and records the time each put_epoch returned (the
acknowledgement). foreachBatch records when each epoch's first post-image or insert reaches the
driver; a second thread follows the same table with the Python client's follow_changes (poll
--poll seconds, its own connection) and records the same for each version it yields. Reported per
route and reader: p50, p99 and max of (reached - acknowledged) over the epochs, and how many
reached the reader.

  delta    (--routes ...,delta with --delta-jars) the same upsert epochs as MERGE INTO a Delta
           table with the change data feed on, in the same Spark session, read by Delta's
           readChangeFeed stream with the same trigger. delta-spark must match the PySpark it runs
           on (bench/spark_jars.sh); none is built for Spark 4.3, so `make bench-change-feed-delta`
           runs on PySpark 4.1.4 with Delta 4.3.1.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "clients" / "pyspark" / "src"))

from peers import Proc, free_port, wait_flight  # noqa: E402


def fmt(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def run_route(spark, client, uri: str, route: str, args, ckpt: Path) -> list[dict]:
    import flight_sink as fs
    import pyarrow as pa

    table = f"cf_latency_{route}"
    client.create_table(table, pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key=["id"],
                        memwal_shards=2 if route == "memwal" else None)
    # A first version, so that "latest" has one to start after.
    client.put_epoch(table, pa.table({"id": pa.array([0], pa.int64()), "v": ["warm"]}),
                     query_id="bench-writer", epoch_id=0, mode="update")
    acked: dict[int, float] = {}
    reached: dict[int, float] = {}
    followed: dict[int, float] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def follow(start: int) -> None:
        # Its own client: the follower polls while the writer puts.
        follower = fs.Client(uri)
        try:
            for t in follower.follow_changes(table, start, poll=args.poll, columns=["v"]):
                now = time.time()
                kinds = t.column("_change_type").to_pylist()
                values = [v for v, k in zip(t.column("v").to_pylist(), kinds) if k in ("insert", "update_postimage")]
                with lock:
                    for n in epochs_of(values):
                        followed.setdefault(n, now)
                if stop.is_set():
                    return
        except Exception as e:  # noqa: BLE001 - the server stops under a follower that outlived its route
            if not stop.is_set():
                print(f"follow_changes {route}: {e}", file=sys.stderr)

    def on_batch(df, _batch_id) -> None:
        rows = df.where("_change_type IN ('insert', 'update_postimage')").select("v").collect()
        now = time.time()
        with lock:
            for n in epochs_of(r.v for r in rows):
                reached.setdefault(n, now)

    feed = (spark.readStream.format("flight-sink").option("uri", uri).option("table", table)
            .option("readChangeFeed", "true").option("startingVersion", "latest").load())
    q = (feed.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(ckpt / route))
         .trigger(processingTime=f"{args.trigger_ms} milliseconds").start())
    # The stream's first trigger records where "latest" starts before the first epoch is put.
    deadline = time.time() + 120
    while q.lastProgress is None and time.time() < deadline:
        time.sleep(0.05)
    threading.Thread(target=follow, args=(client.table_stats(table).version + 1,), daemon=True).start()
    for n in range(1, args.epochs + 1):
        ids = [(n * args.keys // 2 + i) % (args.keys * 4) for i in range(args.keys)]
        client.put_epoch(table, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"e{n}-{i}" for i in ids]}),
                         query_id="bench-writer", epoch_id=n, mode="update")
        acked[n] = time.time()
        time.sleep(args.interval)
    deadline = time.time() + args.drain
    while time.time() < deadline:
        with lock:
            if len(reached) >= args.epochs and len(followed) >= args.epochs:
                break
        time.sleep(0.1)
    stop.set()
    q.stop()
    return [latency(route, "readChangeFeed", acked, reached, args.epochs),
            latency(route, "follow_changes", acked, followed, args.epochs)]


def run_delta(spark, args, tmp: Path) -> list[dict]:
    """The same upsert workload on a Delta table with the change data feed on: each epoch is one
    MERGE INTO (acknowledged when it returns), read by Delta's readChangeFeed stream (startingVersion
    latest) with the same trigger into foreachBatch."""
    path = str(tmp / "delta" / "cf_latency")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (0, 'warm')")
    acked: dict[int, float] = {}
    reached: dict[int, float] = {}
    lock = threading.Lock()

    def on_batch(df, _batch_id) -> None:
        rows = df.where("_change_type IN ('insert', 'update_postimage')").select("v").collect()
        now = time.time()
        with lock:
            for n in epochs_of(r.v for r in rows):
                reached.setdefault(n, now)

    feed = (spark.readStream.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", "latest").load(path))
    q = (feed.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(tmp / "ckpt" / "delta"))
         .trigger(processingTime=f"{args.trigger_ms} milliseconds").start())
    deadline = time.time() + 120
    while q.lastProgress is None and time.time() < deadline:
        time.sleep(0.05)
    for n in range(1, args.epochs + 1):
        ids = [(n * args.keys // 2 + i) % (args.keys * 4) for i in range(args.keys)]
        spark.createDataFrame([(i, f"e{n}-{i}") for i in ids], "id BIGINT, v STRING").createOrReplaceTempView("cf_epoch")
        spark.sql(f"MERGE INTO delta.`{path}` t USING cf_epoch s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        acked[n] = time.time()
        time.sleep(args.interval)
    deadline = time.time() + args.drain
    while time.time() < deadline:
        with lock:
            if len(reached) >= args.epochs:
                break
        time.sleep(0.1)
    q.stop()
    return [latency("delta", "readChangeFeed", acked, reached, args.epochs)]


def epochs_of(values) -> list[int]:
    """The epoch numbers of the values an epoch wrote ("e<epoch>-<id>")."""
    return [int(v[1:].split("-")[0]) for v in values if v.startswith("e")]


def latency(route: str, reader: str, acked: dict, reached: dict, epochs: int) -> dict:
    lat = [(reached[n] - acked[n]) * 1000 for n in acked if n in reached]
    return {"route": route, "reader": reader, "epochs": epochs, "reached": len(lat),
            "p50_ms": percentile(lat, 50) if lat else None, "p99_ms": percentile(lat, 99) if lat else None,
            "max_ms": max(lat) if lat else None, "mean_ms": statistics.mean(lat) if lat else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "bin" / "flight-sink"), help="the flight-sink server binary")
    ap.add_argument("--jar", default=None, help="the connector jar (default clients/spark/target/flight-sink-spark-*.jar)")
    ap.add_argument("--routes", default="direct,memwal",
                    help="comma-separated: direct, memwal, delta (Delta's readChangeFeed; needs --delta-jars)")
    ap.add_argument("--delta-jars", default=None,
                    help="delta-spark and delta-storage jars (comma-separated) matching this PySpark (bench/spark_jars.sh)")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--keys", type=int, default=100, help="rows per epoch")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between epochs")
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--poll", type=float, default=0.1, help="follow_changes' seconds between looks for new versions")
    ap.add_argument("--drain", type=float, default=120, help="seconds to wait for the last epochs")
    args = ap.parse_args()
    jar = args.jar or sorted(glob.glob(str(REPO / "clients" / "spark" / "target" / "flight-sink-spark-*.jar")))[-1]

    import flight_sink as fs
    from pyspark.sql import SparkSession

    tmp = Path(tempfile.mkdtemp(prefix="cf-latency-"))
    addr = f"127.0.0.1:{free_port()}"
    os.environ.setdefault("FLIGHT_SINK_HTTP_LISTEN", "off")  # the server's HTTP port is not needed
    server = Proc("flight-sink", [args.bin, "serve", "--listen", addr, "--root", str(tmp / "root")], tmp / "server.log")
    try:
        wait_flight(addr, server)
        uri = f"grpc://{addr}"
        client = fs.Client(uri)
        b = (SparkSession.builder.master("local[2]").appName("change-feed-latency")
             .config("spark.jars", ",".join([jar] + ([args.delta_jars] if args.delta_jars else [])))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
        if args.delta_jars:
            b = (b.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                 .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        print(f"change feed latency: {args.epochs} upsert epochs of {args.keys} rows every {args.interval}s, "
              f"trigger {args.trigger_ms} ms")
        for route in args.routes.split(","):
            if route == "delta" and not args.delta_jars:
                sys.exit("the delta route needs --delta-jars")
            results = run_delta(spark, args, tmp) if route == "delta" else run_route(spark, client, uri, route, args, tmp / "ckpt")
            for r in results:
                print(f"{r['route']:8s} {r['reader']:15s} reached {r['reached']}/{r['epochs']}  "
                      f"p50 {fmt(r['p50_ms'])} ms  p99 {fmt(r['p99_ms'])} ms  max {fmt(r['max_ms'])} ms", flush=True)
        spark.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
