"""The Spark data source format("flight-sink") in real Spark (local mode) against the real server.

Every test here also runs on PySpark 4.1.x when FLIGHT_SINK_SPARK41_PYTHON names that
environment's python (test_spark41_matrix runs the subset marked ``matrix``).
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pyspark = pytest.importorskip("pyspark")

import flight_sink as fs
from flight_sink import datasource as ds
from flight_sink.foreach import FlightSinkForeachWriter, partition_query_id
from flight_sink.spark import register

from conftest import TESTS_DIR
from sparkutil import SCHEMA, assert_exactly_once, check_driver_sigkill, epoch_commits, table_ids, write_json_file

_SPARK41_ENV = "FLIGHT_SINK_SPARK41_PYTHON"
_IN_MATRIX = "FLIGHT_SINK_IN_SPARK41_MATRIX"


@pytest.fixture
def dspark(spark):
    register(spark)
    return spark


def _opts(w, server, table):
    return w.format("flight-sink").option("uri", server.uri).option("table", table)


def _files(spark, src: Path):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))


def _run_available(q_builder):
    q = q_builder.trigger(availableNow=True).start()
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    return q


@pytest.mark.matrix
def test_streaming_write_retried_task_lands_once(dspark, server, tmp_path, table_name):
    """Each batch commits once; a task that fails after staging is retried, its rows land once."""
    src = tmp_path / "in"
    for i in range(2):
        write_json_file(src, i, range(i * 30, i * 30 + 30))
    client = fs.Client(server.uri)
    q = _run_available(
        _opts(_files(dspark, src).repartition(2).writeStream, server, table_name)
        .option(ds.TEST_FAIL_AFTER_STAGE_OPTION, "1:0")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    assert_exactly_once(client, table_name, set(range(60)))
    commits = epoch_commits(client, table_name)
    assert commits == [(str(q.id), e) for e in range(2)], "Spark's query id and batch ids"


def test_streaming_write_query_id_option_wins(dspark, server, tmp_path, table_name):
    src = tmp_path / "in"
    write_json_file(src, 0, range(10))
    client = fs.Client(server.uri)
    _run_available(
        _opts(_files(dspark, src).writeStream, server, table_name)
        .option("query_id", "my-query").option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    assert epoch_commits(client, table_name) == [("my-query", 0)]


def test_streaming_write_survives_driver_sigkill(server, tmp_path, table_name):
    """The driver (Python and JVM) is SIGKILLed twice mid-stream and restarted from its
    checkpoint: every row lands exactly once, and every batch whole or not at all."""
    check_driver_sigkill(server.uri, table_name, tmp_path / "ckpt")


def test_complete_mode_aggregate_and_empty_overwrite(dspark, server, tmp_path, table_name):
    """Complete mode: each batch is one Overwrite equal to the aggregate; an empty complete
    epoch (no stages) still truncates."""
    from pyspark.sql import functions as F

    src = tmp_path / "in"
    ids = []
    for i in range(2):
        write_json_file(src, i, range(i * 20, i * 20 + 20 + i * 7))
        ids += range(i * 20, i * 20 + 20 + i * 7)
    client = fs.Client(server.uri)
    agg = _files(dspark, src).groupBy("k").agg(F.count("*").alias("n"))
    _run_available(
        _opts(agg.writeStream.outputMode("complete"), server, table_name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    got = sorted((r["k"], r["n"]) for r in client.read(table_name).to_pylist())
    assert got == sorted(Counter(f"k{i % 5}" for i in ids).items())
    assert [h.operation for h in client.history(table_name)].count("Overwrite") == 2

    # Spark refuses update mode for Python data sources (keyed upserts keep foreachBatch).
    with pytest.raises(Exception) as refused:
        q = (_opts(agg.writeStream.outputMode("update"), server, table_name)
             .option("checkpointLocation", str(tmp_path / "ckpt-update")).start())
        q.awaitTermination(120)
    print("update mode:", str(refused.value).splitlines()[0])

    # commit_epoch of a complete epoch with zero stages truncates the table.
    opts = ds._Options.parse({"uri": server.uri, "table": table_name})
    ack = ds._commit(opts, [], "truncating-query", 0, "complete", agg.schema)
    assert ack.status == "committed" and client.read(table_name).num_rows == 0


@pytest.mark.matrix
def test_batch_write_append_and_overwrite(dspark, server, table_name):
    client = fs.Client(server.uri)
    df = dspark.range(0, 300, numPartitions=3).selectExpr("id", "id % 4 AS k")
    _opts(df.write, server, table_name).mode("append").save()
    _opts(df.write, server, table_name).mode("append").save()
    assert sorted(table_ids(client, table_name)) == sorted(list(range(300)) * 2)
    _opts(df.where("id < 10").write, server, table_name).mode("overwrite").save()
    assert sorted(table_ids(client, table_name)) == list(range(10))
    ops = [h.operation for h in client.history(table_name)]
    assert ops[:3] == ["Overwrite", "Append", "Append"], "one transaction per write"
    _opts(df.where("id < 0").write, server, table_name).mode("overwrite").save()
    assert client.read(table_name).num_rows == 0, "an empty overwrite truncates"


@pytest.mark.matrix
def test_batch_write_merge_schema_adds_nullable_column(dspark, server, table_name):
    """A write with a new nullable column is refused without mergeSchema (the error names the
    column and merge_schema, nothing is committed); with mergeSchema it lands: older rows read
    null in it and it gets a new field id."""
    client = fs.Client(server.uri)
    base = dspark.range(0, 20, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS v")
    _opts(base.write, server, table_name).mode("append").save()
    before = client.table_stats(table_name)
    assert [c.name for c in before.schema] == ["id", "v"]

    # IF(..., NULL) makes `extra` nullable; every new row has a value.
    wider = dspark.range(100, 110, numPartitions=2).selectExpr(
        "id", "CAST(id AS STRING) AS v", "IF(id >= 0, CONCAT('x', CAST(id AS STRING)), NULL) AS extra")
    assert wider.schema["extra"].nullable
    with pytest.raises(Exception) as refused:
        _opts(wider.write, server, table_name).mode("append").save()
    msg = str(refused.value)
    assert "SchemaMismatchError" in msg and "SCHEMA_MISMATCH" in msg, msg[-3000:]
    assert '"extra"' in msg and "merge_schema" in msg, msg[-3000:]
    print("refused:", next(line for line in msg.splitlines() if "SchemaMismatchError" in line))
    assert client.read(table_name).num_rows == 20, "a refused write committed rows"
    assert client.table_stats(table_name).version == before.version

    _opts(wider.write, server, table_name).option("mergeSchema", "true").mode("append").save()
    got = {r["id"]: (r["v"], r["extra"]) for r in client.read(table_name).to_pylist()}
    assert got == {**{i: (str(i), None) for i in range(20)},
                   **{i: (str(i), f"x{i}") for i in range(100, 110)}}
    after = client.table_stats(table_name)
    ids = {c.name: c.id for c in after.schema}
    assert list(ids) == ["id", "v", "extra"]
    assert {c.name: c.id for c in before.schema} == {"id": ids["id"], "v": ids["v"]}
    assert ids["extra"] > before.last_field_id and after.last_field_id == ids["extra"]
    assert after.schema_id == before.schema_id + 1
    assert after.version == before.version + 1, "the change and the rows in one version"


@pytest.mark.matrix
def test_batch_read_equals_doget_with_pushed_filter(dspark, server_factory, table_name):
    server = server_factory(extra_args=["--endpoint-bytes", "1"])  # an endpoint per fragment
    client = fs.Client(server.uri)
    for i in range(4):  # four commits, four fragments
        client.put_epoch(table_name, pa.table({"id": list(range(i * 50, i * 50 + 50)),
                                               "k": [f"k{j % 3}" for j in range(50)]}),
                         query_id="loader", epoch_id=i, create=True)
    full = client.read(table_name)
    reader = _opts(dspark.read, server, table_name)
    df = reader.load()
    assert sorted(map(tuple, df.collect())) == sorted(zip(full["id"].to_pylist(), full["k"].to_pylist()))
    nparts = df.rdd.getNumPartitions()

    where = df.where("id >= 120 AND k = 'k1'")
    want = full.filter(pc.and_(pc.greater_equal(full["id"], 120), pc.equal(full["k"], "k1")))
    assert sorted(r["id"] for r in where.collect()) == sorted(want["id"].to_pylist())
    # The tickets of that read carry the pushed predicate, and only the fragments whose id
    # ranges can hold id >= 120 are planned (100..149 and 150..199 of the four).
    src = ds.FlightSinkDataSource({"uri": server.uri, "table": table_name})
    r = src.reader(src.schema())
    if hasattr(r, "pushFilters"):
        from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, StringStartsWith

        fs_ = [GreaterThanOrEqual(("id",), 120), EqualTo(("k",), "k1"), StringStartsWith(("k",), "k")]
        list(r.pushFilters(fs_))
        import json

        tickets = [json.loads(p.ticket) for p in r.partitions()]
        assert len(tickets) == 2, tickets
        assert all(t["filter"] == {"op": "and", "args": [
            {"op": ">=", "column": "id", "value": 120}, {"op": "=", "column": "k", "value": "k1"}]}
            for t in tickets)
    # Column pruning through the read schema, and time travel.
    ids_only = reader.schema("id long").load()
    assert sorted(r["id"] for r in ids_only.collect()) == sorted(full["id"].to_pylist())
    v2 = reader.option("version", "2").load()
    assert sorted(r["id"] for r in v2.collect()) == list(range(50))
    assert nparts == 4, f"expected one Spark partition per endpoint (fragment), got {nparts}"


def test_streaming_read_appends_restart_and_change_commits(dspark, server, tmp_path, table_name):
    """readStream over versions: appends by another client are read once across a restart;
    a compaction is skipped; a delete fails the query unless skipChangeCommits."""
    client = fs.Client(server.uri)
    out = table_name + "_out"

    def put(lo, hi):
        client.put(table_name, pa.table({"id": list(range(lo, hi))}))

    client.create_table(table_name, pa.schema([("id", pa.int64())]))
    put(0, 10)

    def start(ckpt="ckpt", **extra):
        r = _opts(dspark.readStream, server, table_name)
        for k, v in extra.items():
            r = r.option(k, v)
        return (_opts(r.load().writeStream, server, out)
                .option("checkpointLocation", str(tmp_path / ckpt)).start())

    q = start()
    q.processAllAvailable()
    put(10, 25)
    put(25, 30)
    q.processAllAvailable()
    q.stop()
    put(30, 40)
    client.compact(table_name)  # a Rewrite: no rows changed, skipped
    put(40, 45)
    q = start()
    q.processAllAvailable()
    q.stop()
    assert_exactly_once(client, out, set(range(45)))

    client.delete(table_name, {"op": "<", "column": "id", "value": 5})
    put(45, 50)
    q = start()
    with pytest.raises(Exception, match="skipChangeCommits"):
        q.awaitTermination(120)
    q = start(skipChangeCommits="true")
    q.processAllAvailable()
    q.stop()
    assert_exactly_once(client, out, set(range(50)))


@pytest.mark.matrix
def test_foreach_writer_replayed_epoch_lands_once(spark, server, tmp_path, table_name):
    """The foreach writer (the Real-Time Mode path) in a micro-batch query: a task that fails
    after its epoch was acknowledged is retried (a replay of that partition's epoch): once."""
    from sparkutil import fail_first_close_of_partition_1

    src = tmp_path / "in"
    for i in range(2):
        write_json_file(src, i, range(i * 40, i * 40 + 40))
    client = fs.Client(server.uri)
    writer = FlightSinkForeachWriter(server.uri, table_name, _close_hook=fail_first_close_of_partition_1)
    q = _run_available(
        _files(spark, src).repartition(2).writeStream.foreach(writer)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    ids = table_ids(client, table_name)
    assert sorted(ids) == list(range(80))
    stats = client.table_stats(table_name)
    assert stats.memwal is not None, "a MemWAL table"
    st = client.epoch_status(table_name, query_id=partition_query_id(str(q.id), 1), epoch_id=0)
    assert st.committed


def test_spark41_matrix(server_bin):
    """The tests marked ``matrix`` on PySpark 4.1.x (the environment of tools/spark41_env.sh)."""
    if os.environ.get(_IN_MATRIX):
        pytest.skip("already inside the 4.1 run")
    py = os.environ.get(_SPARK41_ENV)
    if not py:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{_SPARK41_ENV} is not set (CI runs clients/pyspark/tools/spark41_env.sh)")
        pytest.skip(f"{_SPARK41_ENV} is not set: `make test-python` sets it (clients/pyspark/tools/spark41_env.sh)")
    version = subprocess.run([py, "-c", "import pyspark; print(pyspark.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("4.1."), f"{_SPARK41_ENV} has PySpark {version}"
    env = dict(os.environ, FLIGHT_SINK_BIN=server_bin, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py)
    env[_IN_MATRIX] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR.parent / "src"), str(TESTS_DIR)])
    res = subprocess.run(
        [py, "-m", "pytest", str(TESTS_DIR / "test_datasource.py"), "-m", "matrix", "-q",
         "-p", "no:cacheprovider", "-x"],
        env=env, cwd=str(TESTS_DIR.parent), capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
