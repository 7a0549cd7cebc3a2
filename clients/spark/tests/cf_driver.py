"""A Spark driver for the change feed driver-kill test (test_change_feed.py): the JVM connector's
change feed stream of SRC (readChangeFeed from version 1) written to the flight-sink table DST.

    python cf_driver.py URI SRC DST CHECKPOINT JAR (stream|available-now)

``stream`` runs with a 100 ms trigger until killed; ``available-now`` reads every version there is
and exits. Run as its own process: the test SIGKILLs its process group (Python and JVM) and
restarts it from the same checkpoint.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession


def main() -> None:
    uri, src, dst, ckpt, jar, how = sys.argv[1:7]
    spark = (
        SparkSession.builder.master("local[2]").appName("flight-sink-change-feed-kill")
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    feed = (spark.readStream.format("flight-sink").option("uri", uri).option("table", src)
            .option("readChangeFeed", "true").option("startingVersion", "1").load())
    w = (feed.writeStream.format("flight-sink").option("uri", uri).option("table", dst)
         .option("checkpointLocation", ckpt))
    w = w.trigger(availableNow=True) if how == "available-now" else w.trigger(processingTime="100 milliseconds")
    q = w.start()
    print("started", q.id, flush=True)
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    spark.stop()


if __name__ == "__main__":
    main()
