"""The typed results decode the server's JSON strictly by type and keep what they do not know."""

from __future__ import annotations

import datetime

import pytest

import flight_sink as fs
from flight_sink.results import HistoryEntry, ShardStats, TableStats, parse_timestamp


def test_nested_results_decode_with_their_types() -> None:
    stats = TableStats.from_json({
        "format_version": 1, "table": "t", "version": 7, "rows": 3, "primary_key": ["id"],
        "streams": {"q": {"epoch": 4, "version": 7, "timestamp": "2026-12-06T07:44:48.123456789Z"}},
        "memwal": {"shards": [{"shard": "a-b", "memtable_rows": 2}], "merged_generations": {"a-b": 3}},
        "schema": [{"id": 1, "name": "s", "type": "struct", "nullable": True,
                    "fields": [{"id": 2, "name": "x", "type": "int64", "nullable": False}]}],
        "partition_by": [{"column": "ts", "transform": "day"}],
        "a_field_from_a_newer_server": {"any": "thing"},
    })
    assert stats.version == 7 and stats.primary_key == ["id"] and stats.iceberg is None
    w = stats.streams["q"]
    assert w.epoch == 4 and w.timestamp == datetime.datetime(2026, 12, 6, 7, 44, 48, 123456, datetime.timezone.utc)
    assert stats.memwal is not None and stats.memwal.shards == [ShardStats(shard="a-b", memtable_rows=2)]
    assert stats.memwal.merged_generations == {"a-b": 3}
    assert stats.schema[0].fields[0].name == "x" and stats.schema[0].fields[0].nullable is False
    assert stats.partition_by[0].column == "ts" and stats.partition_by[0].transform == "day"
    assert stats.raw["a_field_from_a_newer_server"] == {"any": "thing"}


@pytest.mark.parametrize("bad", [
    {"version": "7"}, {"version": 7.5}, {"version": True}, {"primary_key": "id"},
    {"streams": {"q": {"epoch": None, "timestamp": "yesterday"}}}, {"memwal": []},
])
def test_a_field_of_the_wrong_type_is_a_protocol_error(bad: dict) -> None:
    with pytest.raises(fs.ProtocolError) as e:
        TableStats.from_json(bad)
    assert "TableStats." in str(e.value)


def test_not_an_object_is_a_protocol_error() -> None:
    for v in (None, [], "x", 3):
        with pytest.raises(fs.ProtocolError):
            HistoryEntry.from_json(v)
    with pytest.raises(fs.ProtocolError, match="without a status"):
        fs.Ack.from_json({"table": "t"})


def test_absent_and_null_fields_take_their_defaults() -> None:
    h = HistoryEntry.from_json({"version": 3, "missing": True, "timestamp": None})
    assert (h.version, h.missing, h.timestamp, h.operation, h.properties) == (3, True, None, "", {})


@pytest.mark.parametrize("text, micros", [
    ("2026-12-06T07:44:48Z", 0), ("2026-12-06T07:44:48.5Z", 500000),
    ("2026-12-06T07:44:48.123456789Z", 123456), ("2026-12-06T07:44:48.1+02:00", 100000),
])
def test_timestamps(text: str, micros: int) -> None:
    ts = parse_timestamp(text)
    assert ts.microsecond == micros and ts.tzinfo is not None


def test_every_error_is_a_flight_sink_error() -> None:
    """The exception classes the package exports all derive from FlightSinkError, the
    client-side ones included."""
    for name in fs.__all__:
        obj = getattr(fs, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, fs.FlightSinkError), name
    with pytest.raises(fs.FlightSinkError):
        fs.Client("localhost:8815")  # no scheme
    with pytest.raises(fs.FlightSinkError):
        fs.RetryPolicy(max_attempts=0)
