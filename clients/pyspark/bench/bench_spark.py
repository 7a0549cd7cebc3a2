"""Benchmark: a Spark streaming query through FlightSink vs. the same query writing Parquet.

Both queries read the same Parquet input files with the file source (``maxFilesPerTrigger``
files per micro-batch) on ``local[2]`` and write every micro-batch in ``foreachBatch``:

- ``flight-sink``: ``FlightSink(uri, table)`` (executors push their partitions in parallel,
  the driver commits each epoch), against a flight-sink server on loopback;
- ``parquet``: ``df.write.mode("append").parquet(dir)`` on the local disk.

Rows/s = input rows / wall time from ``start()`` until every file is processed. The client-time
share comes from FlightSink's metrics: the part of the executor tasks' time spent in the
client (Arrow IPC to gRPC, waiting for acks) rather than in Spark producing rows, and the
driver's time in epoch_status/commit_epoch.

    python clients/pyspark/bench/bench_spark.py                  # builds and starts a server
    python clients/pyspark/bench/bench_spark.py --uri grpc://127.0.0.1:8815
    FLIGHT_SINK_BIN=bin/flight-sink python clients/pyspark/bench/bench_spark.py --rows 4000000
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO_ROOT = Path(__file__).resolve().parents[3]


def make_input(directory: Path, rows: int, files: int) -> None:
    """Parquet files with ``rows`` rows: id, key, value, timestamp and a short text payload."""
    directory.mkdir(parents=True)
    per = rows // files
    for f in range(files):
        start = f * per
        n = per if f < files - 1 else rows - start
        ids = pa.array(range(start, start + n), pa.int64())
        tbl = pa.table(
            {
                "id": ids,
                "k": pc.cast(pc.bit_wise_and(ids, pa.scalar(1023, pa.int64())), pa.int32()),
                "v": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                "ts": pc.cast(pc.multiply(ids, 1000), pa.timestamp("us", tz="UTC")),
                "payload": pc.binary_join_element_wise("event-", pc.cast(ids, pa.string()), ""),
            }
        )
        pq.write_table(tbl, directory / f"part-{f:05d}.parquet")
        os.utime(directory / f"part-{f:05d}.parquet", (1_700_000_000 + f, 1_700_000_000 + f))


def run_query(spark, src: Path, ckpt: Path, sink, files_per_trigger: int) -> float:
    schema = spark.read.parquet(str(src)).schema
    start = time.perf_counter()
    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(src))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ckpt))
        .start()
    )
    q.processAllAvailable()
    q.stop()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", help="a running flight-sink server (default: start one)")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--files-per-trigger", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    from flight_sink import Client
    from flight_sink.local_server import LocalServer, build_server
    from flight_sink.spark import FlightSink

    work = Path(tempfile.mkdtemp(prefix="flight-sink-bench-"))
    server = None
    try:
        uri = args.uri
        if uri is None:
            binary = os.environ.get("FLIGHT_SINK_BIN") or build_server(REPO_ROOT, work)
            server = LocalServer.start(binary, work / "tables")
            uri = server.uri
        src = work / "input"
        make_input(src, args.rows, args.files)
        # Warm-up input: the JIT, the Python workers and the connection get the same start for
        # both measured queries.
        warm = work / "warm"
        make_input(warm, max(args.rows // 10, 20_000), 2 * args.files_per_trigger)

        spark = (
            SparkSession.builder.master(args.master)
            .appName("flight-sink-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")

        def parquet_sink(out: Path):
            def write(df, batch_id):
                df.write.mode("append").parquet(str(out))

            return write

        per_trigger = args.files_per_trigger
        run_query(spark, warm, work / "ck-warm-fs", FlightSink(uri, table="bench_warmup"), per_trigger)
        run_query(spark, warm, work / "ck-warm-pq", parquet_sink(work / "warm-out"), per_trigger)

        sink = FlightSink(uri, table="bench_events")
        fs_secs = run_query(spark, src, work / "ck-fs", sink, args.files_per_trigger)
        pq_secs = run_query(spark, src, work / "ck-pq", parquet_sink(work / "pq-out"), args.files_per_trigger)

        landed = Client(uri).table_stats("bench_events").rows
        written = spark.read.parquet(str(work / "pq-out")).count()
        if landed != args.rows or written != args.rows:
            print(f"row count mismatch: flight-sink {landed}, parquet {written}, input {args.rows}")
            return 1

        m = sink.metrics
        cores = spark.sparkContext.defaultParallelism
        fs_rate = args.rows / fs_secs
        pq_rate = args.rows / pq_secs
        task_share = m.task_client_seconds / m.task_seconds if m.task_seconds else 0.0
        overall = (m.driver_client_seconds + m.task_client_seconds / cores) / fs_secs
        print(f"PySpark {spark.version}, pyarrow {pa.__version__}, master {args.master}, "
              f"{args.rows} rows in {args.files} files, {args.files_per_trigger} files per batch "
              f"({m.batches} batches)")
        print(f"flight-sink (FlightSink, executors): {fs_secs:8.2f} s  {fs_rate:12,.0f} rows/s")
        print(f"parquet (df.write.parquet):          {pq_secs:8.2f} s  {pq_rate:12,.0f} rows/s")
        print(f"ratio flight-sink / parquet:         {fs_rate / pq_rate:8.2f}")
        print(f"client time: {task_share:.1%} of executor push-task time "
              f"({m.task_client_seconds:.2f} of {m.task_seconds:.2f} task-s), "
              f"driver {m.driver_client_seconds:.2f} s (epoch_status + commit_epoch); "
              f"~{overall:.1%} of the query's wall time on {cores} cores")
        spark.stop()
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
