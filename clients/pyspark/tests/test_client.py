"""The plain client against the real server: round trips, exactly-once epochs, clear errors."""

from __future__ import annotations

import datetime
import re
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import flight_sink as fs
from flight_sink._data import BatchSource, normalize_schema
from flight_sink.errors import CLASS_BY_REASON

from conftest import REPO_ROOT, free_port

FAST_RETRY = fs.RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.1)


def events(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"e{i}" for i in ids], pa.string()),
            "ts": pa.array([i * 1_000_000 for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


@pytest.fixture
def client(server):
    with fs.Client(server.uri) as c:
        yield c


def test_round_trip(client: fs.Client, table_name: str) -> None:
    ack = client.put_epoch(table_name, events(0, 5), query_id="q-1", epoch_id=0, create=True)
    assert (ack.status, ack.rows, ack.query_id, ack.epoch_id) == ("committed", 5, "q-1", 0)
    v1 = ack.version
    # A replay of the same epoch is acknowledged and writes nothing.
    dup = client.put_epoch(table_name, events(0, 5), query_id="q-1", epoch_id=0)
    assert dup.status == "duplicate" and dup.version == v1
    # A streamed epoch (iterator of batches) lands too, staged and committed.
    ack2 = client.put_epoch(
        table_name, iter(events(5, 6).to_batches(max_chunksize=2)), query_id="q-1", epoch_id=1
    )
    assert ack2.status == "committed" and ack2.rows == 6
    assert client.put_epoch(
        table_name, iter(events(5, 6).to_batches()), query_id="q-1", epoch_id=1
    ).status == "duplicate"
    # Plain append.
    plain = client.put(table_name, events(100, 2))
    assert plain.status == "committed" and plain.rows == 2 and plain.query_id is None

    t = client.read(table_name)
    assert sorted(t.column("id").to_pylist()) == list(range(11)) + [100, 101]
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    old = client.read(table_name, version=v1, columns=["name", "id"])
    assert old.column_names == ["name", "id"] and old.num_rows == 5
    assert client.schema(table_name).names == ["id", "name", "ts"]
    assert table_name in client.list_tables()

    hist = client.history(table_name, limit=10)
    assert [h.operation for h in hist][-1] == "Create"
    props = [h.properties for h in hist]
    epochs = [
        p.get("flight_sink.streaming.epoch_id")
        for p in props
        if p.get("flight_sink.streaming.query_id") == "q-1"
    ]
    assert sorted(epochs) == ["0", "1"]
    stats = client.table_stats(table_name)
    assert stats.rows == 13 and stats.streams["q-1"].epoch == 1
    ts = stats.streams["q-1"].timestamp
    assert stats.format_version == 1 and ts is not None and ts.utcoffset() == datetime.timedelta(0)
    assert client.get_table_config(table_name)["compaction.max_fragments"] == "64"
    cfg = client.set_table_config(table_name, {"compaction.max_fragments": 128, "compaction.enabled": True})
    assert cfg["compaction.max_fragments"] == "128" and cfg["compaction.enabled"] == "true"
    assert client.get_table_config(table_name)["compaction.max_fragments"] == "128"
    with pytest.raises(fs.InvalidRequestError, match="compaction.nope"):
        client.set_table_config(table_name, {"compaction.nope": 1})
    deleted = client.delete(table_name, {"op": "in", "column": "id", "values": [100, 101]})
    assert deleted.rows_deleted == 2 and deleted.committed
    assert client.read(table_name).num_rows == 11
    assert client.epoch_status(table_name, query_id="q-1", epoch_id=1).committed
    assert not client.epoch_status(table_name, query_id="q-1", epoch_id=2).committed
    assert client.cleanup(table_name, dry_run=True).dry_run is True


def test_create_table_and_modes(client: fs.Client, table_name: str) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("day", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="Europe/Paris")),
        ]
    )
    created = client.create_table(table_name, schema)
    assert created.version >= 1 and [f.name for f in created.schema] == ["id", "day", "ts"]
    assert created.schema[0].nullable is False and created.schema[0].id >= 1
    # Zoned timestamps are labelled UTC (the same instants).
    assert client.schema(table_name) == normalize_schema(schema)
    data = pa.table(
        {"id": [1, 2], "day": pa.array([1, 2], pa.date32()),
         "ts": pa.array([0, 1], pa.timestamp("us", tz="Europe/Paris"))},
        schema=schema,
    )
    def complete(tbl, epoch):
        return client.put_epoch(table_name, tbl, query_id="c", epoch_id=epoch, mode="complete")

    assert complete(data, 0).status == "committed"
    assert complete(data.slice(0, 1), 1).rows == 1
    assert client.read(table_name).column("id").to_pylist() == [1]
    # An empty complete epoch truncates; an empty append epoch writes nothing.
    assert complete(data.slice(0, 0), 2).status == "committed"
    assert client.read(table_name).num_rows == 0
    assert client.put_epoch(table_name, data.slice(0, 0), query_id="a", epoch_id=0).status == "empty"
    with pytest.raises(fs.AlreadyExistsError):
        client.create_table(table_name, schema)


