"""Every table is also an Iceberg table (docs/iceberg.md): real
Iceberg readers (PyIceberg's StaticTable, Polars' scan_iceberg, Spark 4.1 with the Iceberg
runtime) read exactly the rows DoGet serves, for every operation, and every retained snapshot
reads as the flight-sink version its summary names (time travel)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pytest

import flight_sink as fs

pyiceberg_table = pytest.importorskip("pyiceberg.table")
pl = pytest.importorskip("polars")

SPARK41_JAR = Path.home() / ".cache/flight-sink/jars/iceberg-spark-runtime-4.1_2.13-1.12.0.jar"


def rows(start: int, n: int, tag: str = "e") -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"{tag}{i}" for i in ids], pa.string()),
            "score": pa.array([i / 2 for i in ids], pa.float64()),
        }
    )


def canon(tbl: pa.Table) -> List[Dict[str, Any]]:
    return sorted(tbl.select(["id", "name", "score"]).to_pylist(), key=lambda r: r["id"])


def publish(client: fs.Client, table: str) -> fs.PublishIcebergResult:
    """Publishes the table; the snapshot covers at least every version committed before the call
    (background maintenance may commit a compaction meanwhile, which the answer may or may not
    include)."""
    before = client.table_stats(table).version
    res = client.publish_iceberg(table)
    assert before <= res.iceberg_version <= client.table_stats(table).version, res
    return res


def static_table(metadata_file: str):
    return pyiceberg_table.StaticTable.from_metadata(metadata_file)


def check_snapshots(client: fs.Client, table: str, metadata_file: str) -> int:
    """Every retained snapshot reads (PyIceberg, time travel) as the version its summary names,
    the current one also through Polars; the snapshot chain's versions only grow. Returns the
    number of snapshots."""
    tbl = static_table(metadata_file)
    by_id = {s.snapshot_id: s for s in tbl.metadata.snapshots}
    for snap in tbl.metadata.snapshots:
        v = int(snap.summary.additional_properties["flight-sink.version"])
        got = canon(tbl.scan(snapshot_id=snap.snapshot_id).to_arrow())
        want = canon(client.read(table, version=v))
        assert got == want, f"snapshot {snap.snapshot_id} ({snap.summary.operation}) of version {v}"
        parent = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
        if parent is not None:
            assert int(parent.summary.additional_properties["flight-sink.version"]) < v
    cur = tbl.current_snapshot()
    want = canon(client.read(table))
    if cur is None:
        assert want == []
    else:
        assert canon(pl.scan_iceberg(tbl).collect().to_arrow()) == want
    return len(tbl.metadata.snapshots)


@pytest.fixture
def client(server):
    with fs.Client(server.uri) as c:
        yield c


def test_iceberg_reads_every_operation(client: fs.Client, table_name: str) -> None:
    """Appends, keyed upsert, delete, compaction, complete-mode overwrite, the empty truncate and
    cleanup: PyIceberg and Polars read what DoGet reads, at every snapshot."""
    put = lambda data, e, mode="append": client.put_epoch(  # noqa: E731
        table_name, data, query_id="q", epoch_id=e, mode=mode, create={"primary_key": ["id"]}
    )
    put(rows(0, 5), 0)
    put(rows(5, 5), 1)
    check_snapshots(client, table_name, publish(client, table_name).metadata_file)

    put(rows(3, 4, tag="u"), 2, mode="update")  # keyed upsert: 3 updated, 4 inserted
    client.delete(table_name, {"op": "<", "column": "id", "value": 2})
    client.compact(table_name)
    check_snapshots(client, table_name, publish(client, table_name).metadata_file)

    put(rows(100, 3, tag="o"), 3, mode="complete")
    publish(client, table_name)
    put(rows(0, 0), 4, mode="complete")  # the empty truncate
    meta = publish(client, table_name).metadata_file
    assert static_table(meta).scan().to_arrow().num_rows == 0
    put(rows(200, 2), 5)
    meta = publish(client, table_name).metadata_file
    before = check_snapshots(client, table_name, meta)

    time.sleep(1.2)  # every version but the newest is then superseded for over a second
    res = client.cleanup(table_name, older_than_seconds=1, keep_last=2)
    assert res.versions_removed, res
    stats = client.table_stats(table_name)
    assert stats.iceberg is not None and stats.iceberg.lag_versions == 0, stats.iceberg
    after = check_snapshots(client, table_name, stats.iceberg.metadata_file)
    assert after < before, "snapshots of removed versions are expired with them"


def test_iceberg_memwal_rows_appear_once_folded(client: fs.Client, table_name: str) -> None:
    client.create_table(table_name, rows(0, 1).schema, primary_key=["id"], memwal_shards=1)
    client.put_epoch(table_name, rows(0, 4), query_id="m", epoch_id=0, route="memwal")
    client.flush_memwal(table_name)
    client.fold_memwal_shard(table_name)
    meta = publish(client, table_name).metadata_file
    assert canon(static_table(meta).scan().to_arrow()) == canon(client.read(table_name)) != []
    check_snapshots(client, table_name, meta)


def test_iceberg_memwal_trickle_reaches_readers(client: fs.Client, table_name: str) -> None:
    """A MemWAL table fed one small epoch a second, no flush or fold asked for: the freshness
    bound (serve --memwal-freshness, 5 s) folds it by age, table_stats then counts no row Iceberg
    readers miss (a ceiling of a few bounds, not a measurement), and PyIceberg reads every row."""
    client.create_table(table_name, rows(0, 1).schema, memwal_shards=1)
    for e in range(4):
        client.put_epoch(table_name, rows(10 * e, 2), query_id="t", epoch_id=e, route="memwal")
        time.sleep(1)
    deadline = time.monotonic() + 60
    while True:
        ice = client.table_stats(table_name).iceberg
        assert ice is not None
        if ice.missing_rows == 0 and ice.iceberg_version > 0:
            break
        assert time.monotonic() < deadline, ice
        time.sleep(0.1)
    got = canon(static_table(ice.metadata_file).scan().to_arrow())
    assert [r["id"] for r in got] == [0, 1, 10, 11, 20, 21, 30, 31]


def test_iceberg_types_from_pandas_read_back(client: fs.Client, table_name: str) -> None:
    """pandas' nanosecond timestamps (sub-microsecond parts included), uint32 extremes and half
    floats land as the types every engine reads (timestamp[us], int64, float32): PyIceberg and
    Polars read exactly what DoGet reads."""
    pd = pytest.importorskip("pandas")
    import numpy as np

    df = pd.DataFrame(
        {
            "id": pd.Series([1, 2, 3], dtype="int64"),
            "ts": pd.to_datetime(["1677-09-22 00:12:43.145225", "2024-05-06 07:08:09.123456789", "2262-04-11 23:47:16.854775"]),
            "u32": pd.Series([0, 4294967295, 7], dtype="uint32"),
            "f16": pd.Series([1.5, -65504.0, 0.0009765625], dtype=np.float16),
        }
    )
    data = pa.Table.from_pandas(df, preserve_index=False)
    assert data.schema.field("ts").type == pa.timestamp("ns")
    client.put_epoch(table_name, data, query_id="p", epoch_id=0, create=True)
    served = client.read(table_name)
    assert served.schema.field("ts").type == pa.timestamp("us")
    assert served.schema.field("u32").type == pa.int64()
    assert served.schema.field("f16").type == pa.float32()
    by_id = {r["id"]: r for r in served.to_pylist()}
    assert by_id[2]["u32"] == 4294967295
    assert by_id[2]["ts"].microsecond == 123456  # truncated, not rounded
    meta = publish(client, table_name).metadata_file
    tbl = static_table(meta)
    key = lambda r: r["id"]  # noqa: E731
    want = sorted(served.to_pylist(), key=key)
    assert sorted(tbl.scan().to_arrow().to_pylist(), key=key) == want
    assert sorted(pl.scan_iceberg(tbl).collect().to_dicts(), key=key) == want


def test_iceberg_catches_up_after_kill9(server_factory, tmp_path: Path, table_name: str) -> None:
    """A server killed between its commits and their publish leaves the Iceberg metadata behind;
    the next publish (here: another server's publish_iceberg) catches up with a valid chain."""
    root = tmp_path / "root"
    srv = server_factory(root=root, extra_args=["--maintenance", "off"])  # commits, never publishes
    with fs.Client(srv.uri) as c:
        for e in range(3):
            c.put_epoch(table_name, rows(e * 10, 3), query_id="k", epoch_id=e, create=True)
        c.publish_iceberg(table_name)
        for e in range(3, 6):
            c.put_epoch(table_name, rows(e * 10, 3), query_id="k", epoch_id=e)
    srv.proc.kill()
    srv.proc.wait()
    srv2 = server_factory(root=root)
    with fs.Client(srv2.uri) as c:
        ice = c.table_stats(table_name).iceberg
        assert ice is not None and ice.lag_versions == 3
        res = publish(c, table_name)
        assert res.snapshots_added == 1, res  # the three versions coalesce
        check_snapshots(c, table_name, res.metadata_file)


def test_two_servers_publish_one_table(server_factory, tmp_path: Path, table_name: str) -> None:
    root = tmp_path / "root"
    servers = [server_factory(root=root), server_factory(root=root)]
    clients = [fs.Client(s.uri) for s in servers]
    try:
        clients[0].put_epoch(table_name, rows(0, 1), query_id="w", epoch_id=0, create=True)
        errors: List[BaseException] = []

        def writer(i: int) -> None:
            try:
                for e in range(1, 9):
                    clients[i].put_epoch(table_name, rows(1000 * i + e, 2), query_id=f"w{i}", epoch_id=e)
                    clients[i].publish_iceberg(table_name)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        res = publish(clients[1], table_name)
        check_snapshots(clients[0], table_name, res.metadata_file)
    finally:
        for c in clients:
            c.close()


SPARK_COUNT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]")
             .config("spark.jars", sys.argv[1])
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    df = spark.read.format("iceberg").load(sys.argv[2])
    print(json.dumps({"count": df.count(), "ids": sorted(r.id for r in df.select("id").collect())}))
    spark.stop()
    """
)


def test_spark41_reads_table_by_path(client: fs.Client, server, table_name: str) -> None:
    py = os.environ.get("FLIGHT_SINK_SPARK41_PYTHON")
    if not py:
        if os.environ.get("CI") == "true":
            pytest.fail("FLIGHT_SINK_SPARK41_PYTHON is unset (clients/pyspark/tools/spark41_env.sh)")
        pytest.skip("FLIGHT_SINK_SPARK41_PYTHON is unset: `make test-python` sets it (clients/pyspark/tools/spark41_env.sh)")
    assert SPARK41_JAR.is_file(), SPARK41_JAR
    client.put_epoch(table_name, rows(0, 6), query_id="s", epoch_id=0, create={"primary_key": ["id"]})
    client.delete(table_name, {"op": "=", "column": "id", "value": 4})
    client.put_epoch(table_name, rows(10, 2), query_id="s", epoch_id=1)
    publish(client, table_name)
    out = subprocess.run(
        [py, "-c", SPARK_COUNT, str(SPARK41_JAR), str(Path(server.root) / table_name)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    want = [r["id"] for r in canon(client.read(table_name))]
    assert got == {"count": len(want), "ids": want}


def test_iceberg_added_column_keeps_field_ids(client: fs.Client, table_name: str) -> None:
    """An epoch that adds a column (merge_schema) publishes a new schema with the table's field
    ids: older snapshots read their schema, the new one reads old rows with nulls."""
    client.put_epoch(table_name, rows(0, 3), query_id="a", epoch_id=0, create=True)
    publish(client, table_name)
    wider = rows(3, 2).append_column("extra", pa.array(["x3", "x4"], pa.string()))
    client.put_epoch(table_name, wider, query_id="a", epoch_id=1, merge_schema=True)
    meta = publish(client, table_name).metadata_file
    tbl = static_table(meta)
    schemas = tbl.metadata.schemas
    assert len(schemas) == 2 and tbl.schema().find_field("extra").field_id > tbl.schema().find_field("score").field_id
    assert tbl.schema().find_field("id").field_id == schemas[0].find_field("id").field_id
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(tbl.scan().to_arrow().to_pylist(), key=key) == sorted(client.read(table_name).to_pylist(), key=key)
    assert sorted(pl.scan_iceberg(tbl).collect().to_dicts(), key=key) == sorted(client.read(table_name).to_pylist(), key=key)
    check_snapshots(client, table_name, meta)
