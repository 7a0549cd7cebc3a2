"""examples/pyspark_stream.py runs against a server, and a second run resumes exactly once."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pyarrow as pa

import flight_sink as fs

from conftest import REPO_ROOT

pytest.importorskip("pyspark")


def test_example_stream_runs_and_resumes(server, tmp_path, table_name):
    cmd = [
        sys.executable, str(REPO_ROOT / "examples" / "pyspark_stream.py"),
        "--uri", server.uri, "--table", table_name, "--checkpoint", str(tmp_path / "ckpt"),
        "--batches", "2", "--rows-per-batch", "500", "--trigger-seconds", "0.2",
    ]
    for run in range(2):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"run {run}:\n{out.stdout}\n{out.stderr[-3000:]}"
        assert "exactly once" in out.stdout
        # The query stops quietly: no stream thread dying with a JVM stack trace.
        assert "Exception in thread" not in out.stderr and "\tat " not in out.stderr, out.stderr[-3000:]
    stats = fs.Client(server.uri).table_stats(table_name)
    assert stats.rows >= 4 * 500 and len(stats.streams) == 1


def test_examples_run_in_any_order_against_one_server(server_factory, tmp_path):
    """The README's order: the Go producer, then the Spark job, both with their defaults.

    Each example writes its own table, so neither trips over the other's schema.
    """
    srv = server_factory()
    addr = srv.uri.removeprefix("grpc://")
    go = subprocess.run(["go", "run", "./examples/go-producer", "-addr", addr],
                        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert go.returncode == 0, go.stderr[-3000:]
    spark = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "pyspark_stream.py"), "--uri", srv.uri,
         "--checkpoint", str(tmp_path / "ckpt"), "--batches", "1", "--rows-per-batch", "100",
         "--trigger-seconds", "0.2"],
        capture_output=True, text=True, timeout=300)
    assert spark.returncode == 0, spark.stderr[-3000:]
    client = fs.Client(srv.uri)
    assert client.table_stats("go_events").rows > 0
    assert client.table_stats("spark_events").rows >= 100


def test_example_failure_is_one_line(server, tmp_path, table_name):
    """A failed run says why in one line (the server's reason), not in pages of stack traces."""
    fs.Client(server.uri).create_table(table_name, pa.schema([("id", pa.string())]))
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "pyspark_stream.py"), "--uri", server.uri,
         "--table", table_name, "--checkpoint", str(tmp_path / "ckpt"), "--batches", "1",
         "--rows-per-batch", "10", "--trigger-seconds", "0.2"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("pyspark_stream:")]
    assert len(lines) == 1, out.stderr[-3000:]
    assert "SchemaMismatchError" in lines[0] and "id" in lines[0], lines[0]
    assert "Traceback" not in out.stderr and "\tat org.apache" not in out.stderr, out.stderr[-3000:]
