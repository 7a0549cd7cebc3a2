"""Fixtures: the real Go flight-sink server and a real local SparkSession.

The server binary comes from ``FLIGHT_SINK_BIN``; when it is unset the fixture builds
``./cmd/flight-sink`` from this repository with ``go build`` into a temporary directory. Each
server listens on a free loopback port (``--listen 127.0.0.1:0``, the bound address is read from
its "flight-sink serving" log line), keeps its tables in a temporary root and is stopped with
SIGTERM (then SIGKILL) at the end.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

from flight_sink.local_server import LocalServer, build_server

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parents[2]

# Executors (Python workers) must import helpers from this directory, and must run this very
# interpreter. Set before any SparkSession starts: workers inherit the JVM's environment.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")] if p
)
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def server_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of the flight-sink binary: $FLIGHT_SINK_BIN, or built from this repository."""
    env = os.environ.get("FLIGHT_SINK_BIN")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"FLIGHT_SINK_BIN={env} is not an executable file")
        return env
    return build_server(REPO_ROOT, tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def server(server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One server for the session, on a free loopback port with a temporary root."""
    srv = LocalServer.start(server_bin, tmp_path_factory.mktemp("root"))
    try:
        yield srv
    finally:
        code = srv.stop()
    assert code == 0, f"server exited with {code}:\n{srv.log()}"


@pytest.fixture
def server_factory(server_bin: str, tmp_path: Path) -> Iterator[Callable[..., LocalServer]]:
    """Start extra servers (own root) for a test; all are stopped at its end."""
    started: List[LocalServer] = []

    def factory(
        listen: str = "127.0.0.1:0",
        extra_args: Optional[List[str]] = None,
        root: Optional[Path] = None,
    ) -> LocalServer:
        root = root if root is not None else tmp_path / f"root{len(started)}"
        srv = LocalServer.start(server_bin, root, listen, extra_args or ())
        started.append(srv)
        return srv

    yield factory
    for srv in started:
        srv.stop()


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_counter = [0]


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> str:
    """A table name unique within the session."""
    _counter[0] += 1
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:80]
    return f"{base}_{_counter[0]}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """A local SparkSession: 2 cores, a task may fail once and be retried (local[2,2])."""
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("flight-sink-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.schemaInference", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"PySpark {pyspark.__version__}, Spark {session.version}")
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()
