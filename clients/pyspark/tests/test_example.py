"""examples/pyspark_stream.py runs against a server, and a second run resumes exactly once."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
    stats = fs.Client(server.uri).table_stats(table_name)
    assert stats["rows"] >= 4 * 500 and len(stats["streams"]) == 1
