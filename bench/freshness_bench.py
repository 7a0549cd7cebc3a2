#!/usr/bin/env python3
"""Freshness of the Iceberg tables: how long an acknowledged row takes to be visible to an
Iceberg reader that polls the server's REST catalog, and what publishing costs the direct route.

Two measurements, one run, each against a `flight-sink serve` built from this checkout with its
defaults (background maintenance, `--iceberg-publish-interval 1s`, `--memwal-freshness 5s`):

1. Ack -> visible, per route (direct, then MemWAL): one query sends ROWS-row epochs at RATE per
   second for DURATION seconds; a PyIceberg reader attached to the REST catalog
   (`load_catalog(type="rest")`) loads the table in a loop and reads the current snapshot's
   `total-records`. An epoch is visible at the end of the first load whose snapshot holds its
   rows (one writer, appends only: the rows are ordered). Reports p50/p99/max of ack -> visible
   and the epochs/s the writer reached.
2. Commit -> visible after the commits that are not epochs, on the same server: the `delete` and
   `compact` actions (acknowledged by their answer), and commits by another process on the same
   root, noticed by the server's periodic scan (`--iceberg-scan-interval 2s`): the CLI's
   `flight-sink compact` and `flight-sink config set` (acknowledged when the process exits). After
   each commit a reader loads the table through the REST catalog every POLL_INTERVAL until the
   metadata mirrors the committed version: the current snapshot's summary `flight-sink.version`
   for a commit that changes rows, the table property `flight-sink.version` for `config set` (it
   changes no rows, so its publish records the version without a snapshot). One commit at a
   time, COMMITS of each kind, each started after a random pause of up to JITTER seconds so that
   the commits fall at every phase of the server's publish (1 s) and scan (2 s) ticks rather
   than locking to one; reports p50/p99/max of ack -> visible.
3. Publishing on vs off: epochs of ROWS rows sent back to back on the direct route to a server
   that publishes and to one started with `--no-iceberg`, in alternating rounds (off, on, off,
   on, ...), so both see the same machine; reports each round's epochs/s and the on/off ratio.

    python3 bench/freshness_bench.py                 # the issue's figures: 2 min per route
    python3 bench/freshness_bench.py --duration 20 --commits 5 --rounds 2 --round-seconds 10   # smoke run

Needs pyarrow, pyiceberg and the flight_sink client (clients/pyspark/src is put on sys.path);
`make bench-freshness` runs it in the project virtualenv.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "clients/pyspark/src"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import flight_sink as fs  # noqa: E402
from flight_sink.local_server import LocalServer  # noqa: E402


def batch(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "name": pa.array([f"r{i}" for i in range(start, start + n)]), "score": pc.multiply(ids, 0.5)})


def percentile(xs: List[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def http_uri(srv: LocalServer) -> str:
    m = re.search(r"http endpoints serving.*?addr=(\S+)", srv.log())
    if not m:
        raise RuntimeError(f"no HTTP listener in the server log:\n{srv.log()}")
    return f"http://{m.group(1).strip(chr(34))}/iceberg"


def visible_rows(cat, table: str) -> int:
    """Rows of the current snapshot the catalog serves (0 before the first publish)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        snap = cat.load_table(("default", table)).current_snapshot()
    except NoSuchTableError:
        return 0
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary["total-records"])


def freshness(srv: LocalServer, route: str, rate: float, duration: float, rows: int, drain: float, poll_interval: float) -> Dict[str, float]:
    from pyiceberg.catalog import load_catalog

    table = f"fresh_{route}"
    create = {"memwal": {"shards": 1}} if route == "memwal" else True
    cat = load_catalog(table, type="rest", uri=http_uri(srv))
    acks: List[float] = []  # ack time of epoch e
    seen: List[float] = []  # time epoch e was first seen visible
    stop = threading.Event()
    polls = [0]

    def poll() -> None:
        while not stop.is_set():
            n = visible_rows(cat, table)
            now = time.monotonic()
            polls[0] += 1
            while len(seen) < n // rows:
                seen.append(now)
            stop.wait(poll_interval)

    with fs.Client(srv.uri) as c:
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        data = [batch(e * rows, rows) for e in range(int(duration * rate) + 1)]
        t0 = time.monotonic()
        e = 0
        while True:
            due = t0 + e / rate
            if due - t0 >= duration:
                break
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            c.put_epoch(table, data[e], query_id="fresh", epoch_id=e, create=create, route=route)
            acks.append(time.monotonic())
            e += 1
        sent_for = time.monotonic() - t0
        deadline = time.monotonic() + drain
        while len(seen) < len(acks) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        poller.join()
    lat = [s - a for a, s in zip(acks, seen)]
    return {
        "epochs": len(acks),
        "epochs_per_s": len(acks) / sent_for,
        "visible": len(lat),
        "p50_s": percentile(lat, 50) if lat else float("nan"),
        "p99_s": percentile(lat, 99) if lat else float("nan"),
        "max_s": max(lat) if lat else float("nan"),
        "polls_per_s": polls[0] / (time.monotonic() - t0),
    }


