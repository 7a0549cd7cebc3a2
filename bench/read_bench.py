#!/usr/bin/env python3
"""Reading the large-batch table: flight-sink's client against pylance, PyIceberg and
pyarrow.parquet on the same rows, in interleaved rounds, wall and CPU time.

`make bench-reads` runs this. It uses a virtualenv (default ~/.cache/flight-sink/read-bench-venv,
or $FLIGHT_SINK_READ_BENCH_VENV) made with the system's site packages plus pylance
(bench/requirements.txt), pyiceberg and polars (clients/pyspark/requirements-test.txt), builds
the server with `go build`, starts it on a free loopback port over a temporary root with
`--endpoint-bytes` small enough for one endpoint per fragment, writes --epochs epochs of
--batches x --batch-rows rows of bench/peers.py's 8-column schema (the large-batch workload: each
epoch one fragment) and the same rows as a Lance dataset, publishes the table's Iceberg metadata
and then reads it with

  Client.read direct          Client.read(table, direct=True): GetFlightInfo hands out the data
                              files, pyarrow reads them in parallel (docs/protocol.md, Direct reads)
  Client.read DoGet           Client.read(table, direct=False): one DoGet
  Client.read DoGet parallel  Client.read(table, direct=False, parallel=N): N threads over the
                              GetFlightInfo endpoints, each one DoGet
  pylance                     lance.dataset(uri).to_table()
  pyiceberg                   the server's REST catalog (/iceberg): load_table(...).scan().to_arrow()
  pyarrow.parquet             pyarrow.parquet.read_table(the data files of the version read, as
                              the direct GetFlightInfo lists them)

--rounds times, each round every reader once in a rotated order (so load that shifts during the
run hits every reader alike). For each reader it prints the median wall seconds, the client's
CPU seconds (this process's rusage: user + system, every thread) and the server's (its
/proc/<pid>/stat utime + stime; the flight-sink readers and PyIceberg's catalog calls use the
server), and the ratios against pylance, PyIceberg and pyarrow.parquet (higher is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO / "clients" / "pyspark" / "src"))
import peers  # noqa: E402  (data, processes and the pins of bench/requirements.txt)

VENV = Path(os.environ.get("FLIGHT_SINK_READ_BENCH_VENV", Path.home() / ".cache/flight-sink/read-bench-venv"))
TEST_REQUIREMENTS = REPO / "clients" / "pyspark" / "requirements-test.txt"


def test_pin(name: str) -> str:
    """The requirement line of ``name`` in clients/pyspark/requirements-test.txt."""
    for line in TEST_REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(name):
            return line
    return name


def bootstrap() -> None:
    """Re-exec inside VENV (system site packages + pylance, pyiceberg) unless they import."""
    try:
        import lance  # noqa: F401
        import numpy  # noqa: F401
        import pyiceberg  # noqa: F401
        import google.rpc  # noqa: F401
        return
    except ImportError:
        pass
    if Path(sys.prefix).resolve() == VENV.resolve():
        raise SystemExit(f"{VENV} lacks lance, numpy or pyiceberg even after installing them")
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    pin = peers.pinned()["pylance"]
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"pylance=={pin}", "numpy",
                    test_pin("pyiceberg"), test_pin("googleapis-common-protos"), test_pin("protobuf")], check=True)
    os.execv(str(py), [str(py), str(Path(__file__).resolve())] + sys.argv[1:])


def client_cpu() -> float:
    """CPU seconds this process has used (user + system, all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (user + system), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command: state is field 3, utime field 14, stime field 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved_medians(readers: Dict[str, Callable[[], Any]], server_pid: Callable[[str], Optional[int]],
                        rounds: int, rows: int) -> Dict[str, Tuple[float, float, float]]:
    """Run every reader once per round, rotating the order each round so load shifts fall on all of
    them; check each read returned ``rows`` rows. Returns per reader the medians of (wall, client
    CPU, server CPU) seconds; server CPU is that of the process ``server_pid(name)`` (0 if None)."""
    names = list(readers)
    samples: Dict[str, List[Tuple[float, float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            pid = server_pid(name)
            s0, c0, t0 = process_cpu(pid) if pid else 0.0, client_cpu(), time.perf_counter()
            out = readers[name]()
            t1, c1, s1 = time.perf_counter(), client_cpu(), process_cpu(pid) if pid else 0.0
            assert out.num_rows == rows, (name, out.num_rows, rows)
            del out
            samples[name].append((t1 - t0, c1 - c0, s1 - s0))
    return {n: tuple(statistics.median(x[i] for x in samples[n]) for i in range(3)) for n in names}  # type: ignore[misc]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4, help="epochs (one fragment each)")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-rows", type=int, default=65536)
    ap.add_argument("--parallel", type=int, default=4, help="threads reading the endpoints")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (every reader once each)")
    ap.add_argument("--data-codec", default=None,
                    help="create the table with this data_codec table option (docs/protocol.md; default: the server's)")
    ap.add_argument("--go", default=shutil.which("go") or "go")
    ap.add_argument("--server-bin", default=None, help="a built flight-sink to measure (default: go build this checkout)")
    args = ap.parse_args()
    bootstrap()

    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq

    import flight_sink
    from pyiceberg.catalog import load_catalog

    work = Path(tempfile.mkdtemp(prefix="flight-sink-read-bench-"))
    server = None
    try:
        binary = Path(args.server_bin) if args.server_bin else work / "flight-sink"
        if not args.server_bin:
            peers.go_build(args.go, binary, "./cmd/flight-sink")
        addr = f"127.0.0.1:{peers.free_port()}"
        http_addr = f"127.0.0.1:{peers.free_port()}"
        root = work / "root"
        server = peers.Proc("flight-sink", [str(binary), "serve", "--listen", addr, "--http-listen", http_addr,
                                            "--root", str(root), "--maintenance", "off",
                                            "--endpoint-bytes", "1"], work / "server.log")
        peers.wait_flight(addr, server)
        client = flight_sink.Client(f"grpc://{addr}")
        lance_uri = str(work / "lance.lance")
        nbytes = 0
        for e in range(args.epochs):
            first = e * args.batches * args.batch_rows
            batches = [peers.make_batch(first + i * args.batch_rows, args.batch_rows, 1) for i in range(args.batches)]
            nbytes += peers.arrow_bytes(batches)
            create = {"data_codec": args.data_codec} if args.data_codec else True
            ack = client.put_epoch("large", batches, query_id="read-bench", epoch_id=e, create=create)
            assert ack.status == "committed", ack
            lance.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), lance_uri,
                                mode="append" if e else "create")
        rows = args.epochs * args.batches * args.batch_rows
        version = client.table_stats("large").version
        client.publish_iceberg("large")
        catalog = load_catalog("flight-sink", type="rest", uri=f"http://{http_addr}/iceberg")
        snapshot = catalog.load_table("default.large").metadata.current_snapshot()
        assert snapshot is not None and snapshot.summary.additional_properties["flight-sink.version"] == str(version)
        # The data files of the version read, as the direct GetFlightInfo hands them out (no file
        # that an earlier version replaced).
        info = client.flight_info("large", version=version, direct=True)
        files = [ep.locations[0].uri.decode().removeprefix("file://") for ep in info.endpoints]
        assert len(files) == args.epochs and all(Path(f).is_file() for f in files), files

        readers = {
            "Client.read direct": lambda: client.read("large", direct=True),
            "Client.read DoGet": lambda: client.read("large", direct=False),
            "Client.read DoGet parallel": lambda: client.read("large", direct=False, parallel=args.parallel),
            "pylance": lambda: lance.dataset(lance_uri).to_table(),
            "pyiceberg": lambda: catalog.load_table("default.large").scan().to_arrow(),
            "pyarrow.parquet": lambda: pq.read_table(files),
        }
        names = list(readers)
        med = interleaved_medians(readers, lambda _: server.p.pid, args.rounds, rows)
        print(f"{rows:,} rows, {nbytes / 1e6:.1f} MB Arrow, {len(files)} data files ({args.data_codec or 'default codec'}), "
              f"{args.rounds} interleaved rounds, "
              f"medians; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (shared machines: noisy)")
        print(f"{'reader':28s} {'wall ms':>9s} {'client CPU ms':>14s} {'server CPU ms':>14s} {'total CPU ms':>13s} {'MB/s':>8s}")
        for n in names:
            w, c, s = med[n]
            print(f"{n:28s} {w * 1000:9.1f} {c * 1000:14.1f} {s * 1000:14.1f} {(c + s) * 1000:13.1f} {nbytes / 1e6 / w:8.1f}")
        print("\nratios (other / this: above 1.0 is faster), wall | total CPU")
        for n in names[:3]:
            w, c, s = med[n]
            parts = []
            for ref in ("pylance", "pyiceberg", "pyarrow.parquet"):
                rw, rc, rs = med[ref]
                parts.append(f"{ref} {rw / w:4.2f}x | {(rc + rs) / (c + s):4.2f}x")
            print(f"  {n:28s} " + ";  ".join(parts))
        print(json.dumps({"rows": rows, "arrow_bytes": nbytes, "files": len(files),
                          "median": {n: {"wall_s": med[n][0], "client_cpu_s": med[n][1], "server_cpu_s": med[n][2]}
                                     for n in names}}))
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
