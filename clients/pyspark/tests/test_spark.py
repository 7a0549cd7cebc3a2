"""FlightSink in real Spark Structured Streaming queries (local mode) against the real server."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

import flight_sink as fs
from flight_sink.spark import FlightSink, spark_output_mode, spark_query_id

from conftest import free_port
from sparkutil import (
    SCHEMA,
    assert_exactly_once,
    epoch_commits,
    fail_first_attempt_of_partition_1,
    table_ids,
    write_json_file,
)

FAST_RETRY = fs.RetryPolicy(max_attempts=2, initial_backoff=0.05, max_backoff=0.1)


def _stream(spark, src: Path, files_per_trigger: int = 1):
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .json(str(src))
    )


def _query_error():
    from pyspark.errors import StreamingQueryException

    return StreamingQueryException


def test_exactly_once_across_restarts_and_replays(spark, server, tmp_path, table_name):
    """Restart from the checkpoint, a failure after the commit, a stop during a batch."""
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    client = fs.Client(server.uri)
    sink = FlightSink(server.uri, table=table_name)
    control = {"fail_after_commit": None, "pause_after_commit": None}
    paused = threading.Event()
    seen_query_ids = set()

    def for_each_batch(df, batch_id):
        seen_query_ids.add(spark_query_id(df))
        sink(df.repartition(3), batch_id)  # several partitions, pushed from executors
        if control["fail_after_commit"] == batch_id:
            control["fail_after_commit"] = None
            raise RuntimeError(f"injected failure after committing batch {batch_id}")
        if control["pause_after_commit"] == batch_id:
            control["pause_after_commit"] = None
            paused.set()
            time.sleep(2)

    def start():
        return (
            _stream(spark, src).writeStream.foreachBatch(for_each_batch)
            .option("checkpointLocation", str(ckpt)).start()
        )

    rows_per_file = 40
    next_file = [0]

    def add_files(n):
        for _ in range(n):
            i = next_file[0]
            write_json_file(src, i, range(i * rows_per_file, (i + 1) * rows_per_file))
            next_file[0] += 1

    # 1. Two batches, then a clean stop.
    add_files(2)
    q = start()
    query_id = str(q.id)
    q.processAllAvailable()
    q.stop()
    assert table_ids(client, table_name) and len(table_ids(client, table_name)) == 2 * rows_per_file

    # 2. Restart from the checkpoint; batch 2 fails inside foreachBatch after its commit, so
    #    Spark never records it as done and must replay it.
    add_files(2)
    control["fail_after_commit"] = 2
    q = start()
    with pytest.raises(_query_error(), match="injected failure after committing batch 2"):
        q.awaitTermination(120)

    # 3. Restart: batch 2 is replayed (and skipped by the sink), then new batches; stop the
    #    query mid-stream while batch 4 sits in foreachBatch after its commit.
    add_files(4)
    control["pause_after_commit"] = 4
    replays_before = sink.metrics.replays_skipped
    q = start()
    assert paused.wait(120), "batch 4 never ran"
    q.stop()
    assert sink.metrics.replays_skipped == replays_before + 1
    assert next_file[0] * rows_per_file > len(table_ids(client, table_name)), "expected a mid-stream stop"

    # 4. Restart and drain.
    q = start()
    assert str(q.id) == query_id, "the query id must be stable across restarts"
    q.processAllAvailable()
    q.stop()

    assert seen_query_ids == {query_id}
    assert_exactly_once(client, table_name, set(range(next_file[0] * rows_per_file)))
    commits = epoch_commits(client, table_name)
    assert {q for q, _ in commits} == {query_id}
    assert sorted(e for _, e in commits) == list(range(len(commits)))
    assert sink.metrics.replays_skipped >= 1


def test_each_run_is_named_on_its_commits(spark, server, tmp_path, table_name):
    """Every epoch commit carries the run that wrote it (Spark's runId), from the executors and
    through the driver; a restarted query is a new run, never refused; a run that writes after a
    newer run of its query began is refused (QUERY_RUN_SUPERSEDED)."""
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    client = fs.Client(server.uri)
    runs = []
    for i, through_driver in enumerate([False, True]):
        write_json_file(src, i, range(i * 10, (i + 1) * 10))
        sink = FlightSink(server.uri, table=table_name, through_driver=through_driver)
        q = (
            _stream(spark, src).writeStream.foreachBatch(lambda df, b, sink=sink: sink(df.repartition(2), b))
            .option("checkpointLocation", str(ckpt)).start()
        )
        q.processAllAvailable()
        q.stop()
        runs.append(str(q.runId))
    assert runs[0] != runs[1]
    got = [
        (h.properties["flight_sink.streaming.epoch_id"], h.properties.get("flight_sink.streaming.run_id"))
        for h in reversed(client.history(table_name, limit=100))
        if "flight_sink.streaming.epoch_id" in (h.properties or {})
    ]
    assert got == [("0", runs[0]), ("1", runs[1])]
    # The first run writing again, after the second began: two live queries under one id.
    with pytest.raises(fs.FailedPreconditionError) as refused:
        client.put_epoch(table_name, pa.table({"id": pa.array([99], pa.int64())}), query_id=str(q.id), epoch_id=2, run_id=runs[0])
    assert refused.value.reason == "QUERY_RUN_SUPERSEDED"


@pytest.mark.parametrize("through_driver", [False, True], ids=["executors", "driver"])
def test_complete_mode_table_equals_aggregate(spark, server, tmp_path, table_name, through_driver):
    """After every batch the table is the aggregate, also across a replay of a stateful batch."""
    from pyspark.sql import functions as F

    src = tmp_path / "in"
    client = fs.Client(server.uri)
    # mode is not given: the sink reads "complete" from the running query, by Spark's query id
    # also when the sink's epochs carry a query_id of the user's (the driver variant).
    sink = FlightSink(server.uri, table=table_name, through_driver=through_driver,
                      query_id="aggregate-query" if through_driver else None)
    checks = []
    modes = []
    control = {"fail_after_commit": 1}

    def for_each_batch(df, batch_id):
        modes.append(spark_output_mode(df, spark_query_id(df)))
        df.persist()
        try:
            sink(df, batch_id)
            expected = sorted(tuple(r) for r in df.collect())
        finally:
            df.unpersist()
        got = client.read(table_name, columns=["k", "n", "total"]).to_pylist()
        checks.append((batch_id, expected, sorted((r["k"], r["n"], r["total"]) for r in got)))
        if control["fail_after_commit"] == batch_id:
            control["fail_after_commit"] = None
            raise RuntimeError("injected failure after the commit")

    all_ids = []
    for i in range(3):
        ids = list(range(i * 25, i * 25 + 25 + i * 5))
        all_ids += ids
        write_json_file(src, i, ids)
    agg = _stream(spark, src).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

    def start():
        return (
            agg.writeStream.outputMode("complete").foreachBatch(for_each_batch)
            .option("checkpointLocation", str(tmp_path / "ckpt")).start()
        )

    q = start()
    with pytest.raises(_query_error(), match="injected failure"):
        q.awaitTermination(120)
    # The restart replays batch 1 (already committed: no data is sent, but the stateful batch
    # is still evaluated so its state stores commit), then runs batch 2.
    q = start()
    q.processAllAvailable()
    q.stop()

    assert modes and set(modes) == {"complete"}
    assert [c[0] for c in checks] == [0, 1, 1, 2]
    for batch_id, expected, got in checks:
        assert got == expected, f"after batch {batch_id} the table is not the aggregate"
    final = defaultdict(lambda: [0, 0])
    for i in all_ids:
        final[f"k{i % 5}"][0] += 1
        final[f"k{i % 5}"][1] += i
    assert checks[-1][2] == sorted((k, n, t) for k, (n, t) in final.items())
    assert sink.metrics.replays_skipped == 1 and sink.metrics.committed == 3
    ops = [h.operation for h in client.history(table_name)]
    assert ops.count("Overwrite") == 3


def test_update_mode_upserts_into_a_keyed_table(spark, server, tmp_path, table_name):
    """Update mode on a table with a primary key: every batch upserts the changed groups."""
    from pyspark.sql import functions as F

    src = tmp_path / "in"
    client = fs.Client(server.uri)
    # mode is read from the query ("update"); the table is created keyed by k.
    sink = FlightSink(server.uri, table=table_name, create={"primary_key": ["k"]})
    checks = []

    def for_each_batch(df, batch_id):
        sink(df, batch_id)
        got = client.read(table_name, columns=["k", "n", "total"]).to_pylist()
        checks.append((batch_id, sorted((r["k"], r["n"], r["total"]) for r in got)))

    files = [[0, 1, 2], [3, 5], [4, 6, 11]]  # k = id % 5: new keys and updated keys per batch
    for i, ids in enumerate(files):
        write_json_file(src, i, ids)
    agg = _stream(spark, src).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    q = (
        agg.writeStream.outputMode("update").foreachBatch(for_each_batch)
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    q.processAllAvailable()
    q.stop()

    assert [c[0] for c in checks] == [0, 1, 2]
    for (batch_id, got), upto in zip(checks, range(1, 4)):
        expected = defaultdict(lambda: [0, 0])
        for ids in files[:upto]:
            for i in ids:
                expected[f"k{i % 5}"][0] += 1
                expected[f"k{i % 5}"][1] += i
        assert got == sorted((k, n, t) for k, (n, t) in expected.items()), f"after batch {batch_id}"
    assert client.table_stats(table_name).primary_key == ["k"]
    assert sink.metrics.committed == 3


def test_update_mode_into_a_not_null_key(spark, server, tmp_path, table_name):
    """Spark declares the group key nullable; a table whose key column is NOT NULL takes the
    batches (no key is null), keeps its NOT NULL, and a batch with a null key fails naming it."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    client = fs.Client(server.uri)
    client.create_table(
        table_name,
        pa.schema([pa.field("k", pa.string(), nullable=False), ("n", pa.int64()), ("total", pa.int64())]),
        primary_key=["k"],
    )
    src = tmp_path / "in"
    sink = FlightSink(server.uri, table=table_name)
    for i, ids in enumerate([[0, 1, 2], [3, 5]]):
        write_json_file(src, i, ids)
    agg = _stream(spark, src).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    q = (
        agg.writeStream.outputMode("update").foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    q.processAllAvailable()
    q.stop()
    got = sorted((r["k"], r["n"], r["total"]) for r in client.read(table_name).to_pylist())
    assert got == [("k0", 2, 5), ("k1", 1, 1), ("k2", 1, 2), ("k3", 1, 3)]
    assert not client.read(table_name).schema.field("k").nullable

    nulls = pa.table({"k": pa.array([None], pa.string()), "n": [1], "total": [1]})
    with pytest.raises(fs.SchemaMismatchError) as refused:
        client.put_epoch(table_name, nulls, query_id="other", epoch_id=0, mode="update")
    assert refused.value.reason == "SCHEMA_DATA_MISMATCH" and 'column "k"' in str(refused.value)
    assert len(client.read(table_name)) == 4


def test_empty_complete_batch_commits_an_overwrite(spark, server, tmp_path, table_name):
    """An empty complete-mode batch still commits an (empty) overwrite; later batches fit it."""
    src = tmp_path / "in"
    client = fs.Client(server.uri)
    sink = FlightSink(server.uri, table=table_name, mode="complete")
    after = []

    def for_each_batch(df, batch_id):
        sink(df, batch_id)
        after.append((client.read(table_name).num_rows, client.history(table_name, 1)[0].operation))

    write_json_file(src, 0, range(10))        # no row passes the filter: an empty aggregate
    write_json_file(src, 1, range(10, 20))    # rows 15..19 pass: five groups
    agg = _stream(spark, src).where("v >= 15").groupBy("k").count()
    q = (
        agg.writeStream.outputMode("complete").foreachBatch(for_each_batch)
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    q.processAllAvailable()
    q.stop()
    # The empty batch created the table from the query's schema and committed an overwrite; the
    # executors' Arrow data of the next batch fits that schema.
    assert after == [(0, "Overwrite"), (5, "Overwrite")]
    assert client.read(table_name).column_names == ["k", "count"]
    assert [e for _, e in epoch_commits(client, table_name)] == [0, 1]


def test_retried_task_yields_one_commit_without_failed_attempt(spark, server, tmp_path, table_name):
    """Partition 1's first attempt stages its rows and then fails; Spark retries the task.

    The epoch must be one commit holding the retry's rows, and the failed attempt's stage
    must stay uncommitted (local[2,2] lets a task fail once).
    """
    src = tmp_path / "in"
    client = fs.Client(server.uri)
    sink = FlightSink(server.uri, table=table_name, _task_hook=fail_first_attempt_of_partition_1)
    write_json_file(src, 0, range(0, 30))
    write_json_file(src, 1, range(30, 60))
    q = (
        _stream(spark, src).writeStream
        .foreachBatch(lambda df, bid: sink(df.repartition(3), bid))
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    q.processAllAvailable()
    q.stop()

    assert_exactly_once(client, table_name, set(range(60)))
    commits = epoch_commits(client, table_name, str(q.id))
    assert Counter(e for _, e in commits) == {0: 1, 1: 1}
    assert sink.metrics.committed == 2 and sink.metrics.rows == 60
    # Each epoch left exactly one stage behind: partition 1's failed attempt, never committed.
    leftovers = list((server.root / table_name / "_staging").glob("*.stage"))
    assert len(leftovers) == 2


class _RetrySeen(logging.Handler):
    """Sets an event when the client logs that it is retrying an unavailable server."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "failed (unavailable), retry" in record.getMessage():
            self.event.set()


def test_server_restart_during_the_stream_is_retried(spark, server_factory, tmp_path, table_name):
    """The server goes away between batches and comes back: the sink's retries bridge it."""
    port = free_port()
    root = tmp_path / "tables"
    srv = server_factory(listen=f"127.0.0.1:{port}", root=root)
    src = tmp_path / "in"
    retry = fs.RetryPolicy(max_attempts=100, initial_backoff=0.2, max_backoff=1.0, max_elapsed=120)
    sink = FlightSink(srv.uri, table=table_name, retry=retry)
    write_json_file(src, 0, range(0, 20))
    seen = _RetrySeen()
    logger = logging.getLogger("flight_sink")
    logger.addHandler(seen)
    q = (
        _stream(spark, src).writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    try:
        q.processAllAvailable()
        assert srv.stop() == 0
        write_json_file(src, 1, range(20, 40))
        # Batch 1 finds the server down and retries; bring the server back once it does.
        assert seen.event.wait(120), "the sink never retried"
        server_factory(listen=f"127.0.0.1:{port}", root=root)
        q.processAllAvailable()
    finally:
        q.stop()
        logger.removeHandler(seen)
    assert_exactly_once(fs.Client(srv.uri), table_name, set(range(40)))
    assert sink.metrics.committed == 2


def test_schema_mismatch_fails_the_batch_with_the_server_message(spark, server, tmp_path, table_name):
    import pyarrow as pa

    client = fs.Client(server.uri)
    client.create_table(table_name, pa.schema([("id", pa.string()), ("k", pa.string()), ("v", pa.int64())]))
    src = tmp_path / "in"
    write_json_file(src, 0, range(5))
    q = (
        _stream(spark, src).writeStream.foreachBatch(FlightSink(server.uri, table=table_name))
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    with pytest.raises(_query_error()) as e:
        q.awaitTermination(120)
    assert 'schema mismatch: column "id" has type utf8 in the table but int64' in str(e.value)
    assert client.read(table_name).num_rows == 0


def test_server_down_fails_the_batch(spark, tmp_path, table_name):
    src = tmp_path / "in"
    write_json_file(src, 0, range(5))
    uri = f"grpc://127.0.0.1:{free_port()}"
    q = (
        _stream(spark, src).writeStream
        .foreachBatch(FlightSink(uri, table=table_name, retry=FAST_RETRY))
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    with pytest.raises(_query_error()) as e:
        q.awaitTermination(120)
    assert "ServerUnavailableError" in str(e.value) and uri in str(e.value)


def test_outside_a_stream_needs_query_id_and_mode(spark, server, table_name):
    df = spark.range(7)
    with pytest.raises(ValueError, match="query_id="):
        FlightSink(server.uri, table=table_name)(df, 0)
    # Without a running query the output mode cannot be read: the sink refuses to guess (an
    # "append" guess would add a complete-mode aggregate's whole result with every batch).
    with pytest.raises(ValueError, match="output mode.*mode="):
        FlightSink(server.uri, table=table_name, query_id="batch-job")(df, 0)
    with pytest.raises(fs.TableNotFoundError):
        fs.Client(server.uri).table_stats(table_name)  # nothing was written, not even the table
    # With an explicit query id (and mode) the sink also lands static DataFrames, exactly once.
    sink = FlightSink(server.uri, table=table_name, query_id="batch-job", mode="append")
    sink(df, 0)
    sink(df, 0)
    assert sorted(table_ids(fs.Client(server.uri), table_name)) == list(range(7))
    assert sink.metrics.committed == 1 and sink.metrics.replays_skipped == 1


def test_source_gains_a_column_mid_stream(spark, server, tmp_path, table_name):
    """A file source whose new files carry a new column (the query restarted from its checkpoint
    with the wider schema): the batch fails clearly without merge_schema, lands with it."""
    import json
    import os

    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    client = fs.Client(server.uri)

    def start(schema, merge):
        sink = FlightSink(server.uri, table=table_name, merge_schema=merge)
        return (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(src))
            .writeStream.foreachBatch(lambda df, b: sink(df.repartition(2), b))
            .option("checkpointLocation", str(ckpt)).start()
        )

    write_json_file(src, 0, range(10))
    q = start(SCHEMA, False)
    q.processAllAvailable()
    q.stop()

    # The producer adds a field; the query restarts with it.
    tmp = tmp_path / ".tmp-extra.json"
    with open(tmp, "w") as f:
        for i in range(10, 20):
            f.write(json.dumps({"id": i, "k": f"k{i % 5}", "v": i, "extra": i * 3}) + "\n")
    os.replace(tmp, src / "part-00001.json")
    wider = SCHEMA + ", extra long"

    q = start(wider, False)
    with pytest.raises(_query_error()) as e:
        q.awaitTermination(120)
    assert 'column "extra"' in str(e.value) and "merge_schema" in str(e.value)
    assert sorted(table_ids(client, table_name)) == list(range(10)), "the refused batch wrote nothing"

    q = start(wider, True)
    q.processAllAvailable()
    q.stop()
    t = client.read(table_name)
    assert t.schema.names == ["id", "k", "v", "extra"]
    rows = {r["id"]: r["extra"] for r in t.to_pylist()}
    assert rows == {**{i: None for i in range(10)}, **{i: i * 3 for i in range(10, 20)}}
    assert client.table_stats(table_name).schema_id == 1