COMMIT_KINDS = ("delete action", "compact action", "compact CLI", "config set CLI")


def mirrored_version(cat, table: str, snapshot: bool) -> int:
    """The version the catalog's newest metadata mirrors: the current snapshot's summary
    `flight-sink.version` (snapshot=True) or the table property of that name."""
    tbl = cat.load_table(("default", table))
    if not snapshot:
        return int(tbl.properties.get("flight-sink.version", "0"))
    snap = tbl.current_snapshot()
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary.get("flight-sink.version", "0"))


def wait_visible(cat, table: str, version: int, snapshot: bool, ack: float, poll_interval: float, timeout: float) -> float:
    """Seconds from ack until the catalog mirrors version (NaN past timeout)."""
    while True:
        if mirrored_version(cat, table, snapshot) >= version:
            return time.monotonic() - ack
        if time.monotonic() - ack > timeout:
            return float("nan")
        time.sleep(poll_interval)


def cli_json(binary: str, *args: str) -> Dict[str, object]:
    out = subprocess.run([binary, *args, "--json", "--progress", "never"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def commit_lag(srv: LocalServer, binary: str, root: Path, commits: int, rows: int, poll_interval: float, timeout: float, jitter: float) -> Dict[str, Dict[str, float]]:
    """Ack -> visible of each commit kind of COMMIT_KINDS, COMMITS of each, one at a time."""
    from pyiceberg.catalog import load_catalog

    rng = random.Random(1)

    table = "commits"
    cat = load_catalog(table, type="rest", uri=http_uri(srv))
    lags: Dict[str, List[float]] = {k: [] for k in COMMIT_KINDS}
    uri = str(root / table)
    epoch = [0]

    def put_two() -> None:
        # Two fragments for a compaction to merge (and rows for a delete to remove).
        for _ in range(2):
            e = epoch[0]
            c.put_epoch(table, batch(e * rows, rows), query_id="commits", epoch_id=e, create=True, route="direct")
            epoch[0] += 1

    def settle() -> None:
        # The epochs' own publish first, so each lag is its commit's alone; then a random pause,
        # so the commit falls at a random phase of the server's tickers.
        v = c.table_stats(table).version
        wait_visible(cat, table, v, True, time.monotonic(), poll_interval, timeout)
        time.sleep(rng.uniform(0, jitter))

    with fs.Client(srv.uri) as c:
        for i in range(commits):
            put_two()
            settle()
            deleted = c.delete(table, {"op": "=", "column": "id", "value": (epoch[0] - 1) * rows})
            ack = time.monotonic()
            lags["delete action"].append(wait_visible(cat, table, deleted.version, True, ack, poll_interval, timeout))

            put_two()
            settle()
            compacted = c.compact(table)
            ack = time.monotonic()
            lags["compact action"].append(wait_visible(cat, table, int(compacted.version or 0), True, ack, poll_interval, timeout))

            put_two()
            settle()
            res = cli_json(binary, "compact", uri)
            ack = time.monotonic()
            lags["compact CLI"].append(wait_visible(cat, table, int(res["version"]), True, ack, poll_interval, timeout))

            time.sleep(rng.uniform(0, jitter))
            res = cli_json(binary, "config", "set", uri, f"cleanup.keep_last={2 + i % 2}")
            ack = time.monotonic()
            lags["config set CLI"].append(wait_visible(cat, table, int(res["version"]), False, ack, poll_interval, timeout))
    out: Dict[str, Dict[str, float]] = {}
    for kind, xs in lags.items():
        ok = [x for x in xs if x == x]
        out[kind] = {
            "commits": len(xs),
            "visible": len(ok),
            "p50_s": percentile(ok, 50) if ok else float("nan"),
            "p99_s": percentile(ok, 99) if ok else float("nan"),
            "max_s": max(ok) if ok else float("nan"),
        }
    return out


def back_to_back(srv: LocalServer, table: str, seconds: float, rows: int, first_epoch: int) -> float:
    """Epochs/s of ROWS-row epochs sent back to back for SECONDS on the direct route."""
    data = [batch(i * rows, rows) for i in range(64)]
    with fs.Client(srv.uri) as c:
        t0 = time.monotonic()
        e = first_epoch
        while time.monotonic() - t0 < seconds:
            c.put_epoch(table, data[e % 64], query_id="b2b", epoch_id=e, create=True, route="direct")
            e += 1
        return (e - first_epoch) / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="flight-sink binary (default: go build ./cmd/flight-sink into a temporary directory)")
    ap.add_argument("--go", default=os.environ.get("GO", "go"))
    ap.add_argument("--rate", type=float, default=10, help="epochs per second per route (10)")
    ap.add_argument("--rows", type=int, default=1000, help="rows per epoch (1000)")
    ap.add_argument("--duration", type=float, default=120, help="seconds of sending per route (120)")
    ap.add_argument("--drain", type=float, default=60, help="seconds to wait for the last epochs to be visible (60)")
    ap.add_argument("--poll-interval", type=float, default=0.05, help="seconds between two catalog loads of the reader (0.05)")
    ap.add_argument("--commits", type=int, default=10, help="commits of each kind: delete, compact, CLI compact, CLI config set (10)")
    ap.add_argument("--jitter", type=float, default=2, help="up to this many seconds of random pause before each of those commits (2)")
    ap.add_argument("--commit-timeout", type=float, default=60, help="seconds a commit may take to be visible before it counts as not visible (60)")
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs of the publishing cost (3)")
    ap.add_argument("--round-seconds", type=float, default=20, help="seconds of each round (20)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="flight-sink-freshness-"))
    servers: List[LocalServer] = []
    try:
        binary = args.bin
        if not binary:
            binary = str(tmp / "flight-sink")
            subprocess.run([args.go, "build", "-o", binary, "./cmd/flight-sink"], cwd=REPO, check=True)
        on = LocalServer.start(binary, tmp / "on", extra_args=["--http-listen", "127.0.0.1:0"])
        servers.append(on)
        off = LocalServer.start(binary, tmp / "off", extra_args=["--no-iceberg"])
        servers.append(off)
        out: Dict[str, object] = {"rate": args.rate, "rows": args.rows, "duration_s": args.duration}
        for route in ("direct", "memwal"):
            r = freshness(on, route, args.rate, args.duration, args.rows, args.drain, args.poll_interval)
            out[f"freshness_{route}"] = r
            print(f"{route:7s} ack->visible in PyIceberg (REST catalog): p50 {r['p50_s']:.2f} s, p99 {r['p99_s']:.2f} s, "
                  f"max {r['max_s']:.2f} s; {r['visible']}/{r['epochs']} epochs visible, {r['epochs_per_s']:.2f} epochs/s sent, "
                  f"{r['polls_per_s']:.1f} catalog loads/s", flush=True)
        commits = commit_lag(on, binary, tmp / "on", args.commits, args.rows, args.poll_interval, args.commit_timeout, args.jitter)
        out["commit_lag"] = commits
        for kind, r in commits.items():
            print(f"{kind:15s} commit->visible in PyIceberg (REST catalog): p50 {r['p50_s']:.2f} s, p99 {r['p99_s']:.2f} s, "
                  f"max {r['max_s']:.2f} s; {r['visible']}/{r['commits']} commits visible", flush=True)
        rates: Dict[str, List[float]] = {"off": [], "on": []}
        for i in range(args.rounds):
            for name, srv in (("off", off), ("on", on)):
                r = back_to_back(srv, "b2b", args.round_seconds, args.rows, first_epoch=i * 1_000_000)
                rates[name].append(r)
                print(f"round {i + 1} publishing {name:3s}: {r:.1f} epochs/s", flush=True)
        ratio = sum(rates["on"]) / sum(rates["off"])
        pairs = [a / b for a, b in zip(rates["on"], rates["off"])]
        out["back_to_back"] = {"off": rates["off"], "on": rates["on"], "ratio": ratio, "pair_ratios": pairs}
        print(f"publishing on/off epochs/s: {ratio:.2f}x overall; per pair {', '.join(f'{p:.2f}x' for p in pairs)}"
              f" (median {statistics.median(pairs):.2f}x)", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