# pyarrow names Parquet's LZ4_RAW codec "LZ4".
@pytest.mark.parametrize("codec, parquet_name", [
    (None, "ZSTD"), ("zstd", "ZSTD"), ("lz4_raw", "LZ4"), ("snappy", "SNAPPY"), ("none", "UNCOMPRESSED"),
])
def test_create_table_data_codec(client: fs.Client, server, table_name: str, codec, parquet_name: str) -> None:
    """The table's data files carry the codec it was created with, as pyarrow reads them."""
    import pyarrow.parquet as pq

    client.create_table(table_name, pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())]),
                        data_codec=codec)
    data = pa.table({"id": list(range(1000)), "s": [f"row-{i}" for i in range(1000)]})
    assert client.put_epoch(table_name, data, query_id="q", epoch_id=0).status == "committed"
    assert client.read(table_name).sort_by("id").equals(data)
    files = sorted((Path(server.root) / table_name / "data").glob("*.parquet"))
    assert files
    for f in files:
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                assert md.row_group(g).column(c).compression == parquet_name


def test_create_table_unknown_codec(client: fs.Client, table_name: str) -> None:
    with pytest.raises(fs.InvalidRequestError, match="data_codec"):
        client.create_table(table_name, pa.schema([pa.field("id", pa.int64())]), data_codec="brotli")


def test_multi_writer_epoch(client: fs.Client, table_name: str) -> None:
    client.create_table(table_name, events(0, 1).schema)
    s0 = client.put_epoch(table_name, events(0, 3), query_id="mw", epoch_id=7, partition=(0, 0))
    s1_failed = client.put_epoch(table_name, events(1000, 3), query_id="mw", epoch_id=7, partition=(1, 0))
    s1 = client.put_epoch(table_name, events(3, 3), query_id="mw", epoch_id=7, partition=(1, 1))
    assert {s0.status, s1.status, s1_failed.status} == {"staged"}
    assert client.read(table_name).num_rows == 0  # staged data is invisible
    ack = client.commit_epoch(table_name, query_id="mw", epoch_id=7, stages=[s0.stage, s1.stage])
    assert ack.status == "committed" and ack.rows == 6
    again = client.commit_epoch(table_name, query_id="mw", epoch_id=7, stages=[s0.stage, s1.stage])
    assert again.status == "duplicate" and again.version == ack.version
    assert sorted(client.read(table_name).column("id").to_pylist()) == list(range(6))
    # Two attempts of one partition in one commit are refused.
    a0, a1 = (
        client.put_epoch(table_name, events(0, 1), query_id="mw", epoch_id=8, partition=(0, attempt))
        for attempt in (0, 1)
    )
    with pytest.raises(fs.InvalidRequestError, match="twice"):
        client.commit_epoch(table_name, query_id="mw", epoch_id=8, stages=[a0.stage, a1.stage])


