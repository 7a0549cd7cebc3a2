"""Reading every table of a server's Iceberg REST catalog with real engines, into one canonical
form compared against DoGet.

The engines: PyIceberg (``load_catalog(type="rest")``), Polars (``scan_iceberg`` of the table
PyIceberg loads, with the storage options of its catalog config), DuckDB (``ATTACH ... (TYPE iceberg)`` with the extensions of the pip packages
``duckdb-ext-iceberg``, ``duckdb-ext-avro`` and ``duckdb-ext-httpfs``) and Spark 4.1 with the
Iceberg runtime (a REST catalog, ``spark.sql.catalog.<name>.type=rest``; run as a script in the
PySpark 4.1 environment: ``python iceberg_readers.py spark CATALOG_URI JAR``, which prints one
JSON object ``{table: canonical rows}``).

Canonical form: a row is a dict of column name to a JSON value, rows sorted by ``id``. Floats
are ``repr`` (so NaN, infinities and -0.0 are told apart), decimals their plain digits,
timestamps ISO text (zoned ones in UTC, "+00:00"), dates and times ISO text, binary values hex,
UUIDs their text, maps sorted ``[key, value]`` pairs (whatever shape the engine gives a map).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import sys
import uuid
from typing import Any, Dict, Iterable, List

import pyarrow as pa


def canon_value(v: Any, uuid_col: bool = False) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            return v.astimezone(dt.timezone.utc).isoformat()
        return v.isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        if uuid_col and len(b) == 16:
            return str(uuid.UUID(bytes=b))
        return b.hex()
    if isinstance(v, str):
        return v.lower() if uuid_col else v
    if isinstance(v, dict):
        return {k: canon_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        items = list(v)
        if items and all(isinstance(x, tuple) and len(x) == 2 for x in items):
            return sorted([[canon_value(k), canon_value(x)] for k, x in items], key=json.dumps)
        if items and all(isinstance(x, dict) and set(x) == {"key", "value"} for x in items):
            return sorted([[canon_value(x["key"]), canon_value(x["value"])] for x in items], key=json.dumps)
        return [canon_value(x) for x in items]
    raise TypeError(f"no canonical form for {type(v).__name__}: {v!r}")


def canon_rows(rows: Iterable[Dict[str, Any]], uuid_cols: Iterable[str] = ()) -> List[Dict[str, Any]]:
    """Rows (dicts) in canonical form, sorted by id."""
    uc = set(uuid_cols)
    out = [{k: canon_value(v, k in uc) for k, v in r.items()} for r in rows]
    return sorted(out, key=lambda r: r["id"])


def canon_table(tbl: pa.Table, uuid_cols: Iterable[str] = ()) -> List[Dict[str, Any]]:
    """A pyarrow table in canonical form; uuid_cols are the columns DoGet reads as UUIDs (an
    engine may give them as 16 bytes)."""
    return canon_rows(tbl.to_pylist(), uuid_cols)


def _is_uuid(t: pa.DataType) -> bool:
    return isinstance(t, pa.ExtensionType) and t.extension_name == "arrow.uuid"


def uuid_columns(schema: pa.Schema) -> List[str]:
    """The UUID columns of a DoGet schema (engines give them as text, bytes or UUIDs)."""
    return [f.name for f in schema if _is_uuid(f.type)]


def read_pyiceberg_polars(uri: str, token: str) -> Dict[str, Dict[str, pa.Table]]:
    """{"pyiceberg": {table: rows}, "polars": {table: rows}} for every table the catalog lists."""
    import polars as pl
    from pyiceberg.catalog import load_catalog

    cat = load_catalog("flight-sink", type="rest", uri=uri, token=token)
    out: Dict[str, Dict[str, Any]] = {"pyiceberg": {}, "polars": {}}
    for ident in cat.list_tables("default"):
        tbl = cat.load_table(ident)
        out["pyiceberg"][ident[-1]] = tbl.scan().to_arrow()
        out["polars"][ident[-1]] = pl.scan_iceberg(tbl, storage_options=polars_storage_options(tbl.io.properties)).collect().to_arrow()
    return out


def polars_storage_options(props: Dict[str, str]) -> Dict[str, str] | None:
    """The storage options Polars needs for a table the catalog loaded: its ``s3.*`` config
    (endpoint, vended credentials) and ``client.region`` as ``s3.region``. Polars 2.1 plans an
    Iceberg scan with PyIceberg (without the polars_iceberg plugin) and then reads the files with
    its own object store, configured from ``storage_options`` alone, not from the table's FileIO
    properties: without them it asks AWS for the bucket."""
    opts = {k: v for k, v in props.items() if k.startswith("s3.") and isinstance(v, str)}
    if "client.region" in props and "s3.region" not in opts:
        opts["s3.region"] = props["client.region"]
    return opts or None


def read_duckdb(uri: str, token: str) -> Dict[str, pa.Table]:
    """{table: rows} for every table DuckDB's ATTACH of the catalog lists."""
    import importlib.metadata as md

    import duckdb

    ext = md.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions")
    con = duckdb.connect(config={"extension_directory": str(ext), "autoinstall_known_extensions": False})
    for e in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {e}")
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE SECRET fs (TYPE iceberg, TOKEN '{token}')")
    con.execute(f"ATTACH 'warehouse' AS fs (TYPE iceberg, SECRET fs, ENDPOINT '{uri}')")
    names = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'fs' AND table_schema = 'default'"
    ).fetchall()
    return {n: con.execute(f'SELECT * FROM fs."default"."{n}"').fetch_arrow_table() for (n,) in names}


def spark_main(uri: str, token: str, jar: str) -> None:
    """Spark 4.1 with the Iceberg runtime, the catalog as a REST catalog: prints
    {table: canonical rows} (a column Spark cannot read is reported as {"error": ...})."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", jar)
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.catalog.fs", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.fs.type", "rest")
        .config("spark.sql.catalog.fs.uri", uri)
        .config("spark.sql.catalog.fs.token", token)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    out: Dict[str, Any] = {}
    try:
        for row in spark.sql("SHOW TABLES IN fs.default").collect():
            name = row.tableName
            try:
                tbl = spark.table(f"fs.default.`{name}`").toArrow()
            except Exception as e:  # noqa: BLE001 - reported to the test
                out[name] = {"error": str(e)}
                continue
            out[name] = canon_rows(tbl.to_pylist(), [])
    finally:
        spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "spark":
        spark_main(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: iceberg_readers.py spark CATALOG_URI TOKEN JAR")
