"""Every engine reads what DoGet reads: a table holding every type (nulls and edge values) after
appends, a delete, an upsert, a compaction, a schema change and a MemWAL fold, a MemWAL table
whose rows are folded, a table of pandas' nanosecond timestamps, and partitioned tables of every
transform (keyed, unkeyed and MemWAL: write_partitioned_tables), all read through the
server's Iceberg REST catalog by PyIceberg, Polars, DuckDB, iceberg-rust, Trino and Spark 4.1
(docs/iceberg.md); and the same tables on an S3 root (versitygw) read by PyIceberg, Polars,
DuckDB and iceberg-rust given only the catalog URI and token, the server vending the
credentials, and by Trino given the store's endpoint and keys besides."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pytest

import flight_sink as fs
from conftest import TRINO_MISSING
from iceberg_readers import (
    canon_rows,
    canon_table,
    read_duckdb,
    read_iceberg_rust,
    read_pyiceberg_polars,
    read_trino,
    uuid_columns,
)

pytest.importorskip("pyiceberg.catalog")
pytest.importorskip("polars")

SPARK41_JAR = Path.home() / ".cache/flight-sink/jars/iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
TOKEN = "engines-s3cret"

D38 = pa.decimal128(38, 10)
DEC_MAX = decimal.Decimal("9999999999999999999999999999.9999999999")
DEC_MIN = decimal.Decimal("-9999999999999999999999999999.9999999999")  # not -DEC_MAX: 28 digits of context
UTC = dt.timezone.utc

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("b", pa.bool_()),
        ("u8", pa.uint8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("u32", pa.uint32()),
        ("i64", pa.int64()),
        ("f16", pa.float16()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("s", pa.string()),
        ("bin", pa.binary()),
        ("fx", pa.binary(4)),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tstz", pa.timestamp("us", tz="UTC")),
        ("tsns", pa.timestamp("ns")),
        ("dec", D38),
        ("u", pa.uuid()),
        ("lst", pa.list_(pa.int64())),
        ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        ("m", pa.map_(pa.string(), pa.int64())),
    ]
)

F32 = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 3.4028234663852886e38, -1.401298464324817e-45, 1.5]
F64 = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.7976931348623157e308, -5e-324, 2.25]


def every_type_rows(ids: List[int], tag: str = "") -> pa.Table:
    """Rows of SCHEMA: the row with the smallest id holds nulls in every nullable column, the
    others walk through each column's edge values."""
    cols: Dict[str, List[Any]] = {f.name: [] for f in SCHEMA}
    for n, i in enumerate(ids):
        k = i % 8
        null = n == 0
        row = {
            "id": i,
            "b": k % 2 == 0,
            "u8": [0, 255, 7][k % 3],
            "i16": [-32768, 32767, 0][k % 3],
            "i32": [-2147483648, 2147483647, 0][k % 3],
            "u32": [0, 4294967295, 42][k % 3],
            "i64": [-9223372036854775808, 9223372036854775807, 0][k % 3],
            "f16": [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 65504.0, -6.103515625e-05, 1.5][k],
            "f32": F32[k],
            "f64": F64[k],
            "s": [f"{tag}ünïcode {i}", "", "a string longer than twelve bytes"][k % 3],
            "bin": [b"", b"\x00\xff" + tag.encode(), bytes(range(40))][k % 3],
            "fx": [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"abcd"][k % 3],
            "d": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(2024, 2, 29)][k % 4],
            "ts": [
                dt.datetime(1677, 9, 21, 0, 12, 43, 145225),
                dt.datetime(2262, 4, 11, 23, 47, 16, 854775),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
                dt.datetime(1, 1, 1, 0, 0, 0),
            ][k % 4],
            "tstz": [
                dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=UTC),
                dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            ][k % 4],
            # nanoseconds (pandas' unit): the server keeps the microsecond, truncated.
            "tsns": [
                pa.scalar(-9223372036854775807 + 1000, pa.timestamp("ns")).value,
                pa.scalar(9223372036854775807, pa.timestamp("ns")).value,
                1_700_000_000_123_456_789,
                -1,
            ][k % 4],
            "dec": [DEC_MAX, DEC_MIN, decimal.Decimal("0.0000000001"), decimal.Decimal("-1.5")][k % 4],
            "u": uuid.UUID(int=(i * 0x0123456789ABCDEF) % (1 << 128)).bytes,
            "lst": [[], [1, None, -9223372036854775808], [i]][k % 3],
            "st": [{"a": None, "b": None}, {"a": i, "b": tag + "x"}, {"a": -1, "b": ""}][k % 3],
            "m": [[], [("a", 1), ("b", None)], [(tag + "k", i)]][k % 3],
        }
        for f in SCHEMA:
            cols[f.name].append(None if null and f.nullable else row[f.name])
    arrays = []
    for f in SCHEMA:
        if f.name == "u":
            storage = pa.array(cols["u"], pa.binary(16))
            arrays.append(pa.ExtensionArray.from_storage(pa.uuid(), storage))
        else:
            arrays.append(pa.array(cols[f.name], f.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def with_extra(tbl: pa.Table, ids: List[int]) -> pa.Table:
    return tbl.append_column("extra", pa.array([f"x{i}" for i in ids], pa.string()))


def http_uri(srv) -> str:
    m = re.search(r"http endpoints serving.*?addr=(\S+)", srv.log())
    assert m, srv.log()
    return f"http://{m.group(1).strip(chr(34))}/iceberg"


def spark_read(uri: str) -> Dict[str, List[Dict[str, Any]]]:
    py = os.environ.get("FLIGHT_SINK_SPARK41_PYTHON")
    if not py:
        if os.environ.get("CI") == "true":
            pytest.fail("FLIGHT_SINK_SPARK41_PYTHON is unset (clients/pyspark/tools/spark41_env.sh)")
        pytest.skip("FLIGHT_SINK_SPARK41_PYTHON is unset: `make test-python` sets it")
    assert SPARK41_JAR.is_file(), SPARK41_JAR
    script = Path(__file__).resolve().parent / "iceberg_readers.py"
    env = dict(os.environ, TZ="UTC")
    out = subprocess.run(
        [py, str(script), "spark", uri, TOKEN, str(SPARK41_JAR)],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert out.returncode == 0, out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_difference(got: List[Dict[str, Any]], want: List[Dict[str, Any]]) -> str:
    if len(got) != len(want):
        return f"{len(got)} rows, DoGet {len(want)}: ids {[r.get('id') for r in got]} vs {[r['id'] for r in want]}"
    for g, w in zip(got, want):
        for k in sorted(set(g) | set(w)):
            if g.get(k, "<missing>") != w.get(k, "<missing>"):
                return f"id {w['id']} column {k}: {g.get(k, '<missing>')!r}, DoGet {w.get(k, '<missing>')!r}"
    return ""


# Partitioned tables: every transform, each on a keyed, an unkeyed and a MemWAL table.
PART_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us")),
        ("country", pa.string()),
        ("amount", pa.float64()),
    ]
)
TRANSFORMS = {
    "identity": {"column": "country", "transform": "identity"},
    "year": {"column": "ts", "transform": "year"},
    "month": {"column": "ts", "transform": "month"},
    "day": {"column": "ts", "transform": "day"},
    "hour": {"column": "ts", "transform": "hour"},
    "bucket4": {"column": "id", "transform": "bucket[4]"},
    "truncate2": {"column": "country", "transform": "truncate[2]"},
}
PART_KINDS = ("keyed", "plain", "memwal")
PART_BASE = dt.datetime(2024, 2, 27, 22, 30)
# The day the one-day reads ask for: rows 0..3 of every table fall on it (see part_rows).
PART_DAY = PART_BASE.date()


def part_ts(i: int) -> dt.datetime:
    """Row i's time: rows 0..3 on PART_DAY (two hours), the others 1 day 7 hours apart and more,
    so that they cross hours, days, months (a leap day) and years."""
    if i < 4:
        return PART_BASE + dt.timedelta(minutes=20 * i)
    return PART_BASE + dt.timedelta(days=(i - 3) * 31, hours=7 * i)


def part_rows(ids: List[int], tag: str = "") -> pa.Table:
    """Rows of PART_SCHEMA; id 9 has a null ts and a null country (the null partitions)."""
    countries = ["NL", "NO", "DE", "FR", "US"]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([None if i == 9 else part_ts(i) for i in ids], pa.timestamp("us")),
            "country": pa.array([None if i == 9 else countries[i % 5] + tag for i in ids], pa.string()),
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
        },
        schema=PART_SCHEMA,
    )


