"""Client.write, filters as text or pyarrow expressions, URI checks and retries that outlast a
server restart: against the real server, with real pandas and Polars."""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterator

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import flight_sink as fs
from flight_sink.filters import to_predicate

from conftest import free_port

FAST_RETRY = fs.RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.1)


@pytest.fixture
def client(server):
    with fs.Client(server.uri) as c:
        yield c


def orders() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [1, 2, 3, 4, 5],
            "amount": [10.0, 60.0, 75.5, 51.0, None],
            "country": ["NL", "NL", "DE", "NL", "NL"],
        }
    )


def ids(t: pa.Table) -> list:
    return sorted(t.column("id").to_pylist())


def test_write_dataframes_in_one_call(client: fs.Client, table_name: str) -> None:
    # pandas creates the table; Polars, an Arrow reader and a RecordBatch append to it.
    ack = client.write(table_name, orders())
    assert (ack.status, ack.rows) == ("committed", 5)
    assert client.read(table_name).schema.names == ["id", "amount", "country"]
    client.write(table_name, pl.DataFrame({"id": [6], "amount": [7.0], "country": ["FR"]}))
    extra = pa.table({"id": [7, 8], "amount": [1.0, 2.0], "country": ["BE", "BE"]})
    client.write(table_name, pa.RecordBatchReader.from_batches(extra.schema, extra.to_batches()))
    client.write(table_name, extra.slice(0, 1).to_batches()[0].replace_schema_metadata(None))
    assert ids(client.read(table_name)) == [1, 2, 3, 4, 5, 6, 7, 7, 8]

    # Overwrite replaces every row, in one version; the earlier one is still readable.
    before = client.table_stats(table_name).version
    ow = client.write(table_name, orders().iloc[:2], mode="overwrite")
    assert ow.status == "committed" and ow.version == before + 1
    assert ids(client.read(table_name)) == [1, 2]
    assert len(ids(client.read(table_name, version=before))) == 9
    assert [h.operation for h in client.history(table_name, limit=1)] == ["Overwrite"]

    # create=False refuses an unknown table; a bad mode is refused before any call.
    with pytest.raises(fs.TableNotFoundError):
        client.write(table_name + "_missing", orders(), create=False)
    with pytest.raises(ValueError, match="append.*overwrite"):
        client.write(table_name, orders(), mode="complete")
    # Every write of this client is an epoch of one query id: one entry in the table's streams.
    streams = client.table_stats(table_name).streams
    assert len([q for q in streams if q.startswith("flight_sink.write.")]) == 1


def test_put_takes_a_dataframe_or_says_what_to_pass(client: fs.Client, table_name: str) -> None:
    client.write(table_name, orders().iloc[:1])
    assert client.put(table_name, orders().iloc[1:]).rows == 4
    assert client.put_epoch(table_name, pl.from_pandas(orders()), query_id="q", epoch_id=0).rows == 5
    assert len(ids(client.read(table_name))) == 10
    with pytest.raises(TypeError, match="pandas or Polars DataFrame.*got a str item"):
        client.put(table_name, ["id", "amount"])
    with pytest.raises(TypeError, match="pandas or Polars DataFrame, got builtins.dict"):
        client.write(table_name, {"id": [1]})
    with pytest.raises(TypeError, match="got pandas.Series"):
        client.write(table_name, orders()["id"])
    assert len(ids(client.read(table_name))) == 10


def test_filters_as_text_and_pyarrow_expressions(client: fs.Client, table_name: str) -> None:
    client.write(table_name, orders())
    text = "amount > 50 and country = 'NL'"
    assert ids(client.read(table_name, filter=text)) == [2, 4]
    assert ids(client.read(table_name, filter=(pc.field("amount") > 50) & (pc.field("country") == "NL"))) == [2, 4]
    assert ids(client.read(table_name, filter="50 < amount and not country = 'NL'")) == [3]
    assert ids(client.read(table_name, filter="id in (1, 5) or amount between 70 and 80")) == [1, 3, 5]
    assert ids(client.read(table_name, filter="amount is null")) == [5]
    assert ids(client.read(table_name, filter=pc.field("amount").is_valid())) == [1, 2, 3, 4]
    assert ids(client.read(table_name, filter=pc.field("id").isin([2, 3]))) == [2, 3]
    assert ids(client.read(table_name, filter='{"op": "=", "column": "id", "value": 4}')) == [4]
    assert ids(client.read(table_name, filter=text, parallel=2)) == [2, 4]

    with pytest.raises(fs.FilterSyntaxError, match="position 9") as e:
        client.read(table_name, filter="amount > and country = 'NL'")
    assert e.value.position == 9 and "found 'and'" in str(e.value) and isinstance(e.value, ValueError)
    with pytest.raises(fs.FilterSyntaxError, match="is null"):
        client.read(table_name, filter="amount = null")
    with pytest.raises(fs.FilterSyntaxError, match="no predicate form"):
        client.read(table_name, filter=pc.field("amount").is_null(nan_is_null=True))
    # A column the table does not have is refused by the server, naming it.
    with pytest.raises(fs.InvalidRequestError) as bad:
        client.read(table_name, filter="amout > 50")
    assert bad.value.reason in ("INVALID_PREDICATE", "SCHEMA_MISMATCH") and "amout" in str(bad.value)

    assert client.delete(table_name, "country != 'NL'").rows_deleted == 1
    assert ids(client.read(table_name)) == [1, 2, 4, 5]


