"""A Spark driver for test_jvm_datasource's driver-kill test: a rate-micro-batch query writing
with the JVM connector (format("flight-sink") from the jar in spark.jars, the Python data source
not registered) until it has committed ``UNTIL_EPOCHS`` epochs, or is killed.

    python jvm_driver.py JAR URI TABLE CHECKPOINT ROWS_PER_BATCH UNTIL_EPOCHS

Run as its own process group: the test SIGKILLs it (Python and JVM) and restarts it from the
same checkpoint. Prints "started <query id>" once the query runs.
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

import flight_sink as fs
from jvm_util import epoch_commits


def main() -> None:
    jar, uri, table, ckpt, rows_per_batch, until = sys.argv[1:7]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("flight-sink-jvm-driver-kill")
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    q = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", int(rows_per_batch))
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "timestamp AS ts")
        .writeStream.format("flight-sink")
        .option("uri", uri)
        .option("table", table)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print(f"started {q.id}", flush=True)
    client = fs.Client(uri)
    while q.isActive:
        try:
            done = len(epoch_commits(client, table))
        except fs.TableNotFoundError:
            done = 0
        if done >= int(until):
            break
        time.sleep(0.2)
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    q.stop()
    spark.stop()


if __name__ == "__main__":
    main()