def whole_partition_filter(name: str) -> Dict[str, Any]:
    """A delete covering whole partitions of the transform: a range of whole years / months /
    days / hours of ts, one identity value, or the null partition (bucket, truncate)."""
    f = TRANSFORMS[name]
    t = part_ts(6)
    starts = {
        "year": (dt.datetime(t.year, 1, 1), dt.datetime(t.year + 1, 1, 1)),
        "month": (dt.datetime(t.year, t.month, 1), dt.datetime(t.year + (t.month == 12), t.month % 12 + 1, 1)),
        "day": (dt.datetime(t.year, t.month, t.day), dt.datetime(t.year, t.month, t.day) + dt.timedelta(days=1)),
        "hour": (t.replace(minute=0, second=0), t.replace(minute=0, second=0) + dt.timedelta(hours=1)),
    }
    if name in starts:
        lo, hi = starts[name]
        return {"op": "and", "args": [
            {"op": ">=", "column": "ts", "value": lo.isoformat() + "Z"},
            {"op": "<", "column": "ts", "value": hi.isoformat() + "Z"},
        ]}
    if name == "identity":
        return {"op": "=", "column": "country", "value": "DE"}
    if name == "bucket4":
        # Every id of id 6's bucket (by PyIceberg's own transform): its fragments left without a
        # live row are dropped.
        from pyiceberg.transforms import BucketTransform
        from pyiceberg.types import LongType

        bucket = BucketTransform(4).transform(LongType())
        return {"op": "in", "column": "id", "values": [i for i in range(30) if bucket(i) == bucket(6)]}
    return {"op": "is_null", "column": f["column"]}