def test_memwal_flush_and_compact_by_shard_id(client: fs.Client, table_name: str) -> None:
    """flush_memwal and compact_memwal_shard take the shard ids table_stats lists (strings)."""
    client.create_table(table_name, events(0, 1).schema, memwal_shards=2)
    for epoch in range(4):
        ack = client.put_epoch(table_name, events(epoch * 10, 10), query_id="m", epoch_id=epoch)
        assert (ack.status, ack.route) == ("committed", "memwal")
    memwal = client.table_stats(table_name).memwal
    assert memwal is not None
    shards = memwal.shards
    assert len(shards) == 2 and all(isinstance(sh.shard, str) for sh in shards)
    full = [sh.shard for sh in shards if sh.memtable_rows > 0]
    assert full, shards
    one = full[0]

    assert client.flush_memwal(table_name, shard=one) .shards_flushed == 1
    memwal = client.table_stats(table_name).memwal
    assert memwal is not None
    after = {sh.shard: sh for sh in memwal.shards}
    assert after[one].memtable_rows == 0 and after[one].generations >= 1
    assert client.fold_memwal_shard(table_name, shard=one).generations_reclaimed >= 1
    assert client.table_stats(table_name).rows > 0  # folded into the base table
    # Every shard by default.
    assert client.flush_memwal(table_name).shards_flushed == 2
    client.fold_memwal_shard(table_name, min_generations=1)
    assert sorted(client.read(table_name).column("id").to_pylist()) == list(range(40))

    with pytest.raises(TypeError, match="shard id string"):
        client.flush_memwal(table_name, shard=0)  # type: ignore[arg-type]
    with pytest.raises(fs.InvalidRequestError, match="no MemWAL shard") as unknown:
        client.fold_memwal_shard(table_name, shard="00000000-0000-4000-8000-000000000000")
    assert unknown.value.reason == "INVALID_REQUEST"
    plain = f"{table_name}_plain"
    client.create_table(plain, events(0, 1).schema)
    with pytest.raises(fs.FailedPreconditionError) as no_shards:
        client.flush_memwal(plain)
    assert no_shards.value.reason == "UNSUPPORTED"


def test_cleanup_removes_old_versions(client: fs.Client, table_name: str) -> None:
    for epoch in range(3):
        client.put_epoch(table_name, events(epoch, 1), query_id="c", epoch_id=epoch, create=True)
    latest = client.table_stats(table_name).version
    time.sleep(1.5)  # every version but the latest is now superseded for more than 1 s
    dry = client.cleanup(table_name, older_than_seconds=1, keep_last=1, dry_run=True)
    assert dry.dry_run is True and len(dry.versions_removed) == latest - 1
    assert client.read(table_name, version=1).num_rows == 0  # a dry run removes nothing
    done = client.cleanup(table_name, older_than_seconds=1, keep_last=1)
    assert done.versions_removed == dry.versions_removed
    with pytest.raises(fs.NotFoundError) as gone:
        client.read(table_name, version=1)
    assert gone.value.reason == "VERSION_NOT_FOUND"
    assert sorted(client.read(table_name).column("id").to_pylist()) == [0, 1, 2]


def test_every_action_has_its_method_and_a_test(client: fs.Client) -> None:
    """Each DoAction the server lists (but an alias of another) has a Client method of its name
    that sends it, and a test here calls that method."""
    client_src = (REPO_ROOT / "clients" / "pyspark" / "src" / "flight_sink" / "client.py").read_text()
    sent = set(re.findall(r'self\._(?:action|result)\(\s*(?:[A-Za-z]+,\s*)?"([a-z_]+)"', client_src))
    served = {name for name, desc in client.list_actions().items() if not desc.startswith("Alias of")}
    assert {"commit_epoch", "drop_table", "publish_iceberg", "fold_memwal_shard"} <= served
    assert served == sent, served ^ sent
    tests_src = open(__file__).read()
    for name in sorted(served):
        assert callable(getattr(client, name, None)), f"no method Client.{name}"
        assert re.search(rf"client\.{name}\(", tests_src), f"no test calls Client.{name}"


def test_index_publish_and_drop(client: fs.Client, table_name: str) -> None:
    """create_index, optimize_indices, publish_iceberg and drop_table, each by its method, with
    typed results."""
    client.create_table(table_name, events(0, 1).schema, primary_key=["id"])
    client.put_epoch(table_name, events(0, 5), query_id="q", epoch_id=0)
    created = client.create_index(table_name)
    assert isinstance(created, fs.TableVersion) and created.table == table_name and created.version >= 3
    client.put_epoch(table_name, events(5, 5), query_id="q", epoch_id=1)
    opt = client.optimize_indices(table_name, ["pk"])
    assert isinstance(opt, fs.OptimizeIndicesResult) and [ix.name for ix in opt.indices] == ["pk"]
    assert opt.indices[0].unindexed_fragments_after == 0
    stats = client.table_stats(table_name)
    assert [ix.name for ix in stats.indices] == ["pk"] and stats.indices[0].columns == ["id"]
    published = client.publish_iceberg(table_name)
    assert published.iceberg_version == client.table_stats(table_name).version
    assert published.metadata_file.endswith(".metadata.json")
    dropped = client.drop_table(table_name)
    assert isinstance(dropped, fs.DropTableResult) and dropped.table == table_name
    assert dropped.version >= published.iceberg_version
    with pytest.raises(fs.TableNotFoundError):
        client.table_stats(table_name)
    # The name is free again: a put that creates makes a fresh table (version 1), its epoch 2.
    assert client.put_epoch(table_name, events(0, 1), query_id="q", epoch_id=0, create=True).version == 2
    assert [h.operation for h in client.history(table_name)] == ["Append", "Create"]


