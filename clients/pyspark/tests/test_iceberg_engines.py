"""Every engine reads what DoGet reads: a table holding every type (nulls and edge values) after
appends, a delete, an upsert, a compaction, a schema change and a MemWAL fold, a MemWAL table
whose rows are folded, and a table of pandas' nanosecond timestamps, all read through the
server's Iceberg REST catalog by PyIceberg, Polars, DuckDB and Spark 4.1 (docs/iceberg.md); and
the same tables on an S3 root (versitygw) read by PyIceberg, Polars and DuckDB given only the
catalog URI and token, the server vending the credentials."""

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
from iceberg_readers import canon_rows, canon_table, read_duckdb, read_pyiceberg_polars, uuid_columns

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

    want = {}
    for name in ("every", "folded", "pandas", "times"):
        res = c.publish_iceberg(name)
        assert res.iceberg_version == c.table_stats(name).version, res
        served = c.read(name)
        want[name] = canon_rows(served.to_pylist(), uuid_columns(served.schema))
    assert [r["id"] for r in want["every"]] == [0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]
    assert want["every"][3]["extra"] == "x4" and want["every"][0]["extra"] is None
    assert len(want["folded"]) == 16
    return want


def engine_failures(engines: Dict[str, Dict[str, List[Dict[str, Any]]]], want: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Each engine's differences from DoGet: a table listed or missing, a row or a value."""
    failures = []
    for engine, tables in engines.items():
        expected = {n: rows for n, rows in want.items() if not (engine == "spark" and n == "times")}
        if sorted(tables) != sorted(expected):
            failures.append(f"{engine} lists {sorted(tables)}, want {sorted(expected)}")
        for name, rows in expected.items():
            if name in tables:
                diff = first_difference(tables[name], rows)
                if diff:
                    failures.append(f"{engine} reads {name}: {diff}")
    return failures


def test_every_engine_reads_every_type(server_factory) -> None:
    """PyIceberg, Polars, DuckDB and Spark, attached to the REST catalog, list every table and
    read each one exactly as DoGet (every column, every value): the tables of
    write_every_table."""
    srv = server_factory(extra_args=["--http-listen", "127.0.0.1:0", "--auth-token", TOKEN, "--maintenance", "off"])
    uri = http_uri(srv)
    with fs.Client(srv.uri, token=TOKEN) as c:
        want = write_every_table(c)

    engines: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for engine, tables in read_pyiceberg_polars(uri, TOKEN).items():
        engines[engine] = {n: canon_table(t, ["u"]) for n, t in tables.items()}
    engines["duckdb"] = {n: canon_table(t, ["u"]) for n, t in read_duckdb(uri, TOKEN).items()}
    spark = spark_read(uri)
    # Spark's own limit (docs/iceberg.md): it has no type for Iceberg's time and refuses the
    # whole table; it reads every other table.
    spark_times = spark.pop("times", None)
    assert spark_times is not None and "does not support time" in spark_times.get("error", ""), spark_times
    engines["spark"] = spark
    failures = engine_failures(engines, want)
    assert not failures, "\n".join(failures)


def test_every_engine_reads_an_s3_root_with_uri_and_token(server_factory, s3_gateway, tmp_path, monkeypatch) -> None:
    """A server whose root is on S3 (versitygw), vending read credentials
    (--iceberg-vend-credentials): PyIceberg, Polars and DuckDB, given only the catalog URI and
    token (no AWS settings in the reader's environment), list every table and read each one
    exactly as DoGet."""
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

    engines: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for engine, tables in read_pyiceberg_polars(uri, TOKEN).items():
        engines[engine] = {n: canon_table(t, ["u"]) for n, t in tables.items()}
    engines["duckdb"] = {n: canon_table(t, ["u"]) for n, t in read_duckdb(uri, TOKEN).items()}
    failures = engine_failures(engines, want)
    assert not failures, "\n".join(failures)