def test_filter_from_pyarrow_expression() -> None:
    # The text grammar's cases are in engine/expr/testdata/filters.json (tests/test_filters.py).
    assert to_predicate(pc.field("s").isin(["a b", "c"]) | ~(pc.field("n") <= 3)) == {
        "op": "or",
        "args": [
            {"op": "in", "column": "s", "values": ["a b", "c"]},
            {"op": "not", "args": [{"op": "<=", "column": "n", "value": 3}]},
        ],
    }
    with pytest.raises(TypeError, match="filter must be"):
        to_predicate(42)


@pytest.mark.parametrize(
    "uri, message",
    [
        ("http://127.0.0.1:8815", "scheme 'http' is not one of grpc"),
        ("127.0.0.1:8815", "has no scheme"),
        ("grpc://127.0.0.1", "must name a host and a port"),
        ("grpc://:8815", "must name a host and a port"),
        ("grpc://host:99999", "must name a host and a port"),
    ],
)
def test_uri_errors_at_construction(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fs.Client(uri)


def test_uris_that_are_accepted() -> None:
    for uri in ["grpc://127.0.0.1:8815", "grpc+tcp://localhost:1", "grpc+tls://h.example:443/", "grpc://[::1]:8815"]:
        assert fs.Client(uri).uri == uri


def test_default_retry_outlasts_a_server_restart_mid_put(server_factory, tmp_path) -> None:
    # A streamed write whose server is killed after the first batch and started again (same
    # port, same root) 3 s later: the default policy replays it, and it lands exactly once.
    port = free_port()
    root = tmp_path / "root"
    srv = server_factory(listen=f"127.0.0.1:{port}", root=root)
    c = fs.Client(srv.uri)
    assert c.retry == fs.RetryPolicy() and c.retry.max_elapsed >= 60
    c.write("restarted", orders().iloc[:1])
    restarted = threading.Event()

    def restart() -> None:
        srv.proc.kill()
        srv.proc.wait()
        time.sleep(3)
        server_factory(listen=f"127.0.0.1:{port}", root=root)
        restarted.set()

    def batches() -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_pandas(orders(), preserve_index=False)
        yield table.slice(0, 2).to_batches()[0]
        if not restarted.is_set() and srv.proc.poll() is None:
            t = threading.Thread(target=restart)
            t.start()
            while srv.proc.poll() is None:
                time.sleep(0.01)
        yield table.slice(2).to_batches()[0]

    ack = c.write("restarted", batches())
    assert ack.status == "committed" and ack.rows == 5
    assert restarted.wait(30)
    assert ids(c.read("restarted")) == [1, 1, 2, 3, 4, 5]


def test_concurrent_put_limit_is_retried(server_factory) -> None:
    # ResourceExhausted for --max-concurrent-puts passes once the other put ends; a size limit
    # does not (test_client.py::test_limit_exceeded_reason).
    srv = server_factory(extra_args=["--max-concurrent-puts", "1"])
    c = fs.Client(srv.uri)
    c.write("busy", orders().iloc[:1])
    release = threading.Event()
    holding = threading.Event()

    def slow() -> Iterator[pa.RecordBatch]:
        yield pa.Table.from_pandas(orders().iloc[1:2], preserve_index=False).to_batches()[0]
        holding.set()
        release.wait(30)

    holder = threading.Thread(target=lambda: fs.Client(srv.uri).write("busy", slow()))
    holder.start()
    assert holding.wait(30)
    with pytest.raises(fs.ResourceExhaustedError) as refused:
        fs.Client(srv.uri, retry=fs.RetryPolicy.none()).write("busy", orders().iloc[2:3])
    assert refused.value.reason == "LIMIT_EXCEEDED" and refused.value.retryable
    threading.Timer(1.0, release.set).start()
    assert c.write("busy", orders().iloc[2:3]).status == "committed"
    holder.join(30)
    assert ids(c.read("busy")) == [1, 2, 3]


def test_retries_warn_once_then_every_10s_and_stop_at_the_bound(caplog) -> None:
    policy = fs.RetryPolicy(initial_backoff=0.001, max_backoff=0.002, max_elapsed=0.5)
    calls = [0]

    def down() -> None:
        calls[0] += 1
        raise fs.ServerUnavailableError("down", code="unavailable")

    with caplog.at_level(logging.DEBUG, logger="flight_sink"):
        t0 = time.monotonic()
        with pytest.raises(fs.ServerUnavailableError):
            policy.call("DoPut t", down)
    assert time.monotonic() - t0 >= 0.4  # retried until the bound, not given up after a count
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert calls[0] > 10 and len(warnings) == 1 and "DoPut t failed (unavailable)" in warnings[0].getMessage()
