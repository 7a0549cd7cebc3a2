"""Direct reads: Client.read reading the data files GetFlightInfo hands out (file:// on a local
root, presigned URLs on S3) returns exactly what DoGet returns: same rows, same schema, for deletes,
upserts, schema changes, filters, projections, MemWAL rows not folded yet and time travel; an
endpoint whose file cannot be opened is read with DoGet.

The S3 case needs a server on an S3 root: ``go test ./flightsvc -run TestDirectReadPython`` starts
one on the S3 server the Go tests use and runs this file against it (FLIGHT_SINK_TEST_S3_SERVER).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.flight as fl
import pytest

import flight_sink as fs

S3_SERVER_ENV = "FLIGHT_SINK_TEST_S3_SERVER"


@pytest.fixture(params=["local", "s3"])
def client(request: pytest.FixtureRequest):
    if request.param == "s3":
        uri = os.environ.get(S3_SERVER_ENV)
        if not uri:
            pytest.skip(f"no server on an S3 root: {S3_SERVER_ENV} is unset; "
                        "`go test ./flightsvc -run TestDirectReadPython` sets it")
    else:
        uri = request.getfixturevalue("server_factory")(extra_args=["--maintenance", "off"]).uri
    with fs.Client(uri) as c:
        yield c


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"r{i}" for i in ids])})


def locations(c: fs.Client, table: str, **kw) -> int:
    """How many endpoints of a direct GetFlightInfo carry a location."""
    return sum(1 for ep in c.flight_info(table, direct=True, **kw).endpoints if ep.locations)


def assert_same(c: fs.Client, table: str, direct_endpoints: bool = True, **kw) -> pa.Table:
    """Direct (strict, and auto) and DoGet-only reads are equal in rows and schema."""
    doget = c.read(table, direct=False, **kw)
    for direct in (True, None):
        got = c.read(table, direct=direct, **kw)
        assert got.schema.equals(doget.schema, check_metadata=True), (got.schema, doget.schema)
        assert got.sort_by("id").equals(doget.sort_by("id")), (direct, got.to_pydict(), doget.to_pydict())
    assert (locations(c, table, **kw) > 0) == direct_endpoints
    return doget


def test_deletes(client: fs.Client, table_name: str) -> None:
    for e in range(3):
        client.put_epoch(table_name, rows(e * 10, 10), query_id="q", epoch_id=e, create=True)
    client.delete(table_name, "id < 5 or id = 17")
    out = assert_same(client, table_name)
    assert out.num_rows == 24
    deleted = [json.loads(ep.app_metadata)["deleted"] for ep in client.flight_info(table_name, direct=True).endpoints]
    assert deleted == [[[0, 5]], [[7, 8]], []]


def test_upsert(client: fs.Client, table_name: str) -> None:
    client.create_table(table_name, rows(0, 1).schema, primary_key=["id"])
    client.put_epoch(table_name, rows(0, 10), query_id="q", epoch_id=0, mode="update")
    client.put_epoch(table_name, pa.table({"id": pa.array([3, 4, 20], pa.int64()), "name": ["x", "y", "z"]}),
                     query_id="q", epoch_id=1, mode="update")
    out = assert_same(client, table_name)
    assert dict(zip(*out.sort_by("id").to_pydict().values()))[3] == "x" and out.num_rows == 11


def test_schema_change(client: fs.Client, table_name: str) -> None:
    """Files written before a column was added and a column was widened: nulls and a cast."""
    old = pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([10, 20], pa.int32())})
    client.put_epoch(table_name, old, query_id="q", epoch_id=0, create=True)
    new = pa.table({"id": pa.array([3], pa.int64()), "v": pa.array([1 << 40], pa.int64()), "extra": ["e"]})
    client.put_epoch(table_name, new, query_id="q", epoch_id=1, merge_schema=True)
    out = assert_same(client, table_name)
    assert out.schema.field("v").type == pa.int64() and out.sort_by("id").column("extra").to_pylist() == [None, None, "e"]


def test_write_omitting_a_column(client: fs.Client, table_name: str) -> None:
    """A write that leaves a nullable column out writes files of its own columns: the direct read
    finds the others by name (the omitted one is nulls), alone and projected."""
    full = pa.table({"id": pa.array([1, 2], pa.int64()), "a": ["a1", "a2"], "b": ["b1", "b2"]})
    client.put_epoch(table_name, full, query_id="q", epoch_id=0, create=True)
    client.put_epoch(table_name, pa.table({"id": pa.array([3], pa.int64()), "b": ["b3"]}),
                     query_id="q", epoch_id=1, merge_schema=True)
    out = assert_same(client, table_name)
    assert out.sort_by("id").column("a").to_pylist() == ["a1", "a2", None]
    assert out.sort_by("id").column("b").to_pylist() == ["b1", "b2", "b3"]
    assert_same(client, table_name, columns=["b", "id"])


def test_filter_and_projection(client: fs.Client, table_name: str) -> None:
    for e in range(2):
        client.put_epoch(table_name, rows(e * 10, 10), query_id="q", epoch_id=e, create=True)
    assert_same(client, table_name, filter="id > 12", direct_endpoints=False)  # the server filters
    out = assert_same(client, table_name, columns=["name", "id"])
    assert out.column_names == ["name", "id"]


def test_memwal_rows_not_folded(client: fs.Client, table_name: str) -> None:
    client.create_table(table_name, rows(0, 1).schema, memwal_shards=1)
    client.put_epoch(table_name, rows(0, 10), query_id="m", epoch_id=0)
    client.flush_memwal(table_name)
    client.fold_memwal_shard(table_name, min_generations=1)  # folded: a base fragment
    client.put_epoch(table_name, rows(10, 5), query_id="m", epoch_id=1)  # still in the shard
    info = client.flight_info(table_name, direct=True)
    assert [bool(ep.locations) for ep in info.endpoints] == [True, False]
    assert assert_same(client, table_name).num_rows == 15


def test_time_travel(client: fs.Client, table_name: str) -> None:
    client.put_epoch(table_name, rows(0, 10), query_id="q", epoch_id=0, create=True)
    v = client.put_epoch(table_name, rows(10, 10), query_id="q", epoch_id=1).version
    client.put_epoch(table_name, rows(20, 10), query_id="q", epoch_id=2)
    client.delete(table_name, "id < 15")
    assert assert_same(client, table_name, version=v).num_rows == 20


def test_unreadable_location_falls_back(client: fs.Client, table_name: str) -> None:
    """An endpoint whose file this process cannot open (another machine's path, a file removed
    since) is read with its ticket; direct=True raises instead."""
    for e in range(2):
        client.put_epoch(table_name, rows(e * 10, 10), query_id="q", epoch_id=e, create=True)
    info = client.flight_info(table_name, direct=True)
    gone = [fl.FlightEndpoint(ep.ticket, ["file:///nonexistent/flight-sink/gone.parquet"], app_metadata=ep.app_metadata)
            for ep in info.endpoints]
    moved = fl.FlightInfo(info.schema, info.descriptor, gone, info.total_records, info.total_bytes)
    got = client.read_flight_info(moved)
    assert got.equals(client.read(table_name, direct=False))
    with pytest.raises(fs.ProtocolError, match="gone.parquet"):
        client.read_flight_info(moved, direct=True)


def test_files_on_another_machine(server_factory, table_name: str) -> None:
    """A file:// location whose directory is missing here is on another machine (the auto mode
    then reads with DoGet); one whose file alone is missing was removed since (per-endpoint
    fallback)."""
    from flight_sink import _direct

    srv = server_factory(extra_args=["--maintenance", "off"])
    with fs.Client(srv.uri) as c:
        for e in range(2):
            c.put_epoch(table_name, rows(e * 10, 10), query_id="q", epoch_id=e, create=True)
        info = c.flight_info(table_name, direct=True)

        def moved(uri: str) -> list:
            return [fl.FlightEndpoint(ep.ticket, [uri], app_metadata=ep.app_metadata) for ep in info.endpoints]

        here = info.endpoints[0].locations[0].uri.decode()
        assert not _direct.elsewhere(info.endpoints)
        assert not _direct.elsewhere(moved(here.rsplit("/", 1)[0] + "/removed-since.parquet"))
        assert _direct.elsewhere(moved("file:///nonexistent/flight-sink/data/x.parquet"))
        assert c.read(table_name).num_rows == 20 and not c._files_elsewhere
