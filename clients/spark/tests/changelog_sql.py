"""A PySpark (>= 4.2) driver for test_catalog.py: a keyed table's changes through the jar's catalog
(TableCatalog.loadChangelog): a batch read of a version range (spark.read.changes) and a stream
(spark.readStream.changes) that follows upserts and a delete. Prints one JSON object of what it
saw as its last line.

    python changelog_sql.py JAR URI
"""

from __future__ import annotations

import json
import sys
import time

import flight_sink as fs
from pyspark.sql import SparkSession


def main() -> None:
    jar, uri = sys.argv[1:3]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.catalog.fs", "io.flightsink.spark.FlightSinkCatalog")
        .config("spark.sql.catalog.fs.uri", uri)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    out: dict = {"spark": spark.version}
    client = fs.Client(uri)

    def changes(df) -> list:
        return sorted(tuple(r) for r in df.select("_commit_version", "_change_type", "id", "s").collect())

    spark.sql("CREATE TABLE fs.default.kv (id BIGINT, s STRING) TBLPROPERTIES ('primary_key'='id')")
    spark.sql("INSERT INTO fs.default.kv VALUES (1, 'a'), (2, 'b')")
    v_insert = client.table_stats("kv").version
    out["v_insert"] = v_insert
    out["columns"] = spark.read.option("startingVersion", str(v_insert)).changes("fs.default.kv").columns
    out["batch"] = changes(spark.read.option("startingVersion", str(v_insert)).changes("fs.default.kv"))

    rows: list = []
    q = (
        spark.readStream.option("startingVersion", str(v_insert + 1))
        .changes("fs.default.kv")
        .writeStream.trigger(processingTime="100 milliseconds")
        .foreachBatch(lambda df, _: rows.extend(changes(df)))
        .start()
    )
    try:
        client.put_epoch("kv", _table(client, [(2, "b2"), (3, "c")]), query_id="changelog", epoch_id=0, mode="update")
        v_upsert = client.table_stats("kv").version
        spark.sql("DELETE FROM fs.default.kv WHERE id = 1")
        v_delete = client.table_stats("kv").version
        deadline = time.monotonic() + 300
        while not any(r[0] == v_delete for r in rows) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        q.stop()
    out["v_upsert"], out["v_delete"] = v_upsert, v_delete
    out["stream"] = sorted(rows)
    print(json.dumps(out))


def _table(client: fs.Client, rows: list):
    import pyarrow as pa

    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "s": [r[1] for r in rows]})


if __name__ == "__main__":
    main()
