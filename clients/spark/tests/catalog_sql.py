"""A PySpark driver for test_catalog.py: the SQL life of a table through the jar's catalog
(spark.sql.catalog.fs=io.flightsink.spark.FlightSinkCatalog). Prints one JSON object of what it
saw as its last line.

    python catalog_sql.py JAR URI
"""

from __future__ import annotations

import json
import sys

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

    def ids(q: str) -> list:
        return sorted(r[0] for r in spark.sql(q).collect())

    ddl = "CREATE TABLE fs.default.events (id BIGINT, ts TIMESTAMP, s STRING) {} TBLPROPERTIES ('primary_key'='id')"
    try:
        spark.sql(ddl.format("PARTITIONED BY (days(ts), bucket(4, id))"))
        out["partitioned"] = True
    except Exception as e:  # a server without partition specs refuses the field
        if 'unknown field "partition_by"' not in str(e):
            raise
        spark.sql(ddl.format(""))
        out["partitioned"] = False

    spark.sql(
        "INSERT INTO fs.default.events VALUES (1, TIMESTAMP'2024-01-01 10:00:00', 'a'), "
        "(2, TIMESTAMP'2024-01-02 10:00:00', 'b'), (3, TIMESTAMP'2024-01-02 11:00:00', 'c')"
    )
    client = fs.Client(uri)
    out["v1"] = client.table_stats("events")["version"]
    # A time after version v1 committed (the INSERT returned) and before the next INSERT starts,
    # on the clock the server stamps versions with (this machine's), in UTC.
    after_v1 = spark.sql("SELECT CAST(current_timestamp() AS STRING)").collect()[0][0]
    spark.sql("INSERT INTO fs.default.events VALUES (4, TIMESTAMP'2024-01-03 10:00:00', 'd')")
    out["all"] = ids("SELECT id FROM fs.default.events")
    day = "ts >= TIMESTAMP'2024-01-02 00:00:00' AND ts < TIMESTAMP'2024-01-03 00:00:00'"
    q = spark.sql(f"SELECT id FROM fs.default.events WHERE {day}")
    out["day_plan"] = q._jdf.queryExecution().executedPlan().toString()
    out["day"] = sorted(r[0] for r in q.collect())

    spark.sql(f"DELETE FROM fs.default.events WHERE {day}")
    out["after_delete"] = ids("SELECT id FROM fs.default.events")
    out["version_as_of"] = ids(f"SELECT id FROM fs.default.events VERSION AS OF {out['v1']}")
    out["timestamp_as_of"] = ids(f"SELECT id FROM fs.default.events TIMESTAMP AS OF '{after_v1}'")

    spark.sql("ALTER TABLE fs.default.events ADD COLUMNS (note STRING)")
    spark.sql("INSERT INTO fs.default.events VALUES (5, TIMESTAMP'2024-01-04 10:00:00', 'e', 'new')")
    out["notes"] = [[r[0], r[1]] for r in spark.sql("SELECT id, note FROM fs.default.events ORDER BY id").collect()]

    out["tables"] = sorted(r[1] for r in spark.sql("SHOW TABLES IN fs.default").collect())
    out["describe"] = {r[0]: r[1] for r in spark.sql("DESCRIBE TABLE EXTENDED fs.default.events").collect()}
    out["stats"] = client.table_stats("events")

    # readStream.table: the table's rows, once.
    rq = (
        spark.readStream.table("fs.default.events")
        .writeStream.format("memory")
        .queryName("events_stream")
        .trigger(availableNow=True)
        .start()
    )
    rq.awaitTermination()
    out["stream_read"] = ids("SELECT id FROM events_stream")

    spark.sql("DROP TABLE fs.default.events")
    out["tables_after_drop"] = sorted(r[1] for r in spark.sql("SHOW TABLES IN fs.default").collect())
    spark.stop()
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
