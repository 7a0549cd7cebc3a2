"""Helpers for the Spark tests. Executors import this module (tests/ is on their PYTHONPATH)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable, List, Optional, Set, Tuple

import flight_sink as fs

SCHEMA = "id long, k string, v long"


def write_json_file(directory: Path, index: int, ids: Iterable[int]) -> None:
    """Write one input file atomically (written aside, then renamed into the watched dir)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".tmp-{directory.name}-{index}.json"
    with open(tmp, "w") as f:
        for i in ids:
            f.write(json.dumps({"id": i, "k": f"k{i % 5}", "v": i}) + "\n")
    os.replace(tmp, directory / f"part-{index:05d}.json")
    time.sleep(0.02)  # distinct modification times keep the file source's order


def fail_first_attempt_of_partition_1(pid: int, attempt: int, ack: "fs.Ack") -> None:
    """Task hook: fail attempt 0 of partition 1 right after its DoPut was acknowledged."""
    if pid == 1 and attempt == 0:
        raise RuntimeError(f"injected failure after staging partition 1 attempt 0 ({ack.stage})")


def table_ids(client: fs.Client, table: str) -> List[int]:
    return client.read(table, columns=["id"]).column("id").to_pylist()


def epoch_commits(client: fs.Client, table: str, query_id: Optional[str] = None) -> List[Tuple[str, int]]:
    """(query_id, epoch_id) of every epoch commit in the table's history, oldest first."""
    out = []
    for h in reversed(client.history(table, limit=10000)):
        p = h.get("properties") or {}
        q = p.get("flight_sink.streaming.query_id")
        if q is not None and (query_id is None or q == query_id):
            out.append((q, int(p["flight_sink.streaming.epoch_id"])))
    return out


def assert_exactly_once(client: fs.Client, table: str, expected: Set[int]) -> None:
    ids = table_ids(client, table)
    dupes = len(ids) - len(set(ids))
    assert dupes == 0, f"{dupes} duplicated rows"
    missing = expected - set(ids)
    extra = set(ids) - expected
    assert not missing and not extra, f"missing {sorted(missing)[:10]}, extra {sorted(extra)[:10]}"
    commits = epoch_commits(client, table)
    assert len(commits) == len(set(commits)), f"an epoch was committed twice: {commits}"


def fail_first_close_of_partition_1(pid: int, epoch: int, ack: "fs.Ack") -> None:
    """Foreach close hook: fail attempt 0 of partition 1 right after its epoch was acknowledged."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if pid == 1 and ctx is not None and ctx.attemptNumber() == 0:
        raise RuntimeError(f"injected failure after landing epoch {epoch} of partition 1 ({ack.status})")