def test_failing_stream_commits_nothing(client: fs.Client, table_name: str) -> None:
    """A source that fails half-way must not leave a partial epoch (it is sent as a stage)."""
    client.create_table(table_name, events(0, 1).schema)

    def broken():
        yield events(0, 3).to_batches()[0]
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        client.put_epoch(table_name, broken(), query_id="b", epoch_id=0)
    with pytest.raises(RuntimeError, match="source broke"):
        client.put(table_name, broken())
    time.sleep(0.3)  # let the server finish whatever it received
    assert client.read(table_name).num_rows == 0
    assert not client.epoch_status(table_name, query_id="b", epoch_id=0).committed
    # The epoch can then be sent again in full.
    assert client.put_epoch(table_name, events(0, 3), query_id="b", epoch_id=0).rows == 3


def test_errors_are_clear(client: fs.Client, table_name: str) -> None:
    """Each error's class and reason come from the server's ErrorInfo, its message is the server's."""
    client.put_epoch(table_name, events(0, 2), query_id="q", epoch_id=0, create=True)

    with pytest.raises(fs.InvalidRequestError, match="invalid table name") as bad:
        client.put_epoch("bad/name", events(0, 1), query_id="q", epoch_id=0, create=True)
    assert (bad.value.code, bad.value.reason) == ("invalid_argument", "INVALID_TABLE_NAME")
    assert "bad/name" in bad.value.server_message

    wrong = pa.table({"id": pa.array(["x"], pa.string())})
    with pytest.raises(fs.SchemaMismatchError) as mm:
        client.put_epoch(table_name, wrong, query_id="q", epoch_id=1)
    msg = str(mm.value)
    assert 'column "id"' in msg and "int64" in msg and "utf8" in msg and "gRPC" not in msg
    assert isinstance(mm.value, ValueError) and mm.value.reason == "SCHEMA_CHANGE_REFUSED"
    assert mm.value.server_message.startswith(f"table {table_name}: schema mismatch")

    def reason(exc_type, fn, *args, **kwargs):
        with pytest.raises(exc_type) as e:
            fn(*args, **kwargs)
        return e.value.reason

    missing = f"{table_name}_missing"
    assert reason(fs.TableNotFoundError, client.put_epoch, missing, events(0, 1), query_id="q", epoch_id=0) == "TABLE_NOT_FOUND"
    assert reason(fs.TableNotFoundError, client.read, missing) == "TABLE_NOT_FOUND"
    assert reason(fs.TableNotFoundError, client.schema, missing) == "TABLE_NOT_FOUND"
    assert reason(fs.TableNotFoundError, client.history, missing) == "TABLE_NOT_FOUND"
    assert reason(fs.NotFoundError, client.read, table_name, version=999) == "VERSION_NOT_FOUND"
    assert reason(fs.NotFoundError, client.commit_epoch, table_name, query_id="s", epoch_id=0,
                  stages=["00000000-0000-4000-8000-000000000000"]) == "STAGE_NOT_FOUND"
    assert reason(fs.InvalidRequestError, client.commit_epoch, table_name, query_id="s", epoch_id=0,
                  stages=["no-such-stage"]) == "INVALID_REQUEST"
    assert reason(fs.InvalidRequestError, client.put_epoch, table_name, events(0, 1), query_id="  ", epoch_id=3) == "INVALID_REQUEST"
    assert reason(fs.InvalidRequestError, client.delete, table_name, {"op": "=", "column": "id", "value": "one"}) == "INVALID_PREDICATE"
    assert reason(fs.AlreadyExistsError, client.create_table, table_name, events(0, 1).schema) == "TABLE_EXISTS"
    with pytest.raises(ValueError, match="mode"):
        client.put_epoch(table_name, events(0, 1), query_id="q", epoch_id=3, mode="overwrite")
    # An action the server does not run is a clear UnsupportedError.
    assert reason(fs.UnsupportedError, client.action, "optimize_everything", {"table": table_name}) == "UNKNOWN_ACTION"
    assert client.compact(table_name, target_rows_per_fragment=1000).read_version >= 1
    # An epoch below the watermark that is not a replay: a reused query id.
    client.put_epoch(table_name, events(2, 1), query_id="q", epoch_id=5)
    with pytest.raises(fs.QueryReusedError, match="new checkpoint") as reused:
        client.put_epoch(table_name, events(3, 1), query_id="q", epoch_id=4, dedupe_lookback_versions=1)
    assert reused.value.reason == "QUERY_REUSED" and reused.value.code == "failed_precondition"
    assert client.read(table_name).num_rows == 3


