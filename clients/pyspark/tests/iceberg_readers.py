"""Reading every table of a server's Iceberg REST catalog with real engines, into one canonical
form compared against DoGet.

The engines: PyIceberg (``load_catalog(type="rest")``), Polars (``scan_iceberg`` of the table
PyIceberg loads, with the storage options of its catalog config), DuckDB (``ATTACH ... (TYPE iceberg)`` with the extensions of the pip packages
``duckdb-ext-iceberg``, ``duckdb-ext-avro`` and ``duckdb-ext-httpfs``) and Spark 4.1 with the
Iceberg runtime (a REST catalog, ``spark.sql.catalog.<name>.type=rest``; run as a script in the
PySpark 4.1 environment: ``python iceberg_readers.py spark CATALOG_URI JAR``, which prints one
JSON object ``{table: canonical rows}``), iceberg-rust (pyiceberg-core's DataFusion table
provider over the metadata location and FileIO properties of the table PyIceberg loads) and
Trino (its Iceberg connector with ``iceberg.catalog.type=rest``, a catalog made with ``CREATE
CATALOG`` in a running Trino server, read over Trino's HTTP protocol; its JSON values are
typed by each column's type signature).

Canonical form: a row is a dict of column name to a JSON value, rows sorted by ``id``. Floats
are ``repr`` (so NaN, infinities and -0.0 are told apart), decimals their plain digits,
timestamps ISO text (zoned ones in UTC, "+00:00"), dates and times ISO text, binary values hex,
UUIDs their text, maps sorted ``[key, value]`` pairs (whatever shape the engine gives a map).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import struct
import sys
import urllib.request
import uuid
from typing import Any, Dict, Iterable, List, Tuple

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


def read_iceberg_rust(uri: str, token: str) -> Dict[str, Any]:
    """{table: rows} for every table the catalog lists, each read by iceberg-rust: PyIceberg
    loads the table through the catalog (its metadata location, and the FileIO properties of
    the load result's config: endpoint, region, vended credentials), DataFusion scans it with
    pyiceberg-core's table provider. A table it cannot read is {"error": the error}."""
    from datafusion import SessionContext
    from pyiceberg.catalog import load_catalog
    from pyiceberg_core.datafusion import IcebergDataFusionTable

    cat = load_catalog("flight-sink", type="rest", uri=uri, token=token)
    out: Dict[str, Any] = {}
    for ident in cat.list_tables("default"):
        tbl = cat.load_table(ident)
        props = {k: v for k, v in tbl.io.properties.items() if isinstance(v, str)}
        provider = IcebergDataFusionTable(
            identifier=list(ident), metadata_location=tbl.metadata_location, file_io_properties=props
        )
        ctx = SessionContext()
        ctx.register_table("t", provider)
        try:
            out[ident[-1]] = ctx.sql("SELECT * FROM t").to_arrow_table()
        except Exception as e:  # noqa: BLE001 - reported to the test
            out[ident[-1]] = {"error": str(e)}
    return out


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


def trino_query(server: str, sql: str) -> Tuple[List[Dict[str, Any]], List[List[Any]]]:
    """Runs one statement on a Trino server (``http://host:port``) over its HTTP protocol and
    returns (columns, rows) as Trino encodes them; raises TrinoError when the query fails. The
    client declares PARAMETRIC_DATETIME, else Trino rounds times and timestamps to
    milliseconds for it; the session's time zone is UTC."""
    headers = {
        "X-Trino-User": "flight-sink-test",
        "X-Trino-Time-Zone": "UTC",
        "X-Trino-Client-Capabilities": "PARAMETRIC_DATETIME",
    }
    req = urllib.request.Request(f"{server}/v1/statement", data=sql.encode(), headers=headers, method="POST")
    columns: List[Dict[str, Any]] = []
    rows: List[List[Any]] = []
    while True:
        with urllib.request.urlopen(req, timeout=300) as resp:
            res = json.load(resp)
        columns = res.get("columns", columns)
        rows.extend(res.get("data", []))
        if "error" in res:
            err = res["error"]
            causes, info = [], err.get("failureInfo", {}).get("cause")
            while info:  # the causes' messages: the error's own often says only where it failed
                causes.append(f"{info.get('type')}: {info.get('message')}")
                info = info.get("cause")
            raise TrinoError(" <- ".join([f"{err.get('errorName')}: {err.get('message')}", *causes]))
        if "nextUri" not in res:
            return columns, rows
        req = urllib.request.Request(res["nextUri"], headers=headers)


class TrinoError(Exception):
    """A query Trino answered with an error (its error name and message)."""


def canon_trino(v: Any, sig: Dict[str, Any]) -> Any:
    """A value of Trino's JSON encoding, typed by its column's type signature, in canonical
    form: real is rounded to float32 (Trino writes its shortest decimal text), varbinary is
    base64, a row is a positional list, a map a JSON object keyed by the key's text."""
    if v is None:
        return None
    raw, args = sig["rawType"], sig.get("arguments", [])
    if raw in ("double", "real"):
        f = float(v)  # "NaN", "Infinity" and "-Infinity" are strings
        if raw == "real":
            f = struct.unpack("<f", struct.pack("<f", f))[0]
        return canon_value(f)
    if raw == "decimal":
        return canon_value(decimal.Decimal(v))
    if raw == "varbinary":
        return canon_value(base64.b64decode(v))
    if raw == "date":
        return canon_value(dt.date.fromisoformat(v))
    if raw == "time":
        return canon_value(dt.time.fromisoformat(v))
    if raw == "timestamp":
        return canon_value(dt.datetime.fromisoformat(v))
    if raw == "timestamp with time zone":
        local, zone = v.rsplit(" ", 1)
        assert zone == "UTC", v  # the session's time zone
        return canon_value(dt.datetime.fromisoformat(local).replace(tzinfo=dt.timezone.utc))
    if raw == "uuid":
        return canon_value(v, uuid_col=True)
    if raw == "array":
        return [canon_trino(x, args[0]["value"]) for x in v]
    if raw == "row":
        fields = [a["value"] for a in args]
        return {f["fieldName"]["name"]: canon_trino(x, f["typeSignature"]) for f, x in zip(fields, v)}
    if raw == "map":
        ksig, vsig = args[0]["value"], args[1]["value"]
        keys = {k: (k if ksig["rawType"] in ("varchar", "char") else json.loads(k)) for k in v}
        return sorted([[canon_trino(keys[k], ksig), canon_trino(x, vsig)] for k, x in v.items()], key=json.dumps)
    if raw in ("boolean", "tinyint", "smallint", "integer", "bigint", "varchar", "char"):
        return v
    raise TypeError(f"no canonical form for Trino's {raw}: {v!r}")


def read_trino(server: str, catalog: str, properties: Dict[str, str]) -> Dict[str, Any]:
    """{table: canonical rows} for every table of the Iceberg catalog Trino makes with
    ``CREATE CATALOG catalog USING iceberg WITH (properties)``, dropped at the end; a table
    Trino cannot read is reported as {"error": Trino's error}."""
    with_ = ", ".join(f'"{k}" = {sql_string(v)}' for k, v in sorted(properties.items()))
    trino_query(server, f"CREATE CATALOG {catalog} USING iceberg WITH ({with_})")
    try:
        _, names = trino_query(server, f'SHOW TABLES FROM {catalog}."default"')
        out: Dict[str, Any] = {}
        for (name,) in names:
            try:
                cols, rows = trino_query(server, f'SELECT * FROM {catalog}."default"."{name}"')
            except TrinoError as e:
                out[name] = {"error": str(e)}
                continue
            recs = [{c["name"]: canon_trino(x, c["typeSignature"]) for c, x in zip(cols, row)} for row in rows]
            out[name] = sorted(recs, key=lambda r: r["id"])
        return out
    finally:
        trino_query(server, f"DROP CATALOG {catalog}")


def sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


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
