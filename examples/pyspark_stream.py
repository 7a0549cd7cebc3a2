"""A Spark Structured Streaming job that lands every micro-batch in flight-sink exactly once.

Start a server, then run the job (PySpark 3.5 or 4.x, Java 17):

    make run                                   # flight-sink on grpc://127.0.0.1:8815
    pip install './clients/pyspark[spark]'
    python examples/pyspark_stream.py --batches 5

or let the example build and start a throw-away server itself:

    python examples/pyspark_stream.py --start-server --batches 5

The query reads Spark's ``rate-micro-batch`` source (a fixed number of rows per batch), derives
a few columns and writes each micro-batch with one line in ``foreachBatch``:

    .foreachBatch(FlightSink(uri, table="spark_events"))

Run it again with the same ``--checkpoint``: Spark resumes from the checkpoint with the same
query id, the sink skips any batch that the previous run committed but Spark had not yet marked
done, and every event id is in the table exactly once (the job checks that at the end).

The job writes its own table (``spark_events``), so it runs before or after the Go example against
the same ``make run``. When it fails it prints one line saying why (the server's message), not
Spark's stack traces, and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def stop_between_batches(query, timeout: float = 5.0) -> None:
    """Stop the query, preferably while no micro-batch runs (waiting at most ``timeout`` s).

    ``query.stop()`` interrupts a running batch; inside ``foreachBatch`` Spark's stream thread
    then matches a regular expression over the interrupted Python call's trace, which overflows
    the default thread stack (the session gets a larger one, ``-Xss``) and would print a
    thousand-line StackOverflowError.
    """
    deadline = time.monotonic() + timeout
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def main() -> int:
    try:
        return run()
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        print(f"pyspark_stream: {exc.name} is not installed: pip install './clients/pyspark[spark]'",
              file=sys.stderr)
        return 1
    except Exception as exc:  # one line for the user, whatever failed
        from flight_sink.spark import failure_line

        print(f"pyspark_stream: {failure_line(exc)}", file=sys.stderr)
        return 1


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", default="grpc://127.0.0.1:8815", help="flight-sink server")
    ap.add_argument("--token", default=None, help="bearer token (servers with --auth-token)")
    ap.add_argument("--table", default="spark_events")
    ap.add_argument("--checkpoint", default=None,
                    help="Spark checkpoint (default ./checkpoints/pyspark_stream; with "
                    "--start-server a new temporary directory, as the server's tables are new)")
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=5, help="stop after this many new batches")
    ap.add_argument("--trigger-seconds", type=float, default=1.0)
    ap.add_argument("--start-server", action="store_true",
                    help="build and start a flight-sink server in a temporary directory")
    args = ap.parse_args()

    # Spark's Python workers run this interpreter (and so this environment's flight_sink), not
    # whichever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    from flight_sink import Client
    from flight_sink.spark import FlightSink

    server = None
    if args.start_server:
        from flight_sink.local_server import LocalServer, build_server

        work = Path(tempfile.mkdtemp(prefix="flight-sink-example-"))
        server = LocalServer.start(build_server(REPO_ROOT, work), work / "tables")
        args.uri = server.uri
        print(f"started flight-sink at {args.uri} (tables in {server.root})")
        if args.checkpoint is None:
            args.checkpoint = str(work / "checkpoint")
    if args.checkpoint is None:
        args.checkpoint = "./checkpoints/pyspark_stream"

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("flight-sink-example")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        # Room for the regular expression Spark runs over an interrupted foreachBatch's trace
        # (stop_between_batches).
        .config("spark.driver.extraJavaOptions", "-Xss64m")
        .getOrCreate()
    )
    # The job reports a failure itself, in one line; Spark's own error log would repeat it as
    # pages of stack traces.
    spark.sparkContext.setLogLevel("OFF")
    try:
        events = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", args.rows_per_batch)
            .option("numPartitions", 2)
            .load()
            .select(
                F.col("value").alias("id"),
                F.col("timestamp").alias("ts"),
                (F.col("value") % 10).cast("int").alias("sensor"),
                (F.rand(seed=42) * 100).alias("reading"),
            )
        )
        query = (
            events.writeStream
            .foreachBatch(FlightSink(args.uri, table=args.table, token=args.token))
            .option("checkpointLocation", args.checkpoint)
            .trigger(processingTime=f"{args.trigger_seconds} seconds")
            .start()
        )
        print(f"query {query.id} writing to {args.uri} table {args.table!r}")
        first = None
        while True:
            progress = query.lastProgress
            if progress is not None:
                first = progress["batchId"] if first is None else first
                if progress["batchId"] - first + 1 >= args.batches:
                    break
            if query.exception() is not None:
                raise query.exception()
            time.sleep(0.2)
        stop_between_batches(query)

        client = Client(args.uri, token=args.token)
        stats = client.table_stats(args.table)
        ids = client.read(args.table, columns=["id"]).column("id").to_pylist()
        print(f"table {args.table}: version {stats.version}, {stats.rows} rows, "
              f"{stats.fragments} fragments; query watermarks "
              f"{ {q: w.epoch for q, w in stats.streams.items()} }")
        for h in client.history(args.table, limit=3):
            print(f"  v{h.version} {h.operation:<9} {h.properties}")
        if len(ids) != len(set(ids)) or sorted(ids) != list(range(len(ids))):
            print("pyspark_stream: the table does not hold every event id exactly once", file=sys.stderr)
            return 1
        print(f"every event id 0..{len(ids) - 1} is in the table exactly once")
        return 0
    finally:
        spark.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
