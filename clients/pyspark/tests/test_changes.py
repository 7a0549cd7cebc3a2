"""The change feed through the client (Client.changes, Client.follow_changes) against the real
server: what each kind of version contributes, columns and filters, following new versions,
and a range cleanup removed."""

from __future__ import annotations

import threading
import time
from itertools import islice
from typing import Dict, Iterator, List, Tuple

import pyarrow as pa
import pytest

import flight_sink as fs

CHANGE_COLUMNS = ["_change_type", "_commit_version", "_commit_timestamp"]


@pytest.fixture
def client(server) -> Iterator[fs.Client]:
    with fs.Client(server.uri) as c:
        yield c


def rows(ids: List[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"{tag}{i}" for i in ids], pa.string())})


def triples(t: pa.Table) -> List[Tuple[int, str, int]]:
    """(version, change type, id) of each row, in the feed's order."""
    return list(zip(t.column("_commit_version").to_pylist(), t.column("_change_type").to_pylist(),
                    t.column("id").to_pylist()))


def replay(feed: pa.Table, upto: int) -> Dict[int, str]:
    """The keyed table's rows {id: v} after applying the feed's versions up to ``upto``."""
    out: Dict[int, str] = {}
    for r in feed.to_pylist():
        if r["_commit_version"] > upto:
            break
        if r["_change_type"] in ("delete", "update_preimage"):
            assert out.pop(r["id"]) == r["v"], r
        else:
            assert r["id"] not in out, r
            out[r["id"]] = r["v"]
    return out


def keyed_history(client: fs.Client, table: str) -> Dict[str, int]:
    """A keyed table through an append, an upsert of an old and a new key, a delete and a
    compaction; the version of each."""
    client.create_table(table, rows([0], "").schema, primary_key=["id"])
    v = {"append": client.put_epoch(table, rows([1, 2, 3], "a"), query_id="q", epoch_id=0).version}
    v["upsert"] = client.put_epoch(table, rows([1, 9], "u"), query_id="q", epoch_id=1, mode="update").version
    v["delete"] = client.delete(table, "id = 2").version
    compacted = client.compact(table, target_rows_per_fragment=1_000)
    assert compacted.version is not None
    v["compact"] = compacted.version
    return v


def test_changes_of_every_kind_of_version(client: fs.Client, table_name: str) -> None:
    v = keyed_history(client, table_name)
    feed = client.changes(table_name, v["append"])
    assert feed.column_names == ["id", "v", *CHANGE_COLUMNS]
    assert feed.schema.field("_commit_version").type == pa.int64()
    assert feed.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    a, u, d = v["append"], v["upsert"], v["delete"]
    assert sorted(triples(feed)) == sorted([
        (a, "insert", 1), (a, "insert", 2), (a, "insert", 3),
        (u, "update_preimage", 1), (u, "update_postimage", 1), (u, "insert", 9),
        (d, "delete", 2),
    ]), "the compaction contributes nothing"
    # By version, and in each version deletes and pre-images before inserts and post-images.
    order = [(ver, kind not in ("delete", "update_preimage")) for ver, kind, _ in triples(feed)]
    assert order == sorted(order), triples(feed)
    deleted = feed.filter(pa.compute.equal(feed.column("_change_type"), "delete")).to_pylist()
    assert [(r["id"], r["v"]) for r in deleted] == [(2, "a2")], "a delete carries the whole old row"
    # Replaying the feed gives the table at every version.
    for ver in (a, u, d, v["compact"]):
        got = replay(feed, ver)
        want = client.read(table_name, version=ver)
        assert got == dict(zip(want.column("id").to_pylist(), want.column("v").to_pylist())), ver
    # A bounded range, and columns with a filter.
    assert {k for _, k, _ in triples(client.changes(table_name, a, a))} == {"insert"}
    narrow = client.changes(table_name, a, columns=["id"], filter="id = 1")
    assert narrow.column_names == ["id", *CHANGE_COLUMNS]
    assert sorted(narrow.column("_change_type").to_pylist()) == ["insert", "update_postimage", "update_preimage"]
    # A from_version past the latest is an empty feed; a to_version past it is refused.
    assert client.changes(table_name, v["compact"] + 1).num_rows == 0
    with pytest.raises(fs.NotFoundError) as e:
        client.changes(table_name, a, v["compact"] + 5)
    assert e.value.reason == "VERSION_NOT_FOUND"
    with pytest.raises(fs.InvalidRequestError):
        client.changes(table_name, 0)


def test_follow_changes_yields_each_new_version(client: fs.Client, table_name: str) -> None:
    v = keyed_history(client, table_name)
    follow = client.follow_changes(table_name, v["append"], poll=0.05)
    # The versions already there: one table per version that changed rows (not the compaction).
    first = list(islice(follow, 3))
    assert [t.column("_commit_version").unique().to_pylist() for t in first] == [
        [v["append"]], [v["upsert"]], [v["delete"]]]
    # A version committed while the follower waits reaches it.
    got: List[pa.Table] = []
    waiter = threading.Thread(target=lambda: got.append(next(follow)), daemon=True)
    waiter.start()
    ack = client.put_epoch(table_name, rows([7], "n"), query_id="q", epoch_id=2)
    waiter.join(timeout=120)
    assert not waiter.is_alive(), "follow_changes did not yield the new version"
    assert triples(got[0]) == [(ack.version, "insert", 7)]
    with pytest.raises(fs.InvalidArgumentError):
        next(client.follow_changes(table_name, 1, poll=0))


def test_changes_of_a_cleaned_up_range(client: fs.Client, table_name: str) -> None:
    client.write(table_name, rows([1], "a"))
    client.write(table_name, rows([2], "b"))
    client.write(table_name, rows([3], "c"))
    latest = client.table_stats(table_name).version
    time.sleep(1.2)  # every version but the newest is then superseded for over a second
    assert client.cleanup(table_name, older_than_seconds=1, keep_last=1).versions_removed
    with pytest.raises(fs.NotFoundError) as e:
        client.changes(table_name, 1)
    assert e.value.reason == "CHANGES_UNAVAILABLE"
    # Only the latest version is kept: the changes after it are the only ones readable.
    assert e.value.metadata["oldest_version"] == str(latest + 1)
    assert client.changes(table_name, latest + 1).num_rows == 0