def test_limit_exceeded_reason(server_factory) -> None:
    srv = server_factory(extra_args=["--max-put-bytes", "65536"])
    c = fs.Client(srv.uri, retry=FAST_RETRY)
    c.put_epoch("capped", events(0, 1), query_id="q", epoch_id=0, create=True)
    with pytest.raises(fs.ResourceExhaustedError, match="max-put-bytes") as e:
        c.put_epoch("capped", events(0, 20000), query_id="q", epoch_id=1)
    assert (e.value.code, e.value.reason) == ("resource_exhausted", "LIMIT_EXCEEDED")
    assert not e.value.retryable
    assert c.read("capped").num_rows == 1


def test_server_down_is_clear_and_bounded() -> None:
    port = free_port()
    c = fs.Client(f"grpc://127.0.0.1:{port}", retry=FAST_RETRY)
    t0 = time.monotonic()
    with pytest.raises(fs.ServerUnavailableError) as e:
        c.history("events")
    assert time.monotonic() - t0 < 15  # bounded: 3 attempts with short backoffs
    assert f"127.0.0.1:{port}" in str(e.value) and "running" in str(e.value)
    assert isinstance(e.value, ConnectionError) and e.value.retryable
    with pytest.raises(fs.ServerUnavailableError):
        c.put_epoch("events", events(0, 1), query_id="q", epoch_id=0)
    with pytest.raises(fs.ServerUnavailableError):
        c.put("events", events(0, 1))


def test_unavailable_is_retried_until_the_server_is_up(server_factory) -> None:
    port = free_port()
    started = threading.Timer(1.0, lambda: server_factory(listen=f"127.0.0.1:{port}"))
    started.start()
    try:
        c = fs.Client(
            f"grpc://127.0.0.1:{port}",
            retry=fs.RetryPolicy(max_attempts=500, initial_backoff=0.1, max_backoff=0.5, max_elapsed=120),
        )
        ack = c.put_epoch("late", iter(events(0, 4).to_batches()), query_id="q", epoch_id=0, create=True)
        assert ack.status == "committed" and ack.rows == 4
    finally:
        started.join()


def test_bearer_token(server_bin: str, server_factory) -> None:
    help_text = subprocess.run([server_bin, "serve", "--help"], capture_output=True, text=True).stdout
    if "--auth-token" not in help_text:
        pytest.skip("this server build has no --auth-token")
    srv = server_factory(extra_args=["--auth-token", "s3cret"])
    with pytest.raises(fs.UnauthenticatedError, match="Bearer") as unauth:
        fs.Client(srv.uri, retry=FAST_RETRY).list_tables()
    assert unauth.value.reason == "UNAUTHENTICATED"
    with pytest.raises(fs.PermissionDeniedError, match="token") as denied:
        fs.Client(srv.uri, token="wrong", retry=FAST_RETRY).put_epoch(
            "t", events(0, 1), query_id="q", epoch_id=0, create=True)
    assert denied.value.reason == "PERMISSION_DENIED" and isinstance(denied.value, PermissionError)
    ok = fs.Client(srv.uri, token="s3cret")
    assert ok.put_epoch("t", events(0, 1), query_id="q", epoch_id=0, create=True).status == "committed"
    assert ok.read("t").num_rows == 1


