"""Every mode of the Spark data source ``format("flight-sink")``, one after the other.

    make run &                                         # flight-sink on grpc://127.0.0.1:8815
    python examples/pyspark_datasource.py              # or: --start-server (a throw-away server)

1. a streaming write (``rate-micro-batch`` source, append mode): each micro-batch is one
   transaction, exactly once across restarts;
2. a streaming write in complete mode (an aggregate): each micro-batch is one Overwrite;
3. batch writes: ``df.write...mode("append")`` and ``mode("overwrite")``, one transaction each;
4. a batch read with a pushed filter and time travel (``version``);
5. a streaming read of the table of step 1 (offsets are table versions), into a second table;
6. the ``foreach`` writer (the Real-Time Mode path) into a MemWAL table.

Each step prints what landed. PySpark 4.0+ (filter pushdown: 4.1+).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def wait_for_batch(query, batch_id: int) -> None:
    """Wait until ``query`` has finished micro-batch ``batch_id``; raise the query's error if it
    fails first."""
    while (query.lastProgress or {}).get("batchId", -1) < batch_id:
        if query.exception() is not None:
            raise query.exception()
        if not query.isActive:
            raise RuntimeError(f"query {query.id} stopped before micro-batch {batch_id}")
        time.sleep(0.2)


def main() -> int:
    """Run the steps; a failure is one line on stderr and exit status 1."""
    try:
        return run()
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        print(f"pyspark_datasource: {exc.name} is not installed: pip install './clients/pyspark[spark]'",
              file=sys.stderr)
        return 1
    except Exception as exc:  # one line for the user, whatever failed
        from flight_sink.spark import failure_line

        print(f"pyspark_datasource: {failure_line(exc)}", file=sys.stderr)
        return 1


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", default="grpc://127.0.0.1:8815")
    ap.add_argument("--prefix", default="ds_example", help="table name prefix")
    ap.add_argument("--start-server", action="store_true")
    args = ap.parse_args()

    # Spark's Python workers run this interpreter (and so this environment's flight_sink), not
    # whichever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    from flight_sink import Client
    from flight_sink.foreach import FlightSinkForeachWriter
    from flight_sink.spark import register

    server = None
    if args.start_server:
        from flight_sink.local_server import LocalServer, build_server

        work = Path(tempfile.mkdtemp(prefix="flight-sink-example-"))
        server = LocalServer.start(build_server(REPO_ROOT, work), work / "tables")
        args.uri = server.uri
    ckpt = Path(tempfile.mkdtemp(prefix="flight-sink-ckpt-"))
    spark = (
        SparkSession.builder.master("local[2]").appName("flight-sink-datasource-example")
        .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    # A failure is reported in one line (main); Spark's error log would repeat it as stack traces.
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    client = Client(args.uri)
    t = lambda name: f"{args.prefix}_{name}"  # noqa: E731
    opts = lambda name: {"uri": args.uri, "table": t(name)}  # noqa: E731
    try:
        # 1. Streaming write, append mode.
        events = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1000)
                  .option("numPartitions", 2).load()
                  .select(F.col("value").alias("id"), (F.col("value") % 10).alias("sensor")))
        q = (events.writeStream.format("flight-sink").options(**opts("events"))
             .option("checkpointLocation", str(ckpt / "events"))
             .trigger(processingTime="1 second").start())
        wait_for_batch(q, 3)
        q.stop()
        print("1. streaming write:", client.table_stats(t("events")).rows, "rows,",
              [h.operation for h in client.history(t("events"), 3)])

        # 2. Streaming write, complete mode (an aggregate of the table of step 1, read as a stream).
        agg = (spark.readStream.format("flight-sink").options(**opts("events")).load()
               .groupBy("sensor").count())
        q = (agg.writeStream.format("flight-sink").outputMode("complete").options(**opts("counts"))
             .option("checkpointLocation", str(ckpt / "counts")).trigger(availableNow=True).start())
        q.awaitTermination()
        print("2. complete mode:", sorted(client.read(t("counts")).to_pylist(), key=lambda r: r["sensor"])[:3], "...")

        # 3. Batch writes.
        df = spark.range(0, 10_000, numPartitions=4).selectExpr("id", "id % 7 AS k")
        df.write.format("flight-sink").options(**opts("batch")).mode("append").save()
        df.write.format("flight-sink").options(**opts("batch")).mode("overwrite").save()
        print("3. batch writes:", [h.operation for h in client.history(t("batch"), 3)])

        # 4. Batch reads: a pushed filter, time travel.
        r = spark.read.format("flight-sink").options(**opts("batch"))
        print("4. batch read: k = 3 ->", r.load().where("k = 3").count(), "rows; version 2 ->",
              r.option("version", 2).load().count(), "rows")

        # 5. Streaming read into a second table.
        q = (spark.readStream.format("flight-sink").options(**opts("events")).load()
             .writeStream.format("flight-sink").options(**opts("events_copy"))
             .option("checkpointLocation", str(ckpt / "copy")).trigger(availableNow=True).start())
        q.awaitTermination()
        print("5. streaming read:", client.table_stats(t("events_copy")).rows, "rows copied")

        # 6. The foreach writer into a MemWAL table.
        q = (events.writeStream.foreach(FlightSinkForeachWriter(args.uri, t("rtm")))
             .option("checkpointLocation", str(ckpt / "rtm")).trigger(processingTime="1 second").start())
        wait_for_batch(q, 2)
        q.stop()
        print("6. foreach writer:", client.read(t("rtm")).num_rows, "rows in MemWAL table", t("rtm"))
        return 0
    finally:
        spark.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
