"""Fixtures: the real Go flight-sink server and a real local SparkSession.

The server binary comes from ``FLIGHT_SINK_BIN``; when it is unset the fixture builds
``./cmd/flight-sink`` from this repository with ``go build`` into a temporary directory. Each
server listens on a free loopback port (``--listen 127.0.0.1:0``, the bound address is read from
its "flight-sink serving" log line), keeps its tables in a temporary root and is stopped with
SIGTERM (then SIGKILL) at the end.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Union

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
        root: Optional[Union[str, Path]] = None,
        env: Optional[Dict[str, str]] = None,
    ) -> LocalServer:
        root = root if root is not None else tmp_path / f"root{len(started)}"
        srv = LocalServer.start(server_bin, root, listen, extra_args or (), env=env)
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


@dataclass(frozen=True)
class S3Gateway:
    """A running versitygw (a real S3 server over a temporary directory) with one bucket."""

    endpoint: str  # http://127.0.0.1:PORT
    bucket: str
    region: str
    access_key: str
    secret_key: str

    def server_args(self) -> List[str]:
        """The ``serve`` flags that reach this gateway (with :meth:`env`'s credentials)."""
        return ["--s3-endpoint", self.endpoint, "--s3-path-style", "--s3-region", self.region]

    def env(self) -> Dict[str, str]:
        """The AWS credentials of the gateway's root user, for a server or CLI process."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": "",
            "AWS_REGION": self.region,
        }


def find_versitygw() -> Optional[str]:
    """$FLIGHT_SINK_VERSITYGW, versitygw on PATH, or $(go env GOPATH)/bin/versitygw (where
    `make tools` installs it, as objstore/storetest looks for it)."""
    env = os.environ.get("FLIGHT_SINK_VERSITYGW")
    if env:
        return env
    found = shutil.which("versitygw")
    if found:
        return found
    gopath = os.environ.get("GOPATH", "")
    if not gopath and shutil.which("go"):
        gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
    for d in [*(p for p in gopath.split(os.pathsep) if p), str(Path.home() / "go")]:
        p = Path(d) / "bin" / "versitygw"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


@pytest.fixture
def s3_gateway() -> Iterator[S3Gateway]:
    """A versitygw on a free loopback port with the bucket "flight-sink", stopped and removed at
    the end. Skips when versitygw is not installed (`make tools` installs it), except under
    CI=true, where that fails."""
    binary = find_versitygw()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("versitygw not found (FLIGHT_SINK_VERSITYGW, PATH, $(go env GOPATH)/bin): `make tools` installs it")
        pytest.skip("versitygw not found (FLIGHT_SINK_VERSITYGW, PATH, $(go env GOPATH)/bin): `make tools` installs it")
    tmp = Path(tempfile.mkdtemp(prefix="flight-sink-s3-"))
    data = tmp / "data"
    bucket = "flight-sink"
    (data / bucket).mkdir(parents=True)  # the posix backend's buckets are the data directory's directories
    args = ["--quiet", "posix"]
    try:
        os.setxattr(data, "user.flight-sink-probe", b"1")
    except OSError:
        # No user xattrs here (tmpfs, some overlays): object metadata goes to a sidecar directory.
        (tmp / "sidecar").mkdir()
        args += ["--sidecar", str(tmp / "sidecar")]
    gw = S3Gateway(
        endpoint="", bucket=bucket, region="us-east-1", access_key="flightsink", secret_key=secrets.token_hex(16)
    )
    proc: Optional["subprocess.Popen[bytes]"] = None
    log = open(tmp / "versitygw.log", "wb")
    try:
        for _ in range(3):  # a port free a moment ago may be taken before versitygw binds it
            port = free_port()
            env = dict(os.environ, ROOT_ACCESS_KEY=gw.access_key, ROOT_SECRET_KEY=gw.secret_key)
            proc = subprocess.Popen(
                [binary, "--port", f"127.0.0.1:{port}", *args, str(data)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except urllib.error.HTTPError:
                    break  # it answers (403 without credentials)
                except OSError:
                    time.sleep(0.1)
            else:
                proc.kill()
                proc.wait()
                proc = None
                continue
            break
        if proc is None:
            pytest.fail(f"versitygw ({binary}) did not start:\n{(tmp / 'versitygw.log').read_text(errors='replace')}")
        yield S3Gateway(f"http://127.0.0.1:{port}", bucket, gw.region, gw.access_key, gw.secret_key)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def find_trino() -> Optional[Path]:
    """The Trino installation clients/pyspark/tools/trino_install.sh made: $FLIGHT_SINK_TRINO, else
    ~/.cache/flight-sink/trino-server-476 (the script's default); None when it is not there."""
    d = Path(os.environ.get("FLIGHT_SINK_TRINO") or Path.home() / ".cache/flight-sink/trino-server-476")
    if (d / "bin" / "launcher").is_file() and (d / "plugin" / "iceberg").is_dir() and (d / "java-home").is_file():
        return d
    return None


TRINO_MISSING = "Trino not found (FLIGHT_SINK_TRINO or ~/.cache/flight-sink/trino-server-476): `make trino` installs it"


@pytest.fixture(scope="session")
def trino(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Optional[str]]:
    """A Trino server (``http://127.0.0.1:PORT``) with the Iceberg connector and dynamic catalogs
    (a test makes its own with CREATE CATALOG), one for the session, stopped at its end. None
    when Trino is not installed (`make trino` installs it): the test checks its other engines,
    then skips with TRINO_MISSING; under CI=true a missing Trino fails."""
    home = find_trino()
    if home is None:
        if os.environ.get("CI") == "true":
            pytest.fail(TRINO_MISSING)
        yield None
        return
    java_home = (home / "java-home").read_text().strip()
    tmp = tmp_path_factory.mktemp("trino")
    etc, data = tmp / "etc", tmp / "data"
    etc.mkdir()
    port = free_port()
    (etc / "config.properties").write_text(
        "coordinator=true\n"
        "node-scheduler.include-coordinator=true\n"
        f"http-server.http.port={port}\n"
        f"discovery.uri=http://127.0.0.1:{port}\n"
        "catalog.management=dynamic\n"
    )
    (etc / "node.properties").write_text(f"node.environment=flightsink\nnode.id=test\nnode.data-dir={data}\n")
    (etc / "jvm.config").write_text(
        "-server\n-Xmx1G\n-XX:+UseG1GC\n-XX:+ExitOnOutOfMemoryError\n-XX:-OmitStackTraceInFastThrow\n"
        "-Djdk.attach.allowAttachSelf=true\n-XX:+EnableDynamicAgentLoading\n-Dfile.encoding=UTF-8\n"
    )
    (etc / "log.properties").write_text("io.trino=WARN\n")
    env = dict(os.environ, JAVA_HOME=java_home, PATH=f"{java_home}/bin:{os.environ.get('PATH', '')}")
    log_path = tmp / "trino.log"
    log = open(log_path, "wb")
    server = f"http://127.0.0.1:{port}"
    # The launcher replaces itself with the JVM: the process started here is Trino's.
    proc = subprocess.Popen(
        [str(home / "bin" / "launcher"), "run", f"--etc-dir={etc}", f"--data-dir={data}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
    )
    try:
        started = time.monotonic()
        deadline = started + 300  # a cold start on a loaded 2-core machine
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Trino exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-5000:]}")
            try:
                with urllib.request.urlopen(f"{server}/v1/info", timeout=2) as r:
                    if not json.load(r).get("starting", True):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Trino did not start in 300 s:\n{log_path.read_text(errors='replace')[-5000:]}")
            time.sleep(0.5)
        print(f"Trino {home.name} started in {time.monotonic() - started:.1f} s")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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
