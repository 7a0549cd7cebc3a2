"""A Spark driver for the driver-kill tests (sparkutil.check_driver_sigkill): a rate-micro-batch
query writing with format("flight-sink") until it has committed ``UNTIL_EPOCHS`` epochs (or is
killed). Without JAR format("flight-sink") is the Python data source (registered here); with JAR
it is the JVM connector from that jar on spark.jars; with JAR and ``catalog`` the query writes by
table name through the jar's catalog (``writeStream.toTable("fs.default.TABLE")``, which creates
the table on the first run).

    python ds_driver.py URI TABLE CHECKPOINT ROWS_PER_BATCH UNTIL_EPOCHS [JAR [catalog]]

Run as its own process (the test SIGKILLs its whole process group, JVM included, and restarts
it from the same checkpoint). Prints "started <query id>" once the query runs.
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

import flight_sink as fs
from flight_sink.spark import register

from sparkutil import epoch_commits


def main() -> None:
    uri, table, ckpt, rows_per_batch, until = sys.argv[1:6]
    jar = sys.argv[6] if len(sys.argv) > 6 else None
    catalog = len(sys.argv) > 7 and sys.argv[7] == "catalog"
    builder = SparkSession.builder.master("local[2]").appName("flight-sink-driver-kill")
    if jar:
        builder = builder.config("spark.jars", jar)
    if catalog:
        builder = builder.config("spark.sql.catalog.fs", "io.flightsink.spark.FlightSinkCatalog").config(
            "spark.sql.catalog.fs.uri", uri
        )
    spark = (
        builder
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if not jar:
        register(spark)
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", int(rows_per_batch))
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "timestamp AS ts")
        .writeStream.option("checkpointLocation", ckpt)
        .trigger(processingTime="200 milliseconds")
    )
    if catalog:
        q = stream.toTable(f"fs.default.{table}")
    else:
        q = stream.format("flight-sink").option("uri", uri).option("table", table).start()
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