def test_batch_source_replay() -> None:
    batches = events(0, 10).to_batches(max_chunksize=3)
    src = BatchSource(iter(batches), max_buffer_bytes=1 << 20)
    first_try = []
    for b in src.batches():
        first_try.append(b)
        if len(first_try) == 2:
            break  # the call failed after two batches
    assert sum(b.num_rows for b in src.batches()) == 10 and src.replayable
    assert sum(b.num_rows for b in src.batches()) == 10  # and again, from the recording
    small = BatchSource(iter(events(0, 10).to_batches(max_chunksize=3)), max_buffer_bytes=1)
    list(small.batches())
    assert not small.replayable
    with pytest.raises(ValueError, match="schema"):
        BatchSource(iter([]))
    empty = BatchSource(iter([]), schema=events(0, 1).schema)
    assert list(empty.batches()) == []


def _flight_error(cls, message: str, code: int, reason=None, domain: str = fs.ERROR_DOMAIN,
                  metadata=None):
    """A pyarrow FlightError as pyarrow raises it for a status with a google.rpc.Status detail."""
    from google.rpc import error_details_pb2, status_pb2

    st = status_pb2.Status(code=code, message=message)
    if reason is not None:
        st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata or {}))
    return cls(message, st.SerializeToString())


def test_class_comes_from_the_reason_not_the_message() -> None:
    import pyarrow.flight as fl

    # The message says "schema mismatch" and "query_id reused": only the reason counts.
    err = fs.errors.from_arrow_error(
        _flight_error(fl.FlightInternalError, "schema mismatch; query_id reused", 5, "TABLE_NOT_FOUND"),
        "DoPut t",
    )
    assert type(err) is fs.TableNotFoundError and (err.code, err.reason) == ("not_found", "TABLE_NOT_FOUND")
    assert str(err) == "DoPut t: schema mismatch; query_id reused [not_found, TABLE_NOT_FOUND]"
    fenced = fs.errors.from_arrow_error(
        _flight_error(fl.FlightInternalError, "fenced", 9, "FENCED", metadata={"shard": "s-1"}))
    assert type(fenced) is fs.FailedPreconditionError and fenced.metadata == {"shard": "s-1"}
    # A reason this client does not know falls back on the code.
    future = fs.errors.from_arrow_error(_flight_error(fl.FlightInternalError, "x", 8, "SOMETHING_NEW"))
    assert type(future) is fs.ResourceExhaustedError and future.reason == "SOMETHING_NEW"
    # An ErrorInfo of another domain is not a flight-sink reason.
    other = fs.errors.from_arrow_error(_flight_error(fl.FlightInternalError, "x", 3, "SCHEMA_MISMATCH", domain="example.com"))
    assert type(other) is fs.InvalidRequestError and other.reason is None
    # Without status details (an unreachable server), pyarrow's exception type gives the code.
    down = fs.errors.from_arrow_error(fl.FlightUnavailableError("connection refused"), "ListFlights", "grpc://h:1")
    assert type(down) is fs.ServerUnavailableError and down.reason is None and down.retryable
    assert "grpc://h:1" in str(down)
    assert type(fs.errors.from_arrow_error(fl.FlightTimedOutError("late"))) is fs.DeadlineExceededError
    # Bytes that are not a google.rpc.Status are ignored rather than misread.
    junk = fs.errors.from_arrow_error(fl.FlightInternalError("boom", b"\xff\xff\xff"))
    assert type(junk) is fs.ServerInternalError and junk.reason is None


def _doc_reasons() -> "dict[str, str]":
    """The reason table of docs/protocol.md's Errors section: reason -> gRPC code name."""
    text = (REPO_ROOT / "docs" / "protocol.md").read_text()
    section = text[text.index("\n## Errors\n"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return dict(re.findall(r"^\| `([A-Z0-9_]+)` \| `([A-Za-z]+)` \|", section, re.M))


def test_every_documented_reason_has_a_class() -> None:
    """The client's reason table and docs/protocol.md list the same reasons; each reason's class
    is the one of its code (or a subclass), except where a finer class says more."""
    doc = _doc_reasons()
    assert doc, "docs/protocol.md lists no reasons"
    assert set(CLASS_BY_REASON) == set(doc)
    snake = {"InvalidArgument": "invalid_argument", "NotFound": "not_found", "Canceled": "cancelled"}
    for reason, code in doc.items():
        code_name = snake.get(code) or re.sub(r"(?<!^)([A-Z])", r"_\1", code).lower()
        by_code = fs.errors._CLASS_BY_CODE[code_name]
        cls = CLASS_BY_REASON[reason]
        assert issubclass(cls, by_code) or reason == "UNKNOWN_ACTION", (reason, cls, by_code)
