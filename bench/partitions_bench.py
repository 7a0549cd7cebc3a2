#!/usr/bin/env python3
"""Partitioned tables against unpartitioned ones, in one run, each measurement against a
`flight-sink serve` built from this checkout (`--maintenance off`, so that only the writes below
shape the tables):

1. Reading one day of a 30-day table. ROWS rows over 30 days (ts, id, user_id, amount, country),
   written as one epoch per day; each day's epoch also carries LATE_SHARE of late rows, their ts
   spread over the LATE_DAYS days before (an event stream's late arrivals). The same epochs go to
   a table partitioned by `day(ts)` and to an unpartitioned one; then both are compacted
   (`compact`, default target) and measured again (compaction merges days in the unpartitioned
   table, never in the partitioned one). For the filter `ts >= DAY and ts < DAY + 1 day` (a day in
   the middle), per table:
     DoGet         GetFlightInfo's total_bytes for the filtered descriptor (the bytes of the
                   fragments the server keeps), its endpoints, and the median seconds of a
                   filtered `Client.read(..., direct=False)` (one DoGet) and the rows it returns
     PyIceberg     through the REST catalog: `scan(row_filter=...).plan_files()`'s files and the
                   sum of their file sizes, and the median seconds of `scan(...).to_arrow()`
     DuckDB        the median seconds of `SELECT count(*), sum(amount) ... WHERE ts ...` over the
                   table ATTACHed through the REST catalog
   and the whole table's bytes (GetFlightInfo without a filter).
2. Writes: WRITE_EPOCHS epochs of 1,000 rows, each spread over 24 hours of one day, into a table
   partitioned by `hour(ts)` (24 files an epoch) and into an unpartitioned one (1 file an
   epoch), in alternating rounds on one server; epochs/s of each and the ratio. Twice: with the
   default fragment ceiling (`compaction.max_fragments` 64: a commit that finds the table at it
   compacts first, which the partitioned table reaches every few epochs) and with it at 100,000.
3. Memory: one epoch of RSS_ROWS rows over 1,000 partitions (`identity` of an int32 column of
   1,000 values) into a fresh server, against the same epoch into an unpartitioned table on
   another fresh server: each server's peak RSS (VmHWM of /proc/PID/status) after the epoch.

    python3 bench/partitions_bench.py                       # 10 M rows
    python3 bench/partitions_bench.py --rows 1000000 --write-epochs 100 --repeats 2   # smoke run

`make bench-partitions` runs it in the project virtualenv (pyarrow, numpy, pyiceberg, duckdb and
the duckdb-ext-* packages of clients/pyspark/requirements-test.txt).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "clients/pyspark/src"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import flight_sink as fs  # noqa: E402
from flight_sink.local_server import LocalServer  # noqa: E402

DAYS = 30
START = dt.datetime(2026, 1, 1)
US_PER_DAY = 86_400_000_000
COUNTRIES = ["NL", "DE", "FR", "US", "GB", "ES", "IT", "PL", "SE", "BR", "IN", "JP", "CN", "CA", "AU", "MX", "ZA", "NG", "KR", "AR"]
SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us")),
        pa.field("id", pa.int64()),
        pa.field("user_id", pa.int32()),
        pa.field("amount", pa.float64()),
        pa.field("country", pa.string()),
    ]
)


def epoch_us(t: dt.datetime) -> int:
    return int((t - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000


def day_rows(rng: np.random.Generator, day: int, n: int, first_id: int, late_share: float, late_days: int) -> pa.Table:
    """One day's epoch: n rows, ts uniform over the day, late_share of them over the late_days
    days before (none before the first day)."""
    base = epoch_us(START) + day * US_PER_DAY
    ts = base + rng.integers(0, US_PER_DAY, n, dtype=np.int64)
    late = min(day, late_days)
    if late:
        k = int(n * late_share)
        ts[:k] = base - rng.integers(1, late * US_PER_DAY, k, dtype=np.int64)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, 1_000_000, n, dtype=np.int32)),
            "amount": pa.array(rng.random(n) * 100),
            "country": pa.array(np.array(COUNTRIES, dtype=object)[rng.integers(0, len(COUNTRIES), n)], pa.string()),
        },
        schema=SCHEMA,
    )


def http_uri(srv: LocalServer) -> str:
    m = re.search(r"http endpoints serving.*?addr=(\S+)", srv.log())
    if not m:
        raise RuntimeError(f"no HTTP listener in the server log:\n{srv.log()}")
    return f"http://{m.group(1).strip(chr(34))}/iceberg"


def median_seconds(fn: Callable[[], Any], repeats: int) -> Tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def duckdb_connect(uri: str):
    import duckdb

    ext = md.distribution("duckdb-ext-iceberg").locate_file("duckdb_ext/extensions")
    con = duckdb.connect(config={"extension_directory": str(ext), "autoinstall_known_extensions": False})
    for e in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {e}")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE SECRET fs (TYPE iceberg, TOKEN 'unused')")
    con.execute(f"ATTACH 'warehouse' AS fs (TYPE iceberg, SECRET fs, ENDPOINT '{uri}')")
    return con


def measure_day(c: fs.Client, cat, con, table: str, day: dt.datetime, repeats: int) -> Dict[str, Any]:
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    nxt = day + dt.timedelta(days=1)
    lo, hi = day.isoformat(), nxt.isoformat()
    # The server takes RFC 3339 times (a zone is required; a timestamp without zone is read as UTC).
    flt = {"op": "and", "args": [{"op": ">=", "column": "ts", "value": lo + "Z"}, {"op": "<", "column": "ts", "value": hi + "Z"}]}
    whole = c.flight_info(table)
    info = c.flight_info(table, filter=flt)
    doget_s, got = median_seconds(lambda: c.read(table, filter=flt, direct=False), repeats)

    c.publish_iceberg(table)
    itbl = cat.load_table(("default", table))
    row_filter = And(GreaterThanOrEqual("ts", lo), LessThan("ts", hi))
    tasks = list(itbl.scan(row_filter=row_filter).plan_files())
    all_files = list(itbl.scan().plan_files())
    pyi_s, pyi = median_seconds(lambda: itbl.scan(row_filter=row_filter).to_arrow(), repeats)
    if pyi.num_rows != got.num_rows:
        raise RuntimeError(f"{table}: PyIceberg read {pyi.num_rows} rows of the day, DoGet {got.num_rows}")

    q = f"SELECT count(*), sum(amount) FROM fs.\"default\".\"{table}\" WHERE ts >= TIMESTAMP '{lo}' AND ts < TIMESTAMP '{hi}'"
    duck_s, (n, _) = median_seconds(lambda: con.execute(q).fetchone(), repeats)
    if n != got.num_rows:
        raise RuntimeError(f"{table}: DuckDB counted {n} rows of the day, DoGet {got.num_rows}")
    return {
        "table_bytes": whole.total_bytes,
        "table_endpoints": len(whole.endpoints),
        "bytes": info.total_bytes,
        "endpoints": len(info.endpoints),
        "rows": got.num_rows,
        "doget_s": doget_s,
        "pyi_files": len(tasks),
        "pyi_all_files": len(all_files),
        "pyi_bytes": sum(t.file.file_size_in_bytes for t in tasks),
        "pyi_s": pyi_s,
        "duck_s": duck_s,
    }


def read_benchmark(binary: str, tmp: Path, args) -> List[Tuple[str, Dict[str, Any]]]:
    from pyiceberg.catalog import load_catalog

    rng = np.random.default_rng(7)
    per_day = args.rows // DAYS
    srv = LocalServer.start(binary, tmp / "read", extra_args=["--http-listen", "127.0.0.1:0", "--maintenance", "off"])
    try:
        with fs.Client(srv.uri) as c:
            c.create_table("by_day", SCHEMA, partition_by=[{"column": "ts", "transform": "day"}])
            c.create_table("flat", SCHEMA)
            t0 = time.perf_counter()
            for d in range(DAYS):
                rows = day_rows(rng, d, per_day, d * per_day, args.late_share, args.late_days)
                for name in ("by_day", "flat"):
                    c.put_epoch(name, rows, query_id="load", epoch_id=d, route="direct")
            print(f"wrote {per_day * DAYS:,} rows ({DAYS} epochs) to each table in {time.perf_counter() - t0:.0f} s", flush=True)
            uri = http_uri(srv)
            cat = load_catalog("bench", type="rest", uri=uri)
            con = duckdb_connect(uri)
            day = START + dt.timedelta(days=DAYS // 2)
            out = []
            for stage in ("as written", "compacted"):
                if stage == "compacted":
                    for name in ("by_day", "flat"):
                        c.compact(name)
                for name in ("by_day", "flat"):
                    out.append((f"{name}, {stage}", measure_day(c, cat, con, name, day, args.repeats)))
                    print(f"measured {name}, {stage}", flush=True)
            return out
    finally:
        srv.stop()


def hour_rows(rng: np.random.Generator, n: int, first_id: int) -> pa.Table:
    """n rows over the 24 hours of one day (every hour gets some)."""
    ts = epoch_us(START) + (np.arange(n, dtype=np.int64) % 24) * 3_600_000_000 + rng.integers(0, 3_600_000_000, n, dtype=np.int64)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, 1_000_000, n, dtype=np.int32)),
            "amount": pa.array(rng.random(n) * 100),
            "country": pa.array(np.array(COUNTRIES, dtype=object)[rng.integers(0, len(COUNTRIES), n)], pa.string()),
        },
        schema=SCHEMA,
    )


def write_benchmark(binary: str, tmp: Path, args, ceiling: Optional[int]) -> Dict[str, List[float]]:
    """epochs/s of each table per round; ceiling: the tables' compaction.max_fragments (None: the
    default, 64)."""
    rng = np.random.default_rng(11)
    batches = [hour_rows(rng, 1000, i * 1000) for i in range(args.write_epochs)]
    srv = LocalServer.start(binary, tmp / f"write-{ceiling}", extra_args=["--http-listen", "off", "--maintenance", "off", "--no-iceberg"])
    rates: Dict[str, List[float]] = {"by_hour": [], "flat": []}
    try:
        with fs.Client(srv.uri) as c:
            c.create_table("by_hour", SCHEMA, partition_by=[{"column": "ts", "transform": "hour"}])
            c.create_table("flat", SCHEMA)
            if ceiling is not None:
                # A table that stores settings takes the built-in defaults for the others
                # (docs/operations.md): mode off keeps --maintenance off's.
                for name in rates:
                    c.set_table_config(name, {"compaction.max_fragments": ceiling, "mode": "off"})
            epoch = {"by_hour": 0, "flat": 0}
            for r in range(args.write_rounds):
                for name in ("flat", "by_hour") if r % 2 == 0 else ("by_hour", "flat"):
                    t0 = time.perf_counter()
                    for b in batches:
                        c.put_epoch(name, b, query_id="w", epoch_id=epoch[name], route="direct")
                        epoch[name] += 1
                    rates[name].append(len(batches) / (time.perf_counter() - t0))
            frags = c.table_stats("by_hour").fragments, c.table_stats("flat").fragments
            print(f"write (max_fragments {ceiling or 'default'}): fragments by_hour {frags[0]}, flat {frags[1]}", flush=True)
    finally:
        srv.stop()
    return rates


def rss_benchmark(binary: str, tmp: Path, args) -> Dict[str, Tuple[float, float]]:
    n = args.rss_rows
    rng = np.random.default_rng(13)
    rows = pa.table(
        {
            "ts": pa.array(epoch_us(START) + rng.integers(0, US_PER_DAY, n, dtype=np.int64), pa.timestamp("us")),
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "part": pa.array((np.arange(n) % 1000).astype(np.int32)),
            "amount": pa.array(rng.random(n) * 100),
            "country": pa.array(np.array(COUNTRIES, dtype=object)[rng.integers(0, len(COUNTRIES), n)], pa.string()),
        }
    )
    out = {}
    for name, spec in (("1,000 partitions", [{"column": "part"}]), ("unpartitioned", None)):
        srv = LocalServer.start(binary, tmp / f"rss-{len(out)}", extra_args=["--http-listen", "off", "--maintenance", "off", "--no-iceberg"])
        try:
            with fs.Client(srv.uri) as c:
                c.create_table("t", rows.schema, partition_by=spec)
                before = peak_rss_mib(srv.proc.pid)
                c.put_epoch("t", rows, query_id="rss", epoch_id=0, route="direct")
                after = peak_rss_mib(srv.proc.pid)
                st = c.table_stats("t")
                print(f"rss: {name}: {st.fragments} fragments", flush=True)
            out[name] = (before, after)
        finally:
            srv.stop()
    return out


def mib(b: float) -> str:
    return f"{b / 2**20:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=None, help="flight-sink binary (default: go build into a temporary directory)")
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows of the 30-day table")
    ap.add_argument("--late-share", type=float, default=0.01, help="share of each day's epoch that is late rows")
    ap.add_argument("--late-days", type=int, default=3, help="late rows fall over this many days before")
    ap.add_argument("--repeats", type=int, default=3, help="timed reads per reader (median)")
    ap.add_argument("--write-epochs", type=int, default=200, help="1,000-row epochs per write round")
    ap.add_argument("--write-rounds", type=int, default=4, help="alternating write rounds (both tables each)")
    ap.add_argument("--rss-rows", type=int, default=1_000_000, help="rows of the 1,000-partition epoch")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="partitions-bench-") as d:
        tmp = Path(d)
        binary = args.bin
        if binary is None:
            binary = str(tmp / "flight-sink")
            subprocess.run(["go", "build", "-o", binary, "./cmd/flight-sink"], cwd=REPO, check=True)
        reads = read_benchmark(binary, tmp, args)
        writes = {c: write_benchmark(binary, tmp, args, c) for c in (None, 100_000)}
        rss = rss_benchmark(binary, tmp, args)

    print()
    print(f"## Reading one day of {args.rows // DAYS * DAYS:,} rows over {DAYS} days ({args.late_share:.0%} late rows over {args.late_days} days), median of {args.repeats}")
    print()
    print("| table | table MiB | GetFlightInfo MiB (endpoints) | DoGet rows | DoGet s | PyIceberg files planned | PyIceberg MiB | PyIceberg s | DuckDB s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, m in reads:
        print(
            f"| {name} | {mib(m['table_bytes'])} | {mib(m['bytes'])} ({m['endpoints']}) | {m['rows']:,} | {m['doget_s']:.3f} | "
            f"{m['pyi_files']} of {m['pyi_all_files']} | {mib(m['pyi_bytes'])} | {m['pyi_s']:.3f} | {m['duck_s']:.3f} |"
        )
    byname = dict(reads)
    for stage in ("as written", "compacted"):
        p, f = byname[f"by_day, {stage}"], byname[f"flat, {stage}"]
        print(
            f"\n{stage}: partitioned reads {f['bytes'] / max(p['bytes'], 1):.1f}x fewer bytes than unpartitioned (GetFlightInfo), "
            f"{f['pyi_bytes'] / max(p['pyi_bytes'], 1):.1f}x (PyIceberg), {p['table_bytes'] / max(p['bytes'], 1):.1f}x fewer than the whole table"
        )
    print()
    print(f"## Writes: 1,000-row epochs over 24 hourly partitions, {args.write_rounds} alternating rounds of {args.write_epochs} epochs")
    print()
    print("| compaction.max_fragments | table | epochs/s per round | median | partitioned / unpartitioned |")
    print("| --- | --- | --- | ---: | ---: |")
    for ceiling, w in writes.items():
        ratio = statistics.median(w["by_hour"]) / statistics.median(w["flat"])
        for name in ("by_hour", "flat"):
            rounds = ", ".join(f"{r:.1f}" for r in w[name])
            print(f"| {ceiling or '64 (default)'} | {name} | {rounds} | {statistics.median(w[name]):.1f} | {ratio:.2f}x |")
    print()
    print(f"## Memory: one epoch of {args.rss_rows:,} rows, fresh server each")
    print()
    print("| table | peak RSS before the epoch MiB | peak RSS after MiB |")
    print("| --- | ---: | ---: |")
    for name, (before, after) in rss.items():
        print(f"| {name} | {before:.0f} | {after:.0f} |")


if __name__ == "__main__":
    main()
