"""Benchmark: reading a large-batch table through its Iceberg metadata with PyIceberg vs DoGet.

Writes ``--batches`` batches of ``--batch-rows`` rows (the throughput workload's shape: id,
name, score, payload) in one epoch, publishes it (``publish_iceberg``) and times, best of
``--repeat``: PyIceberg ``StaticTable.from_metadata(table_dir).scan().to_arrow()`` and the
client's DoGet ``read``.

    FLIGHT_SINK_BIN=bin/flight-sink python clients/pyspark/bench/bench_iceberg_scan.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.table import StaticTable

import flight_sink as fs
from flight_sink.local_server import LocalServer, build_server


def batch(start: int, n: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "name": pa.array([f"n{i % 1000}" for i in range(start, start + n)], pa.string()),
            "score": pa.array([i / 3 for i in range(start, start + n)], pa.float64()),
            "payload": pa.array([i * 7 for i in range(start, start + n)], pa.int64()),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--batch-rows", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[3]
    binary = os.environ.get("FLIGHT_SINK_BIN") or build_server(repo, tempfile.mkdtemp())
    root = Path(tempfile.mkdtemp(prefix="iceberg-scan-"))
    with LocalServer.start(binary, root) as srv, fs.Client(srv.uri) as c:
        n = args.batch_rows
        tbl = pa.Table.from_batches([batch(i * n, n) for i in range(args.batches)])
        c.put_epoch("big", tbl, query_id="b", epoch_id=0, create=True)
        res = c.publish_iceberg("big")
        rows = tbl.num_rows
        times = {"pyiceberg": [], "doget": []}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = StaticTable.from_metadata(str(root / "big")).scan().to_arrow()
            times["pyiceberg"].append(time.perf_counter() - t0)
            assert got.num_rows == rows, got.num_rows
            t0 = time.perf_counter()
            got = c.read("big")
            times["doget"].append(time.perf_counter() - t0)
            assert got.num_rows == rows, got.num_rows
        print(f"{rows} rows, {c.table_stats('big').fragments} fragments, metadata {res.metadata_file}")
        for k, v in times.items():
            best = min(v)
            print(f"{k:10s} best of {args.repeat}: {best * 1000:8.1f} ms  {rows / best / 1e6:6.2f} M rows/s")


if __name__ == "__main__":
    main()
