"""Helpers for the Spark tests (the Python data source's and the JVM connector's). Executors import
this module (tests/ is on their PYTHONPATH)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
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


TESTS_DIR = Path(__file__).resolve().parent


def check_driver_sigkill(
    uri: str, table: str, ckpt: Path, jar: Optional[str] = None, rows_per_batch: int = 50, catalog: bool = False
) -> None:
    """Run ds_driver.py (the Python data source, or the JVM connector when jar is given, by table
    name through the jar's catalog when catalog is true), SIGKILL
    its process group (Python and JVM) twice mid-stream and restart it from the same checkpoint,
    then assert: every row exactly once, every epoch whole or not at all, epochs in order under
    the one query id that survives the restarts."""
    client = fs.Client(uri)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    kills = 0

    def run(until: int, kill: bool) -> None:
        nonlocal kills
        args = [sys.executable, str(TESTS_DIR / "ds_driver.py"), uri, table, str(ckpt), str(rows_per_batch), str(until)]
        extra = ([jar] if jar else []) + (["catalog"] if catalog else [])
        proc = subprocess.Popen(args + extra, env=env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if not kill:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out.decode(errors="replace")[-4000:]
            return
        deadline = time.monotonic() + 600
        while True:
            try:
                if len(epoch_commits(client, table)) >= until:
                    break
            except fs.TableNotFoundError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the driver committed too few epochs"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the Python driver and its JVM, mid-stream
        kills += 1
        proc.wait(30)
        proc.stdout.close()

    run(until=2, kill=True)
    first = len(epoch_commits(client, table))
    run(until=first + 1, kill=True)
    second = len(epoch_commits(client, table))
    run(until=second + 2, kill=False)
    assert kills == 2

    ids = table_ids(client, table)
    commits = epoch_commits(client, table)
    assert len(commits) == len(set(commits)), f"an epoch committed twice: {commits}"
    assert len({q for q, _ in commits}) == 1, f"one query id across restarts: {commits}"
    assert sorted(e for _, e in commits) == list(range(len(commits))), "epochs in order, none lost"
    assert len(ids) == len(set(ids)), "a row landed twice"
    per_batch = Counter(i // rows_per_batch for i in ids)
    assert set(per_batch) == set(range(len(commits))), "rows of uncommitted epochs are visible"
    assert set(per_batch.values()) == {rows_per_batch}, "a partial epoch is visible"
    assert sorted(ids) == list(range(len(commits) * rows_per_batch)), "every row exactly once"