def write_partitioned_tables(c: fs.Client) -> List[str]:
    """For every transform, p_keyed_<t> (a key: appends, an upsert moving rows between
    partitions, a whole-partition delete, a partial delete, compaction), p_plain_<t> (no key:
    the same without the upsert) and p_memwal_<t> (MemWAL epochs folded, then the deletes,
    compaction and a second fold); returns the table names."""
    names = []
    for t, field in TRANSFORMS.items():
        for kind in PART_KINDS:
            name = f"p_{kind}_{t}"
            names.append(name)
            create: Dict[str, Any] = {"partition_by": [field]}
            route = "direct"
            if kind == "keyed":
                create["primary_key"] = ["id"]
            if kind == "memwal":
                create["memwal"] = {"shards": 1}
                route = "memwal"
            put = lambda data, e, **kw: c.put_epoch(name, data, query_id="p", epoch_id=e, route=route, **kw)  # noqa: E731
            put(part_rows(list(range(0, 12))), 0, create=create)
            put(part_rows(list(range(12, 20)), "b"), 1)
            if kind == "keyed":
                # 5 and 13 change ts and country (their partition); 20 is new.
                moved = part_rows([5, 13, 20], "u").set_column(1, "ts", pa.array([part_ts(17), part_ts(2), part_ts(6)], pa.timestamp("us")))
                put(moved, 2, mode="update")
            if kind == "memwal":
                c.flush_memwal(name)
                c.fold_memwal_shard(name)
            whole = c.delete(name, whole_partition_filter(t))
            assert whole.rows_deleted > 0, (name, whole)
            # Rows a whole-partition delete left (the year and month ranges may have taken them).
            assert c.delete(name, {"op": "in", "column": "id", "values": [1, 14, 16]}).rows_deleted > 0, name
            c.compact(name)
            if kind == "memwal":
                put(part_rows([21, 22, 23, 24], "w"), 2)
                c.flush_memwal(name)
                c.fold_memwal_shard(name)
    return names


