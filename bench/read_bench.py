#!/usr/bin/env python3
"""Reading the large-batch table: flight-sink's parallel endpoints against one DoGet, pylance and
pyarrow.parquet on the same rows, in one run.

`make bench-reads` runs this. It uses a virtualenv (default ~/.cache/flight-sink/read-bench-venv,
or $FLIGHT_SINK_READ_BENCH_VENV) made with the system's site packages plus pylance from
bench/requirements.txt, builds the server with `go build`, starts it on a free loopback port over
a temporary root with `--endpoint-bytes` small enough for one endpoint per fragment, writes
--epochs epochs of --batches x --batch-rows rows of bench/peers.py's 8-column schema (the
large-batch workload: each epoch one fragment) and the same rows as a Lance dataset, then times,
best of --repeat:

  (a) GetFlightInfo + its endpoints read by --parallel pyarrow threads (pyarrow.flight)
  (b) one DoGet of the table
  (c) lance.dataset(uri).to_table()
  (d) pyarrow.parquet.read_table over the table's own data files (data/*.parquet)

and prints rows, MB/s of Arrow data and the ratios (target: (a) >= 1.0x (c)).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import peers  # noqa: E402  (data, processes and the pins of bench/requirements.txt)

VENV = Path(os.environ.get("FLIGHT_SINK_READ_BENCH_VENV", Path.home() / ".cache/flight-sink/read-bench-venv"))


def bootstrap() -> None:
    """Re-exec inside VENV (system site packages + the pinned pylance) unless lance imports."""
    try:
        import lance  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    if Path(sys.prefix).resolve() == VENV.resolve():
        raise SystemExit(f"{VENV} lacks lance or numpy even after installing them")
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    pin = peers.pinned()["pylance"]
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"pylance=={pin}", "numpy"], check=True)
    os.execv(str(py), [str(py), str(Path(__file__).resolve())] + sys.argv[1:])


def best(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4, help="epochs (one fragment each)")
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--batch-rows", type=int, default=65536)
    ap.add_argument("--parallel", type=int, default=4, help="threads reading the endpoints")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--go", default=shutil.which("go") or "go")
    args = ap.parse_args()
    bootstrap()

    import lance
    import pyarrow as pa
    import pyarrow.flight as fl
    import pyarrow.parquet as pq
    from concurrent.futures import ThreadPoolExecutor

    work = Path(tempfile.mkdtemp(prefix="flight-sink-read-bench-"))
    server = None
    try:
        binary = work / "flight-sink"
        peers.go_build(args.go, binary, "./cmd/flight-sink")
        addr = f"127.0.0.1:{peers.free_port()}"
        server = peers.Proc("flight-sink", [str(binary), "serve", "--listen", addr, "--http-listen", "off",
                                            "--root", str(work / "root"), "--maintenance", "off",
                                            "--endpoint-bytes", "1"], work / "server.log")
        peers.wait_flight(addr, server)
        sink = peers.FlightPeer(addr)
        lance_uri = str(work / "lance.lance")
        nbytes = 0
        for e in range(args.epochs):
            first = e * args.batches * args.batch_rows
            batches = [peers.make_batch(first + i * args.batch_rows, args.batch_rows, 1) for i in range(args.batches)]
            nbytes += peers.arrow_bytes(batches)
            ack = sink.put({"table": "large", "query_id": "read-bench", "epoch_id": e, "create": True}, batches)
            assert ack.get("status") == "committed", ack
            lance.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), lance_uri,
                                mode="append" if e else "create")
        rows = args.epochs * args.batches * args.batch_rows
        client = fl.connect(f"grpc://{addr}")

        def parallel():
            info = client.get_flight_info(fl.FlightDescriptor.for_path("large"))
            with ThreadPoolExecutor(args.parallel) as pool:
                parts = list(pool.map(lambda ep: client.do_get(ep.ticket).read_all(), info.endpoints))
            return pa.concat_tables(parts), len(info.endpoints)

        def doget():
            return client.do_get(fl.Ticket(json.dumps({"table": "large"}).encode())).read_all()

        def pylance():
            return lance.dataset(lance_uri).to_table()

        data_dir = work / "root" / "large" / "data"
        files = sorted(str(p) for p in data_dir.glob("*.parquet"))

        def parquet():
            return pq.read_table(files)

        results = {}
        for name, fn in [("parallel endpoints", parallel), ("one DoGet", doget), ("pylance", pylance), ("pyarrow.parquet", parquet)]:
            secs, out = best(fn, args.repeat)
            extra = ""
            if name == "parallel endpoints":
                out, n = out
                extra = f" ({n} endpoints, {args.parallel} threads)"
            assert out.num_rows == rows, (name, out.num_rows, rows)
            results[name] = secs
            print(f"{name:20s} {secs * 1000:9.1f} ms  {nbytes / 1e6 / secs:8.1f} MB/s  {rows / secs / 1e6:6.2f} M rows/s{extra}", flush=True)
        print(f"\n{rows:,} rows, {nbytes / 1e6:.1f} MB Arrow, {len(files)} data files; best of {args.repeat}, "
              f"{os.cpu_count()} CPUs (shared: figures are noisy)")
        base = results["pylance"]
        for name, secs in results.items():
            print(f"  {name:20s} {base / secs:5.2f}x pylance")
        ok = results["parallel endpoints"] <= base
        print(f"target parallel endpoints >= 1.0x pylance: {'met' if ok else 'missed'}")
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
