"""Fixtures for the JVM connector's PySpark tests: the connector jar, a real server.

The jar is ``FLIGHT_SINK_SPARK_JAR`` or clients/spark/target/flight-sink-spark-*.jar (build it
with ``make spark-jar``); the server binary is ``FLIGHT_SINK_BIN`` or built from this checkout.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import pytest

from flight_sink.local_server import LocalServer, build_server

TESTS_DIR = Path(__file__).resolve().parent
SPARK_DIR = TESTS_DIR.parent
REPO_ROOT = SPARK_DIR.parents[1]

# The Spark test helpers (sparkutil, ds_driver.py) are the Python client's: one copy for both.
sys.path.insert(0, str(REPO_ROOT / "clients" / "pyspark" / "tests"))

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def jar() -> str:
    env = os.environ.get("FLIGHT_SINK_SPARK_JAR")
    if env:
        return env
    jars = sorted(glob.glob(str(SPARK_DIR / "target" / "flight-sink-spark-*.jar")))
    if not jars:
        pytest.fail("no clients/spark/target/flight-sink-spark-*.jar: run `make spark-jar` first")
    return jars[-1]


@pytest.fixture(scope="session")
def server_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    env = os.environ.get("FLIGHT_SINK_BIN")
    if env:
        return env
    return build_server(REPO_ROOT, tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def server(server_bin: str, tmp_path_factory: pytest.TempPathFactory):
    srv = LocalServer.start(server_bin, tmp_path_factory.mktemp("root"))
    try:
        yield srv
    finally:
        code = srv.stop()
    assert code == 0, f"server exited with {code}:\n{srv.log()}"
