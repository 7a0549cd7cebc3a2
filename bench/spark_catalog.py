#!/usr/bin/env python3
"""Spark SQL through catalogs side by side: flight-sink's catalog (io.flightsink.spark.FlightSinkCatalog)
against Iceberg's Hadoop catalog on the local file system, in one Spark session.

`make bench-spark-catalog` runs this with the PySpark 4.1 environment (the Iceberg runtime is built
for Spark 4.1). It starts the flight-sink server given by --server-bin on a free loopback port over
a temporary root, and configures the catalogs `fs` (flight-sink) and `ice` (Iceberg, warehouse in
the same temporary directory) in one SparkSession (`local[2]`, both jars on `spark.jars`). Each
repetition, for each catalog in turn (ABAB), on a fresh table partitioned by days(ts):

  insert  INSERT INTO t SELECT id, ts (10 days, id % 10), v FROM range(--rows), timed;
  count   SELECT count(*) FROM t WHERE ts in one day (one partition of ten), timed, and checked.

Reported per catalog: seconds min / median over the repetitions, and rows/s of the insert. One
untimed warm-up repetition of both first (class loading, JIT).
"""

from __future__ import annotations

import argparse
import glob
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from peers import Proc, free_port, wait_flight

DAYS = 10
DAY = "ts >= TIMESTAMP'2024-01-04 00:00:00' AND ts < TIMESTAMP'2024-01-05 00:00:00'"


def jars(args) -> str:
    conn = sorted(glob.glob(str(REPO / "clients" / "spark" / "target" / "flight-sink-spark-*.jar")))
    if not conn:
        sys.exit("no clients/spark/target/flight-sink-spark-*.jar: run make spark-jar")
    peers = subprocess.run([str(REPO / "bench" / "spark_jars.sh")], check=True, capture_output=True, text=True)
    iceberg = [p for p in peers.stdout.strip().splitlines()[-1].split(",") if "iceberg" in p]
    return ",".join([conn[-1]] + iceberg)


def one(spark, catalog: str, rows: int) -> tuple[float, float]:
    """(insert seconds, count seconds) of one fresh table in catalog."""
    t = f"{catalog}.default.bench"
    spark.sql(f"DROP TABLE IF EXISTS {t}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, ts TIMESTAMP, v DOUBLE) PARTITIONED BY (days(ts))")
    start = time.perf_counter()
    spark.sql(
        f"INSERT INTO {t} SELECT id, TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id % {DAYS} AS INT)), "
        f"CAST(id AS DOUBLE) * 0.5 FROM range({rows})"
    )
    insert = time.perf_counter() - start
    start = time.perf_counter()
    n = spark.sql(f"SELECT count(*) FROM {t} WHERE {DAY}").collect()[0][0]
    count = time.perf_counter() - start
    want = len(range(3, rows, DAYS))  # ids with id % 10 == 3: the fourth day
    if n != want:
        raise SystemExit(f"{catalog}: count of one day {n}, want {want}")
    return insert, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-bin", type=Path, default=REPO / "bin" / "flight-sink")
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows per INSERT (default 10 M)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per catalog (default 3)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flight-sink-catalog-bench-"))
    server = None
    try:
        port = free_port()
        (work / "root").mkdir()
        argv = [str(args.server_bin), "serve", "--listen", f"127.0.0.1:{port}", "--http-listen", "off",
                "--root", str(work / "root"), "--log-level", "warn"]
        server = Proc("flight-sink", argv, work / "flight-sink.log")
        wait_flight(f"127.0.0.1:{port}", server)
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.jars", jars(args))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.catalog.fs", "io.flightsink.spark.FlightSinkCatalog")
            .config("spark.sql.catalog.fs.uri", f"grpc://127.0.0.1:{port}")
            .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.ice.type", "hadoop")
            .config("spark.sql.catalog.ice.warehouse", str(work / "iceberg"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql("CREATE NAMESPACE IF NOT EXISTS ice.default")
        print(f"PySpark {spark.version}, local[2], {args.rows:,} rows, {args.reps} repetitions", flush=True)
        one(spark, "fs", 100_000)  # warm-up
        one(spark, "ice", 100_000)
        res: dict[str, list[tuple[float, float]]] = {"fs": [], "ice": []}
        for rep in range(args.reps):
            for cat, runs in res.items():
                r = one(spark, cat, args.rows)
                runs.append(r)
                print(f"  rep {rep} {cat}: insert {r[0]:.2f} s, count one day {r[1]:.3f} s", flush=True)
        print(f"\n{'catalog':<28} {'INSERT s (min/median)':>22} {'rows/s (best)':>14} {'count(*) one day s':>20}")
        names = {"fs": "flight-sink (FlightSinkCatalog)", "ice": "Iceberg (Hadoop catalog)"}
        for cat, rs in res.items():
            ins = [r[0] for r in rs]
            cnt = [r[1] for r in rs]
            print(f"{names[cat]:<28} {min(ins):>10.2f} / {statistics.median(ins):<9.2f} "
                  f"{args.rows / min(ins):>14,.0f} {min(cnt):>9.3f} / {statistics.median(cnt):<9.3f}")
        spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
