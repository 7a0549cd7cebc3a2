"""Partitioned tables through the client: Client.create_table(partition_by=...) and the create
option of write/put_epoch, the spec as table_stats shows it, reads filtered on a partition
column, and the refusals that create nothing."""

from __future__ import annotations

import datetime
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import flight_sink as fs
from flight_sink.results import PartitionField

UTC = datetime.timezone.utc


@pytest.fixture
def client(server) -> Iterator[fs.Client]:
    with fs.Client(server.uri) as c:
        yield c


def events(days: int, per_day: int) -> pa.Table:
    """``per_day`` rows on each of ``days`` days from 2026-01-01, alternating two countries."""
    start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    ts = [start + datetime.timedelta(days=d, minutes=7 * i) for d in range(days) for i in range(per_day)]
    return pa.table({
        "id": pa.array(range(len(ts)), pa.int64()),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "country": pa.array(["NL" if i % 2 else "DE" for i in range(len(ts))], pa.string()),
    })


def by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_create_table_partitioned_by_day_and_country(client: fs.Client, table_name: str) -> None:
    data = events(3, 4)
    client.create_table(table_name, data.schema, partition_by=[{"column": "ts", "transform": "day"}, "country"])
    spec = [PartitionField("ts", "day"), PartitionField("country", "identity")]
    assert client.table_stats(table_name).partition_by == spec
    client.put_epoch(table_name, data, query_id="q", epoch_id=0)
    assert by_id(client.read(table_name)).equals(by_id(data))
    # A read filtered on a partition column returns that partition's rows.
    day2 = "ts >= '2026-01-02T00:00:00Z' and ts < '2026-01-03T00:00:00Z'"
    want = data.filter(pc.equal(pc.day(data.column("ts")), 2))
    assert by_id(client.read(table_name, filter=day2)).equals(by_id(want))
    assert by_id(client.read(table_name, filter="country = 'NL'")).column("id").to_pylist() == [
        i for i in range(12) if i % 2]
    # The spec survives the table's later versions.
    client.put_epoch(table_name, events(1, 2), query_id="q", epoch_id=1)
    assert client.table_stats(table_name).partition_by == spec


def test_write_creates_a_partitioned_table(client: fs.Client, table_name: str) -> None:
    data = events(2, 3)
    ack = client.write(table_name, data, create={"primary_key": ["id"], "partition_by": [
        {"column": "id", "transform": "bucket[4]"}, {"column": "ts", "transform": "month"}]})
    assert ack.status == "committed"
    stats = client.table_stats(table_name)
    assert stats.partition_by == [PartitionField("id", "bucket[4]"), PartitionField("ts", "month")]
    assert stats.primary_key == ["id"] and stats.rows == 6
    # put_epoch's create takes the same options.
    other = table_name + "_put"
    client.put_epoch(other, data, query_id="p", epoch_id=0, create={"partition_by": ["country"]})
    assert client.table_stats(other).partition_by == [PartitionField("country", "identity")]


@pytest.mark.parametrize("spec, names", [
    ([{"column": "nope", "transform": "day"}], "nope"),
    ([{"column": "country", "transform": "day"}], "country"),
    ([{"column": "id", "transform": "bucket[0]"}], "id"),
    (["country", "country"], "country"),
])
def test_a_spec_that_does_not_fit_creates_nothing(client: fs.Client, table_name: str, spec, names: str) -> None:
    data = events(1, 2)
    with pytest.raises(fs.InvalidRequestError) as e:
        client.create_table(table_name, data.schema, partition_by=spec)
    assert e.value.reason == "INVALID_PARTITION_SPEC" and e.value.metadata.get("column") == names, e.value
    with pytest.raises(fs.InvalidRequestError):
        client.write(table_name, data, create={"partition_by": spec})
    with pytest.raises(fs.TableNotFoundError):
        client.table_stats(table_name)


def test_partition_by_is_checked_before_sending(client: fs.Client, table_name: str) -> None:
    with pytest.raises(TypeError, match="partition_by must be a list"):
        client.create_table(table_name, events(1, 1).schema, partition_by="country")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a partition field"):
        client.create_table(table_name, events(1, 1).schema, partition_by=[3])  # type: ignore[list-item]


def test_a_write_past_the_partition_limit_commits_nothing(client: fs.Client, table_name: str) -> None:
    data = pa.table({"id": [1, 2, 3], "country": ["NL", "DE", "FR"]})
    client.create_table(table_name, data.schema, partition_by=["country"], max_partitions_per_write=2)
    before = client.table_stats(table_name).version
    with pytest.raises(fs.InvalidRequestError) as e:
        client.put_epoch(table_name, data, query_id="q", epoch_id=0)
    assert e.value.reason == "TOO_MANY_PARTITIONS", e.value
    assert client.table_stats(table_name).version == before and client.read(table_name).num_rows == 0
    assert client.put_epoch(table_name, data.slice(0, 2), query_id="q", epoch_id=0).status == "committed"
