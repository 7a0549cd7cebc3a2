"""The JVM connector's change feed stream (readChangeFeed) driven from PySpark, against a real
server: resumed from its checkpoint after driver SIGKILLs, it delivers every change once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

pyspark = pytest.importorskip("pyspark")

import flight_sink as fs
from sparkutil import epoch_commits

TESTS_DIR = Path(__file__).resolve().parent
KEYS = 20


def _feed(client: fs.Client, table: str) -> list:
    """(version, type, id, v) of every change of the table from version 1, as the server serves it."""
    return _rows(client.read_ticket(json.dumps({"table": table, "changes": {"from_version": 1}}).encode()))


def _rows(t: pa.Table) -> list:
    d = t.select(["_commit_version", "_change_type", "id", "v"]).to_pydict()
    return sorted(zip(d["_commit_version"], d["_change_type"], d["id"], d["v"]))


def test_change_feed_stream_survives_driver_sigkill(jar, server, tmp_path):
    """A keyed MemWAL table takes upsert epochs (keys repeated within a fold) and folds while a
    readChangeFeed stream copies its feed into another table; the driver (Python and JVM) is
    SIGKILLed twice mid-stream and restarted from its checkpoint, then drained with
    AvailableNow: the copy holds every change of the feed exactly once, in epochs committed once."""
    client = fs.Client(server.uri)
    src, dst, ckpt = "cf_kill_src", "cf_kill_dst", str(tmp_path / "ckpt")
    client.create_table(src, pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_key=["id"], memwal_shards=2)
    stop = threading.Event()
    errors: list = []

    def write() -> None:
        n = 0
        try:
            while not stop.is_set():
                ids = [(n * 7 + i) % KEYS for i in range(5)]
                client.put_epoch(src, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"e{n}" for _ in ids]}),
                                 query_id="cf-writer", epoch_id=n, mode="update")
                n += 1
                if n % 3 == 0:
                    client.action("flush_memwal", {"table": src})
                    client.action("fold_memwal_shard", {"table": src})
                time.sleep(0.05)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, str(TESTS_DIR / "cf_driver.py"), server.uri, src, dst, ckpt, jar]

    def commits() -> int:
        try:
            return len(epoch_commits(client, dst))
        except fs.TableNotFoundError:
            return 0

    kills = 0
    try:
        for more in (2, 2):
            want = commits() + more
            proc = subprocess.Popen(args + ["stream"], env=env, start_new_session=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 600
            while commits() < want:
                assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-4000:]
                assert time.monotonic() < deadline, "the stream committed too few epochs"
                assert not errors, errors
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)  # the Python driver and its JVM, mid-stream
            kills += 1
            proc.wait(30)
            proc.stdout.close()
    finally:
        stop.set()
        writer.join(60)
    assert not errors, errors
    client.action("flush_memwal", {"table": src})
    client.action("fold_memwal_shard", {"table": src})
    out = subprocess.run(args + ["available-now"], env=env, capture_output=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr).decode(errors="replace")[-4000:]
    assert kills == 2

    want = _feed(client, src)
    got = _rows(client.read(dst))
    assert any(t == "update_preimage" for _, t, _, _ in want), "the feed has upserts of existing keys"
    assert len(set(want)) == len(want)
    assert got == want, f"{len(got)} changes copied, {len(want)} in the feed"
    c = epoch_commits(client, dst)
    assert len(c) == len(set(c)), f"an epoch committed twice: {c}"
    assert len({q for q, _ in c}) == 1, "one query id across restarts"