def write_every_table(c: fs.Client) -> Dict[str, List[Dict[str, Any]]]:
    """Write the test's tables through the client and publish each one; returns what DoGet reads
    of each, in canonical form: "every" (every type) after appends, a delete, a keyed upsert, a
    compaction, a schema change (merge_schema), an epoch that leaves columns out and a MemWAL
    fold; "folded", a MemWAL table folded; "pandas", written from pandas (timestamp[ns]);
    "times", Iceberg time columns."""
    pd = pytest.importorskip("pandas")
    # The keyed table with every type: every operation, the schema change, a fold.
    put = lambda data, e, **kw: c.put_epoch("every", data, query_id="q", epoch_id=e, **kw)  # noqa: E731
    put(every_type_rows(list(range(0, 8))), 0, route="direct", create={"primary_key": ["id"], "memwal": {"shards": 1}})
    put(every_type_rows(list(range(8, 16)), "b"), 1, route="direct")
    c.delete("every", {"op": "in", "column": "id", "values": [3, 9]})
    put(every_type_rows([5, 16, 17], "u"), 2, mode="update", route="direct")  # 5 updated, 16 and 17 inserted
    assert c.compact("every").fragments_removed > 1
    put(with_extra(every_type_rows([18, 19, 20], "x"), [18, 19, 20]), 3, route="direct", merge_schema=True)
    # An epoch that leaves nullable columns out (its files hold only the columns it carried):
    # engines read the others by field id, the omitted ones as nulls.
    put(with_extra(every_type_rows([24, 25], "o"), [24, 25]).drop_columns(["s", "dec", "st", "ts"]), 4, route="direct", merge_schema=True)
    put(with_extra(every_type_rows([21, 22, 23, 4], "w"), [21, 22, 23, 4]), 5, route="memwal")
    c.flush_memwal("every")
    c.fold_memwal_shard("every")

    # A MemWAL table (no key) whose rows reach Iceberg by a fold.
    for e in range(2):
        c.put_epoch("folded", every_type_rows(list(range(10 * e, 10 * e + 8)), f"m{e}"), query_id="m", epoch_id=e, route="memwal", create={"memwal": {"shards": 1}})
    c.flush_memwal("folded")
    c.fold_memwal_shard("folded")

    # pandas' default timestamps (nanoseconds, sub-microsecond parts), uint32, float16.
    df = pd.DataFrame(
        {
            "id": pd.Series([1, 2, 3], dtype="int64"),
            "ts": pd.to_datetime(["1677-09-22 00:12:43.145225", "2024-05-06 07:08:09.123456789", "2262-04-11 23:47:16.854775"]),
            "u32": pd.Series([0, 4294967295, 7], dtype="uint32"),
        }
    )
    c.put_epoch("pandas", pa.Table.from_pandas(df, preserve_index=False), query_id="p", epoch_id=0, create=True)

    # Iceberg time columns: Spark does not read them (below).
    times = pa.table(
        {
            "id": pa.array([0, 1, 2, 3], pa.int64()),
            "t": pa.array([None, dt.time(0, 0), dt.time(23, 59, 59, 999999), dt.time(12, 0, 0, 1)], pa.time64("us")),
            "t32": pa.array([None, 0, 86399999, 1], pa.time32("ms")),
            "tns": pa.array([None, 0, 86399999999999, 1999], pa.time64("ns")),
        }
    )
    c.put_epoch("times", times, query_id="t", epoch_id=0, create=True)

    partitioned = write_partitioned_tables(c)

    want = {}
    for name in ("every", "folded", "pandas", "times", *partitioned):
        res = c.publish_iceberg(name)
        assert res.iceberg_version == c.table_stats(name).version, res
        served = c.read(name)
        want[name] = canon_rows(served.to_pylist(), uuid_columns(served.schema))
    assert [r["id"] for r in want["every"]] == [0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]
    assert want["every"][3]["extra"] == "x4" and want["every"][0]["extra"] is None
    assert len(want["folded"]) == 16
    assert [r["id"] for r in want["p_keyed_identity"]] == [0, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 17, 18, 19, 20]
    assert [r["id"] for r in want["p_memwal_bucket4"]][-4:] == [21, 22, 23, 24]
    return want


