#!/usr/bin/env python3
"""DoGet against pyarrow.parquet.read_table of the same files, for several server builds and data
codecs side by side, in interleaved rounds, wall and CPU time.

Each --target LABEL=BINARY[@CODEC] starts its own server (BINARY serve, on a free loopback port,
over its own temporary root, maintenance off) and writes the same rows (bench/peers.py's 8-column
schema, --epochs epochs of --batches x --batch-rows rows, one fragment each) into a table created
with "data_codec": CODEC (no data_codec without @CODEC: the binary's default). Then, --rounds
times, in a rotated order, it reads every target's table with

  doget LABEL     flight_sink.Client(...).read(table): one DoGet
  pyarrow LABEL   pyarrow.parquet.read_table(the table's data files): the files alone

and prints for each reader the median wall seconds, the client's CPU seconds (this process's
rusage: user + system, every thread) and the server's (/proc/<pid>/stat; only DoGet uses it),
and each DoGet's ratio to pyarrow.parquet of its own files and of the first target's files (above
1.0: DoGet is faster). The tables are append-only and maintenance is off, so every data file is
one of the version read.

With --floor it also reads the same rows from a pyarrow.flight server that holds them in memory
(`floor`: no storage, no decoding, Arrow C++'s own Flight transport): the least any DoGet of these
rows costs on this machine, and how much of a DoGet's time is left for the server's decoding.

  python bench/doget_bench.py --target base=/tmp/base/flight-sink --target new=bin/flight-sink@lz4_raw
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "clients" / "pyspark" / "src"))
import peers  # noqa: E402
from read_bench import interleaved_medians  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", required=True, metavar="LABEL=BINARY[@CODEC]",
                    help="a server build and the data codec of its table (repeat)")
    ap.add_argument("--epochs", type=int, default=4, help="epochs (one fragment each)")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-rows", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (every reader once each)")
    ap.add_argument("--floor", action="store_true", help="also read the rows from an in-memory pyarrow.flight server")
    ap.add_argument("--serve-memory", action="store_true", help=argparse.SUPPRESS)  # the --floor server process
    args = ap.parse_args()
    if args.serve_memory:
        return serve_memory(args)

    import pyarrow.parquet as pq

    import flight_sink

    work = Path(tempfile.mkdtemp(prefix="flight-sink-doget-bench-"))
    servers: dict[str, peers.Proc] = {}
    try:
        readers = {}
        files: dict[str, list[str]] = {}
        rows = args.epochs * args.batches * args.batch_rows
        nbytes = 0
        for spec in args.target:
            label, _, rest = spec.partition("=")
            binary, _, codec = rest.partition("@")
            addr = f"127.0.0.1:{peers.free_port()}"
            root = work / label
            servers[label] = peers.Proc(f"flight-sink {label}", [binary, "serve", "--listen", addr, "--http-listen", "off",
                                                                 "--root", str(root), "--maintenance", "off"],
                                        work / f"{label}.log")
            peers.wait_flight(addr, servers[label])
            client = flight_sink.Client(f"grpc://{addr}")
            create = {"data_codec": codec} if codec else True
            nbytes = 0
            for e in range(args.epochs):
                first = e * args.batches * args.batch_rows
                batches = [peers.make_batch(first + i * args.batch_rows, args.batch_rows, 1) for i in range(args.batches)]
                nbytes += peers.arrow_bytes(batches)
                ack = client.put_epoch("large", batches, query_id="doget-bench", epoch_id=e, create=create)
                assert ack.status == "committed", ack
            files[label] = sorted(str(p) for p in (root / "large" / "data").glob("*.parquet"))
            assert len(files[label]) == args.epochs, files[label]
            readers[f"doget {label}"] = (label, lambda c=client: c.read("large", direct=False))
            readers[f"pyarrow {label}"] = (None, lambda f=files[label]: pq.read_table(f))

        if args.floor:
            readers["floor memory"] = ("memory", start_memory_server(args, work, servers))
        names = list(readers)
        med = interleaved_medians({n: read for n, (_, read) in readers.items()},
                                  lambda n: servers[readers[n][0]].p.pid if readers[n][0] else None, args.rounds, rows)
        sizes = {label: sum(os.path.getsize(f) for f in fs) for label, fs in files.items()}
        sizes["memory"] = 0
        print(f"{rows:,} rows, {nbytes / 1e6:.1f} MB Arrow, {args.epochs} data files per table, {args.rounds} interleaved "
              f"rounds, medians; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (shared machines: noisy)")
        print(f"{'reader':22s} {'wall ms':>9s} {'client CPU ms':>14s} {'server CPU ms':>14s} {'total CPU ms':>13s} {'file MB':>8s}")
        for n in names:
            w, c, s = med[n]
            label = n.split(" ", 1)[1]
            if n == "floor memory":
                rw, rc, rs = med[f"pyarrow {args.target[0].partition('=')[0]}"]
                print(f"{n:22s} {w * 1000:9.1f} {c * 1000:14.1f} {s * 1000:14.1f} {(c + s) * 1000:13.1f} {'-':>8s}"
                      f"   (pyarrow {args.target[0].partition('=')[0]} / floor: {rw / w:4.2f}x wall)")
                continue
            print(f"{n:22s} {w * 1000:9.1f} {c * 1000:14.1f} {s * 1000:14.1f} {(c + s) * 1000:13.1f} {sizes[label] / 1e6:8.1f}")
        first = args.target[0].partition("=")[0]
        print("\nDoGet against pyarrow.parquet (pyarrow / DoGet: above 1.0, DoGet is faster), wall | total CPU")
        for label in files:
            w, c, s = med[f"doget {label}"]
            parts = []
            for ref in dict.fromkeys((label, first)):
                rw, rc, rs = med[f"pyarrow {ref}"]
                parts.append(f"pyarrow {ref}: {rw / w:4.2f}x | {(rc + rs) / (c + s):4.2f}x")
            print(f"  doget {label:16s} " + ";  ".join(parts))
        print(json.dumps({"rows": rows, "arrow_bytes": nbytes, "file_bytes": sizes,
                          "median": {n: {"wall_s": med[n][0], "client_cpu_s": med[n][1], "server_cpu_s": med[n][2]}
                                     for n in names}}))
        return 0
    finally:
        for p in servers.values():
            p.stop()
        shutil.rmtree(work, ignore_errors=True)


def start_memory_server(args, work: Path, servers: dict):
    """Starts this script with --serve-memory (the --floor server) and returns its reader."""
    import pyarrow.flight as fl

    argv = [sys.executable, __file__, "--serve-memory", "--target", "memory=-", "--epochs", str(args.epochs),
            "--batches", str(args.batches), "--batch-rows", str(args.batch_rows)]
    servers["memory"] = peers.Proc("in-memory pyarrow.flight", argv, work / "memory.log")
    port = int(servers["memory"].p.stdout.readline())
    client = fl.connect(f"grpc://127.0.0.1:{port}")
    return lambda: client.do_get(fl.Ticket(b"large")).read_all()


def serve_memory(args) -> int:
    """A pyarrow.flight server whose DoGet streams the benchmark's rows from memory."""
    import pyarrow as pa
    import pyarrow.flight as fl

    batches = [peers.make_batch(e * args.batches * args.batch_rows + i * args.batch_rows, args.batch_rows, 1)
               for e in range(args.epochs) for i in range(args.batches)]
    table = pa.Table.from_batches(batches)

    class Memory(fl.FlightServerBase):
        def do_get(self, context, ticket):
            return fl.RecordBatchStream(table)

    server = Memory("grpc://127.0.0.1:0")
    print(server.port, flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
