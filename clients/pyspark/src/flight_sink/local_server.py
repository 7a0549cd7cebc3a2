"""Run a local flight-sink server from Python: for tests, examples and benchmarks.

::

    from flight_sink.local_server import LocalServer

    with LocalServer.start("/path/to/flight-sink", root="/tmp/tables") as srv:
        print(srv.uri)          # grpc://127.0.0.1:<free port>

The server listens on a free loopback port (``--listen 127.0.0.1:0``); the bound address is read
from its ``flight-sink serving ... addr=...`` log line. :meth:`LocalServer.stop` sends SIGTERM
(the server drains in-flight calls) and kills it if it has not exited in time.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional, Union

from .errors import ClientError

__all__ = ["LocalServer", "build_server"]

_SERVING_RE = re.compile(r"flight-sink serving.*?addr=(\S+)")


def build_server(repo_root: Union[str, Path], out_dir: Optional[Union[str, Path]] = None) -> str:
    """``go build ./cmd/flight-sink`` in a flight-sink checkout; returns the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise ClientError("`go` is not on PATH: install Go or point to a built flight-sink binary")
    out_dir = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="flight-sink-bin-"))
    out = out_dir / "flight-sink"
    subprocess.run([go, "build", "-o", str(out), "./cmd/flight-sink"], cwd=str(repo_root), check=True)
    return str(out)


class LocalServer:
    """A ``flight-sink serve`` child process."""

    def __init__(self, proc: subprocess.Popen[bytes], addr: str, root: Union[str, Path], log_path: Path) -> None:
        self.proc = proc
        self.addr = addr
        self.root = root
        self.log_path = log_path

    @classmethod
    def start(
        cls,
        binary: str,
        root: Optional[Union[str, Path]] = None,
        listen: str = "127.0.0.1:0",
        extra_args: Sequence[str] = (),
        timeout: float = 30.0,
        env: Optional[Mapping[str, str]] = None,
    ) -> LocalServer:
        """Start the server and wait until it serves.

        Args:
            binary: the flight-sink executable.
            root: the table root directory (default: a new temporary directory), created when
                missing; or an object-store URI (``s3://bucket/prefix``, a ``str``), passed on
                as is (give the server its ``--s3-*`` flags in ``extra_args`` and its
                credentials in ``env``).
            listen: the listen address; port 0 picks a free port.
            extra_args: more ``serve`` flags, e.g. ``["--auth-token", "secret"]``.
            timeout: seconds to wait for the "flight-sink serving" line.
            env: ``FLIGHT_SINK_*`` settings for the server. The caller's own ``FLIGHT_SINK_*``
                variables are not passed on, and the HTTP endpoint (/metrics, /healthz) is off
                unless ``FLIGHT_SINK_HTTP_LISTEN`` is given here, so that several servers can
                run side by side. The server must log at info level (the default).
        """
        if not (isinstance(root, str) and "://" in root):
            root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="flight-sink-root-"))
            root.mkdir(parents=True, exist_ok=True)
        fd, log_name = tempfile.mkstemp(prefix="flight-sink-", suffix=".log")
        log_path = Path(log_name)
        cmd: list[str] = [binary, "serve", "--listen", listen, "--root", str(root), *extra_args]
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHT_SINK_")}
        child_env["FLIGHT_SINK_HTTP_LISTEN"] = "off"
        child_env.update(env or {})
        try:
            proc = subprocess.Popen(
                cmd, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env
            )
        finally:
            os.close(fd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            m = _SERVING_RE.search(text)
            if m:
                return cls(proc, m.group(1).strip('"'), root, log_path)
            if proc.poll() is not None:
                raise ClientError(f"flight-sink exited with {proc.returncode}:\n{text}")
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        raise ClientError(f"flight-sink did not start within {timeout}s:\n{log_path.read_text()}")

    @property
    def uri(self) -> str:
        """``grpc://host:port`` of the server."""
        return f"grpc://{self.addr}"

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.addr.rsplit(":", 1)[1])

    def log(self) -> str:
        """Everything the server logged so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