# The tables an engine cannot read, with the text of the error it gives, each for a reason
# docs/iceberg.md gives: Spark has no type for Iceberg's time and refuses the whole table.
UNREADABLE = {
    ("spark", "times"): "does not support time",
}


def engine_failures(engines: Dict[str, Dict[str, Any]], want: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Each engine's differences from DoGet: a table listed or missing, a row or a value, a read
    error, or a table of UNREADABLE it read or refused for another reason."""
    failures = []
    for engine, tables in engines.items():
        if sorted(tables) != sorted(want):
            failures.append(f"{engine} lists {sorted(tables)}, want {sorted(want)}")
        for name, rows in want.items():
            got = tables.get(name)
            refusal = UNREADABLE.get((engine, name))
            if refusal is not None:
                if not (isinstance(got, dict) and refusal in got.get("error", "")):
                    failures.append(f"{engine} reads {name}: want its known refusal ({refusal!r}), got {str(got)[:300]}")
            elif isinstance(got, dict):
                failures.append(f"{engine} cannot read {name}: {got.get('error', '')[:1000]}")
            elif got is not None:
                diff = first_difference(got, rows)
                if diff:
                    failures.append(f"{engine} reads {name}: {diff}")
    return failures


def read_open_engines(uri: str) -> Dict[str, Dict[str, Any]]:
    """PyIceberg, Polars, DuckDB and iceberg-rust attached to the catalog with its URI and token
    alone: {engine: {table: canonical rows or {"error": ...}}}."""
    engines: Dict[str, Dict[str, Any]] = {}
    for engine, tables in read_pyiceberg_polars(uri, TOKEN).items():
        engines[engine] = {n: canon_table(t, ["u"]) for n, t in tables.items()}
    engines["duckdb"] = {n: canon_table(t, ["u"]) for n, t in read_duckdb(uri, TOKEN).items()}
    engines["iceberg-rust"] = {
        n: t if isinstance(t, dict) else canon_table(t, ["u"]) for n, t in read_iceberg_rust(uri, TOKEN).items()
    }
    return engines


def trino_catalog(uri: str) -> Dict[str, str]:
    """The properties of a Trino Iceberg catalog on the server's REST catalog (the token as a
    static OAuth2 bearer token)."""
    return {
        "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": uri,
        "iceberg.rest-catalog.security": "OAUTH2",
        "iceberg.rest-catalog.oauth2.token": TOKEN,
    }


def check_one_day_plans(c: fs.Client, uri: str) -> None:
    """A one-day filter on ts plans only that day's files: in PyIceberg
    (``scan(row_filter=...).plan_files()``: files of the day's partition alone, every one of
    them, fewer than the table's) and in GetFlightInfo (the filtered descriptor's total_bytes are
    those files' bytes, less than the whole table's); DoGet with the filter reads the day's rows."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    lo = dt.datetime.combine(PART_DAY, dt.time())
    hi = lo + dt.timedelta(days=1)
    day_number = (PART_DAY - dt.date(1970, 1, 1)).days
    flt = {"op": "and", "args": [
        {"op": ">=", "column": "ts", "value": lo.isoformat() + "Z"},
        {"op": "<", "column": "ts", "value": hi.isoformat() + "Z"},
    ]}
    cat = load_catalog("flight-sink", type="rest", uri=uri, token=TOKEN)
    for kind in PART_KINDS:
        name = f"p_{kind}_day"
        tbl = cat.load_table(("default", name))
        planned = list(tbl.scan(row_filter=And(GreaterThanOrEqual("ts", lo.isoformat()), LessThan("ts", hi.isoformat()))).plan_files())
        every = list(tbl.scan().plan_files())
        assert planned and len(planned) < len(every), (name, len(planned), len(every))
        assert all(t.file.partition[0] == day_number for t in planned), (name, [t.file.partition for t in planned])
        assert sorted(t.file.file_path for t in planned) == sorted(t.file.file_path for t in every if t.file.partition[0] == day_number), name

        info, whole = c.flight_info(name, filter=flt), c.flight_info(name)
        assert info.total_bytes == sum(t.file.file_size_in_bytes for t in planned), (name, info.total_bytes, [t.file.file_size_in_bytes for t in planned])
        assert 0 < info.total_bytes < whole.total_bytes, (name, info.total_bytes, whole.total_bytes)
        assert 0 < len(info.endpoints) <= len(whole.endpoints), name
        day_rows = c.read(name, filter=flt, direct=False)
        want = [r for r in c.read(name).to_pylist() if r["ts"] is not None and r["ts"].date() == PART_DAY]
        assert sorted(r["id"] for r in day_rows.to_pylist()) == sorted(r["id"] for r in want) and want, name


