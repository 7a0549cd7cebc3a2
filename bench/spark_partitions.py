#!/usr/bin/env python3
"""Streaming into a day-partitioned table: the JVM connector (format("flight-sink") with the option
partitionBy "days(ts)") against Spark's Iceberg sink (Hadoop catalog on the local file system,
fanout writer on) into a table of the same spec, in one Spark session.

`make bench-spark-partitions` runs this with the PySpark 4.1 environment (the Iceberg runtime is
built for Spark 4.1). It starts the flight-sink server given by --server-bin on a free loopback
port over a temporary root. The input is Parquet files written beforehand with pyarrow, one per
micro-batch (rows id, ts, v; each file's ts spread over --days days, so every micro-batch touches
every partition), read by a file stream with maxFilesPerTrigger 1 and Trigger.AvailableNow; both
sinks read the same files. Two workloads:

  small  --small-batches micro-batches of --small-rows rows (default 200 x 1,000);
  large  --large-batches micro-batches of --large-rows rows (default 5 x 1,000,000).

Each query is timed from start() to its end; reported per sink and workload: seconds, rows/s and
micro-batches/s, and the data files and partitions the table ends with. One untimed warm-up
query per sink first (class loading, JIT). Every table's row count is checked.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from peers import Proc, free_port, wait_flight
from spark_catalog import jars

DAY_US = 86_400_000_000
START_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


def write_input(dirpath: Path, batches: int, rows: int, days: int) -> None:
    """batches Parquet files of rows rows each, ts of row i on day i % days."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dirpath.mkdir(parents=True)
    for b in range(batches):
        ids = pa.array(range(b * rows, (b + 1) * rows), pa.int64())
        ts = [START_US + (i % days) * DAY_US + (i * 7919) % DAY_US for i in range(b * rows, (b + 1) * rows)]
        t = pa.table({"id": ids, "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                      "v": pa.array([float(i) * 0.5 for i in range(b * rows, (b + 1) * rows)], pa.float64())})
        pq.write_table(t, dirpath / f"part-{b:05d}.parquet")


def source(spark, dirpath: Path):
    return (spark.readStream.schema("id BIGINT, ts TIMESTAMP, v DOUBLE").option("maxFilesPerTrigger", 1)
            .parquet(str(dirpath)))


def run_fs(spark, uri: str, table: str, dirpath: Path, ckpt: Path) -> float:
    start = time.perf_counter()
    q = (source(spark, dirpath).writeStream.format("flight-sink").option("uri", uri).option("table", table)
         .option("partitionBy", "days(ts)").option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return time.perf_counter() - start


def run_ice(spark, table: str, dirpath: Path, ckpt: Path) -> float:
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, v DOUBLE) USING iceberg PARTITIONED BY (days(ts))")
    start = time.perf_counter()
    q = (source(spark, dirpath).writeStream.format("iceberg").outputMode("append")
         .option("fanout-enabled", "true").option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).toTable(table))
    q.awaitTermination()
    return time.perf_counter() - start


def fs_files(bin_: Path, root: Path, table: str) -> tuple[int, int]:
    """(data files, partitions) of a flight-sink table, by flight-sink inspect."""
    import json

    out = subprocess.run([str(bin_), "inspect", "--json", str(root / table)], check=True, capture_output=True, text=True)
    frags = json.loads(out.stdout)["fragments"]
    return sum(len(f["files"]) for f in frags), len({json.dumps(f.get("partition")) for f in frags})


def ice_files(spark, table: str) -> tuple[int, int]:
    r = spark.sql(f"SELECT count(*), count(DISTINCT partition) FROM {table}.files").collect()[0]
    return r[0], r[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-bin", type=Path, default=REPO / "bin" / "flight-sink")
    ap.add_argument("--days", type=int, default=24, help="days (partitions) each micro-batch spans (default 24)")
    ap.add_argument("--small-batches", type=int, default=200)
    ap.add_argument("--small-rows", type=int, default=1000)
    ap.add_argument("--large-batches", type=int, default=5)
    ap.add_argument("--large-rows", type=int, default=1_000_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flight-sink-partitions-bench-"))
    server = None
    try:
        workloads = {"small": (args.small_batches, args.small_rows), "large": (args.large_batches, args.large_rows)}
        write_input(work / "in-warm", 5, 1000, args.days)
        for name, (b, r) in workloads.items():
            write_input(work / f"in-{name}", b, r, args.days)
        port = free_port()
        (work / "root").mkdir()
        argv = [str(args.server_bin), "serve", "--listen", f"127.0.0.1:{port}", "--http-listen", "off",
                "--root", str(work / "root"), "--log-level", "warn"]
        server = Proc("flight-sink", argv, work / "flight-sink.log")
        wait_flight(f"127.0.0.1:{port}", server)
        uri = f"grpc://127.0.0.1:{port}"
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.jars", jars(args))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.ice.type", "hadoop")
            .config("spark.sql.catalog.ice.warehouse", str(work / "iceberg"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql("CREATE NAMESPACE IF NOT EXISTS ice.default")
        print(f"PySpark {spark.version}, local[2], micro-batches over {args.days} day partitions", flush=True)
        run_fs(spark, uri, "warm", work / "in-warm", work / "ck-fs-warm")
        run_ice(spark, "ice.default.warm", work / "in-warm", work / "ck-ice-warm")
        print(f"\n{'workload':<26} {'sink':<34} {'s':>8} {'rows/s':>12} {'batches/s':>10} {'files':>7} {'partitions':>10}")
        for name, (b, r) in workloads.items():
            label = f"{name}: {b} x {r:,} rows"
            secs = run_fs(spark, uri, name, work / f"in-{name}", work / f"ck-fs-{name}")
            n = spark.read.format("flight-sink").option("uri", uri).option("table", name).load().count()
            if n != b * r:
                raise SystemExit(f"flight-sink {name}: {n} rows, want {b * r}")
            files, parts = fs_files(args.server_bin, work / "root", name)
            print(f"{label:<26} {'flight-sink (JVM, partitionBy)':<34} {secs:>8.2f} {b * r / secs:>12,.0f} "
                  f"{b / secs:>10.2f} {files:>7} {parts:>10}", flush=True)
            t = f"ice.default.{name}"
            secs = run_ice(spark, t, work / f"in-{name}", work / f"ck-ice-{name}")
            n = spark.table(t).count()
            if n != b * r:
                raise SystemExit(f"iceberg {name}: {n} rows, want {b * r}")
            files, parts = ice_files(spark, t)
            print(f"{label:<26} {'Iceberg (Hadoop catalog, fanout)':<34} {secs:>8.2f} {b * r / secs:>12,.0f} "
                  f"{b / secs:>10.2f} {files:>7} {parts:>10}", flush=True)
        spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
