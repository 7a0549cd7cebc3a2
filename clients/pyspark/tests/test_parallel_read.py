"""Parallel reads: GetFlightInfo endpoints read by pyarrow threads equal one DoGet; a ticket
keeps reading its version after later commits and a compaction, until cleanup removes it."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.flight as fl
import pytest

import flight_sink as fs


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"r{i}" for i in ids])})


@pytest.fixture
def small_endpoints(server_factory):
    """A server that makes one endpoint per fragment (every fragment is over one byte)."""
    srv = server_factory(extra_args=["--endpoint-bytes", "1", "--maintenance", "off"])
    with fs.Client(srv.uri) as c:
        yield srv, c


def ids(t: pa.Table) -> list:
    return sorted(t.column("id").to_pylist())


def test_pyarrow_endpoints_in_parallel_equal_doget(small_endpoints, table_name: str) -> None:
    srv, client = small_endpoints
    for epoch in range(4):
        client.put_epoch(table_name, rows(epoch * 100, 100), query_id="q", epoch_id=epoch, create=True)
    # Plain pyarrow: GetFlightInfo, then every endpoint's ticket on its own thread.
    raw = fl.connect(srv.uri)
    info = raw.get_flight_info(fl.FlightDescriptor.for_path(table_name))
    assert len(info.endpoints) == 4 and info.total_records == 400
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(lambda ep: raw.do_get(ep.ticket).read_all(), info.endpoints))
    union = pa.concat_tables(parts)
    doget = raw.do_get(fl.Ticket(json.dumps({"table": table_name}).encode())).read_all()
    assert ids(union) == ids(doget) == list(range(400))
    assert union.schema == doget.schema
    # The client does the same, with a server-side filter and a projection.
    assert ids(client.read(table_name, parallel=4)) == list(range(400))
    filt = {"op": "or", "args": [{"op": "<", "column": "id", "value": 5}, {"op": ">=", "column": "id", "value": 395}]}
    got = client.read(table_name, parallel=3, filter=filt, columns=["id"])
    assert got.column_names == ["id"] and ids(got) == list(range(5)) + list(range(395, 400))
    assert ids(client.read(table_name, filter=json.dumps(filt))) == ids(got)
    with pytest.raises(fs.InvalidRequestError) as bad:
        client.read(table_name, parallel=2, filter={"op": "<", "column": "nope", "value": 1})
    # An unknown column is a schema mismatch; a literal of the wrong type an invalid predicate.
    assert bad.value.reason == "SCHEMA_MISMATCH" and "nope" in str(bad.value)
    with pytest.raises(fs.InvalidRequestError) as bad:
        client.read(table_name, filter={"op": "<", "column": "id", "value": "x"})
    assert bad.value.reason == "INVALID_PREDICATE" and '"id"' in str(bad.value)


def test_memwal_rows_are_an_endpoint(small_endpoints, table_name: str) -> None:
    _, client = small_endpoints
    client.create_table(table_name, rows(0, 1).schema, primary_key=["id"], memwal_shards=2)
    client.put_epoch(table_name, rows(0, 100), query_id="base", epoch_id=0, route="direct")
    # Updates of ids 50..99 and new ids 100..149 stay in the shards' memtables.
    client.put_epoch(table_name, rows(50, 100), query_id="mw", epoch_id=0, mode="update")
    info = client.flight_info(table_name)
    assert info.total_records == 150 and len(info.endpoints) == 2
    assert ids(client.read(table_name, parallel=2)) == ids(client.read(table_name)) == list(range(150))


def test_ticket_pinned_through_commits_and_compaction_until_cleanup(small_endpoints, table_name: str) -> None:
    _, client = small_endpoints
    for epoch in range(3):
        client.put_epoch(table_name, rows(epoch * 10, 10), query_id="q", epoch_id=epoch, create=True)
    info = client.flight_info(table_name)
    assert len(info.endpoints) == 3
    client.put_epoch(table_name, rows(30, 10), query_id="q", epoch_id=3)
    assert client.compact(table_name).fragments_removed >= 3
    parts = [client.read_ticket(ep.ticket) for ep in info.endpoints]
    assert ids(pa.concat_tables(parts)) == list(range(30))
    time.sleep(1.5)
    client.cleanup(table_name, older_than_seconds=1, keep_last=1)
    with pytest.raises(fs.NotFoundError) as gone:
        client.read_ticket(info.endpoints[0].ticket)
    assert gone.value.reason == "VERSION_NOT_FOUND"
