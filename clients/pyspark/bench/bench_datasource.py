"""Benchmark: the data source format("flight-sink") against FlightSink and Parquet.

Writes (the same Parquet input through the file source, ``maxFilesPerTrigger`` files per
micro-batch, ``local[2]``):

- ``format("flight-sink")``: the data source's streaming writer (tasks stage, the driver commits);
- ``foreachBatch(FlightSink)``: the foreachBatch sink;
- ``foreachBatch(df.write.parquet)``: Parquet on the local disk.

Reads: ``spark.read.format("flight-sink").load().count()`` (and with ``.schema("id long")``,
which fetches one column) against ``spark.read.parquet(<the table's own data files>).count()``.

    python clients/pyspark/bench/bench_datasource.py --rows 10000000
    FLIGHT_SINK_BIN=bin/flight-sink python clients/pyspark/bench/bench_datasource.py --rows 2000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import REPO_ROOT, make_input  # noqa: E402


def stream(spark, src: Path, ckpt: Path, files_per_trigger: int, configure) -> float:
    schema = spark.read.parquet(str(src)).schema
    start = time.perf_counter()
    w = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger).parquet(str(src)).writeStream
    q = configure(w).option("checkpointLocation", str(ckpt)).start()
    q.processAllAvailable()
    q.stop()
    return time.perf_counter() - start


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--files-per-trigger", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    from flight_sink import Client
    from flight_sink.local_server import LocalServer, build_server
    from flight_sink.spark import FlightSink, register

    work = Path(tempfile.mkdtemp(prefix="flight-sink-bench-ds-"))
    server = None
    try:
        binary = os.environ.get("FLIGHT_SINK_BIN") or build_server(REPO_ROOT, work)
        server = LocalServer.start(binary, work / "tables")
        uri = server.uri
        src, warm = work / "input", work / "warm"
        make_input(src, args.rows, args.files)
        make_input(warm, max(args.rows // 20, 20_000), 2 * args.files_per_trigger)
        spark = (
            SparkSession.builder.master(args.master).appName("flight-sink-bench-datasource")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        fpt = args.files_per_trigger

        def ds(table):
            return lambda w: w.format("flight-sink").option("uri", uri).option("table", table)

        def fb(table):
            return lambda w: w.foreachBatch(FlightSink(uri, table=table))

        def parquet(out):
            return lambda w: w.foreachBatch(lambda df, _: df.write.mode("append").parquet(str(out)))

        for name, conf in [("ds", ds("warm_ds")), ("fb", fb("warm_fb")), ("pq", parquet(work / "warm-pq"))]:
            stream(spark, warm, work / f"ck-warm-{name}", fpt, conf)
        t_ds = stream(spark, src, work / "ck-ds", fpt, ds("bench_ds"))
        t_fb = stream(spark, src, work / "ck-fb", fpt, fb("bench_fb"))
        t_pq = stream(spark, src, work / "ck-pq", fpt, parquet(work / "pq-out"))
        client = Client(uri)
        for t in ("bench_ds", "bench_fb"):
            assert client.table_stats(t).rows == args.rows, t
        assert spark.read.parquet(str(work / "pq-out")).count() == args.rows

        reader = spark.read.format("flight-sink").option("uri", uri).option("table", "bench_ds")
        reader.load().count()  # warm-up
        n_ds, r_ds = timed(lambda: reader.load().count())
        n_ds1, r_ds1 = timed(lambda: reader.schema("id long").load().count())
        data = str(work / "tables" / "bench_ds" / "data")
        spark.read.parquet(data).count()
        n_pq, r_pq = timed(lambda: spark.read.parquet(data).count())
        _, r_pq_sum = timed(lambda: spark.read.parquet(data).selectExpr("sum(id)").collect())
        _, r_ds_sum = timed(lambda: reader.load().selectExpr("sum(id)").collect())
        assert n_ds == n_ds1 == n_pq == args.rows, (n_ds, n_ds1, n_pq)
        parts = reader.load().rdd.getNumPartitions()

        rate = lambda s: args.rows / s  # noqa: E731
        print(f"PySpark {spark.version}, pyarrow {pa.__version__}, master {args.master}, {args.rows} rows "
              f"in {args.files} files, {fpt} files per micro-batch; load {os.getloadavg()[0]:.1f}")
        print(f"write format('flight-sink'):       {t_ds:8.2f} s {rate(t_ds):12,.0f} rows/s  "
              f"{rate(t_ds) / rate(t_pq):.2f}x parquet")
        print(f"write foreachBatch(FlightSink):    {t_fb:8.2f} s {rate(t_fb):12,.0f} rows/s  "
              f"{rate(t_fb) / rate(t_pq):.2f}x parquet")
        print(f"write foreachBatch(df.write.parquet): {t_pq:5.2f} s {rate(t_pq):12,.0f} rows/s")
        print(f"read format('flight-sink').count(): {r_ds:6.2f} s ({parts} partitions); "
              f"with .schema('id long'): {r_ds1:.2f} s; sum(id): {r_ds_sum:.2f} s")
        print(f"read spark.read.parquet(files).count(): {r_pq:6.2f} s (footers only); sum(id): {r_pq_sum:.2f} s")
        spark.stop()
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