def test_every_engine_reads_every_type(server_factory, trino) -> None:
    """PyIceberg, Polars, DuckDB, iceberg-rust, Trino and Spark, attached to the REST catalog,
    list every table and read each one exactly as DoGet (every column, every value): the tables
    of write_every_table. Trino reads the local root's file:// locations with its native local
    file system rooted at /."""
    srv = server_factory(extra_args=["--http-listen", "127.0.0.1:0", "--auth-token", TOKEN, "--maintenance", "off"])
    uri = http_uri(srv)
    with fs.Client(srv.uri, token=TOKEN) as c:
        want = write_every_table(c)

    engines = read_open_engines(uri)
    if trino is not None:
        engines["trino"] = read_trino(
            trino, "fs_local", {**trino_catalog(uri), "fs.native-local.enabled": "true", "local.location": "/"}
        )
    engines["spark"] = spark_read(uri)
    failures = engine_failures(engines, want)
    assert not failures, "\n".join(failures)
    with fs.Client(srv.uri, token=TOKEN) as c:
        check_one_day_plans(c, uri)
    if trino is None:
        pytest.skip(f"the other engines read every table exactly; {TRINO_MISSING}")


def test_every_engine_reads_an_s3_root_with_uri_and_token(server_factory, s3_gateway, trino, tmp_path, monkeypatch) -> None:
    """A server whose root is on S3 (versitygw), vending read credentials
    (--iceberg-vend-credentials): PyIceberg, Polars, DuckDB and iceberg-rust, given only the
    catalog URI and token (no AWS settings in the reader's environment), list every table and
    read each one exactly as DoGet; so does Trino, told the store's endpoint, region, path style
    and keys: its native S3 file system takes neither the endpoint of the load result's config
    nor vended credentials without a session token (docs/iceberg.md)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    # Nothing from a shared AWS configuration either: the catalog's answer is all the reader has.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    vend = tmp_path / "vend.json"
    vend.write_text(json.dumps({"access-key-id": s3_gateway.access_key, "secret-access-key": s3_gateway.secret_key}))
    srv = server_factory(
        root=f"s3://{s3_gateway.bucket}/engines",
        extra_args=[
            "--http-listen", "127.0.0.1:0", "--auth-token", TOKEN, "--maintenance", "off",
            "--iceberg-vend-credentials", str(vend), *s3_gateway.server_args(),
        ],
        env=s3_gateway.env(),
    )
    uri = http_uri(srv)
    with fs.Client(srv.uri, token=TOKEN) as c:
        want = write_every_table(c)

    engines = read_open_engines(uri)
    if trino is not None:
        engines["trino"] = read_trino(
            trino,
            "fs_s3",
            {
                **trino_catalog(uri),
                "fs.native-s3.enabled": "true",
                "s3.endpoint": s3_gateway.endpoint,
                "s3.region": s3_gateway.region,
                "s3.path-style-access": "true",
                "s3.aws-access-key": s3_gateway.access_key,
                "s3.aws-secret-key": s3_gateway.secret_key,
            },
        )
    failures = engine_failures(engines, want)
    assert not failures, "\n".join(failures)
    if trino is None:
        pytest.skip(f"the other engines read every table exactly; {TRINO_MISSING}")
