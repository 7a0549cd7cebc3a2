#!/usr/bin/env python3
"""flight-sink against the tools users would pick instead, on the same data, in one run.

`make bench-peers` runs this. It installs bench/requirements.txt into a virtualenv (default
~/.cache/flight-sink/bench-venv, or $FLIGHT_SINK_BENCH_VENV) and re-runs itself there, builds
the flight-sink server and bench/discard with `go build`, starts both on free loopback ports
over a temporary root, and measures:

  (a) Flight DoPut into a server that decodes and drops every batch (the network bound)
  (b) pyarrow writing Parquet locally, zstd level 1, fsync'd (the encode bound)
  (c) pylance   lance.write_dataset(mode="append") per epoch
  (d) deltalake write_deltalake(mode="append") per epoch
  (e) flight-sink, direct route (one table version per epoch)
  (f) flight-sink, MemWAL route (a table created with {"memwal": {"shards": 2}})

for two workloads, large batches (MB/s) and the 1-second trigger (1,000-row epochs: epochs/s,
ack p50/p99), plus the read-back time of each final table. It writes docs/benchmarks.md and
docs/benchmarks/*.png (unless --no-doc) and stops everything it started.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
REQUIREMENTS = BENCH / "requirements.txt"
DEFAULT_VENV = Path(os.environ.get("FLIGHT_SINK_BENCH_VENV", Path.home() / ".cache/flight-sink/bench-venv"))


# ----------------------------------------------------------------------------------------------
# Bootstrap: run inside a virtualenv that has the pinned packages.


def pinned() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, ver = line.split("==", 1)
            pins[name.strip()] = ver.strip()
    return pins


def have_pins() -> bool:
    from importlib import metadata

    try:
        return all(metadata.version(n) == v for n, v in pinned().items())
    except metadata.PackageNotFoundError:
        return False


def bootstrap(venv: Path) -> None:
    """Re-exec inside venv (created and filled from requirements.txt when needed)."""
    if Path(sys.prefix).resolve() == venv.resolve() and have_pins():
        return
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating virtualenv {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    check = subprocess.run([str(py), "-c", "import sys; sys.path.insert(0, %r); import peers; sys.exit(0 if peers.have_pins() else 1)" % str(BENCH)])
    if check.returncode != 0:
        print(f"installing {REQUIREMENTS.relative_to(REPO)} into {venv}", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)], check=True)
    os.execv(str(py), [str(py), str(Path(__file__).resolve())] + sys.argv[1:])


# ----------------------------------------------------------------------------------------------
# Data: the 8 mixed columns of cmd/flight-sink/internal/flightbench's Schema.

COUNTRIES = ["US", "DE", "FR", "JP", "BR", "IN", "GB", "CA", "AU", "NL", "ES", "IT"]
BASE_US = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)


def schema():
    import pyarrow as pa

    return pa.schema([
        pa.field("id", pa.int64(), nullable=False),
        pa.field("user_id", pa.int32(), nullable=False),
        pa.field("amount", pa.float64(), nullable=False),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("country", pa.string(), nullable=False),  # low cardinality (12 values)
        pa.field("session", pa.string(), nullable=False),  # high cardinality (32 random hex chars)
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("score", pa.int64(), nullable=True),  # 20 % nulls
    ])


def make_batch(first: int, rows: int, seed: int):
    """rows rows with ids first.., deterministic in (first, rows, seed)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng([seed, first])
    ids = np.arange(first, first + rows, dtype=np.int64)
    hexed = rng.integers(0, 256, size=rows * 16, dtype=np.uint8).tobytes().hex().encode()
    offsets = np.arange(0, 32 * (rows + 1), 32, dtype=np.int32)
    session = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(hexed))
    country = pa.array(np.array(COUNTRIES, dtype=object)[rng.integers(0, len(COUNTRIES), rows)], pa.string())
    cols = [
        pa.array(ids),
        pa.array(rng.integers(0, 100_000, rows, dtype=np.int32)),
        pa.array(rng.integers(0, 1_000_000, rows) / 100.0),
        pa.array(rng.integers(0, 10, rows) != 0),
        country,
        session,
        pa.array(BASE_US + first + np.arange(rows, dtype=np.int64) * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(rng.integers(0, 1000, rows, dtype=np.int64), mask=rng.integers(0, 5, rows) == 0),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema())


def arrow_bytes(batches) -> int:
    """Size of the batches' Arrow buffers: the uncompressed payload behind every MB/s figure."""
    return sum(b.nbytes for b in batches)


# ----------------------------------------------------------------------------------------------
# Processes: flight-sink and the discarding server, on free loopback ports.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    def __init__(self, name: str, argv: list[str], log: Path):
        self.name = name
        self.log = open(log, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def wait_flight(addr: str, proc: Proc, timeout: float = 60) -> None:
    import pyarrow as pa
    import pyarrow.flight as fl

    deadline = time.time() + timeout
    while True:
        if proc.p.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.p.returncode}; see {proc.log.name}")
        try:
            c = fl.connect(f"grpc://{addr}")
            try:
                list(c.list_actions())
            except pa.ArrowNotImplementedError:  # the discarding server serves DoPut only
                pass
            c.close()
            return
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def go_build(go: str, out: Path, pkg: str) -> None:
    subprocess.run([go, "build", "-o", str(out), pkg], cwd=REPO, check=True)


# ----------------------------------------------------------------------------------------------
# Peers. Each writer takes (batches, epoch) and returns when the epoch is durable / acknowledged.


class FlightPeer:
    def __init__(self, addr: str):
        import pyarrow.flight as fl

        self.fl = fl
        self.client = fl.connect(f"grpc://{addr}")

    def put(self, cmd: dict, batches) -> dict:
        desc = self.fl.FlightDescriptor.for_command(json.dumps(cmd).encode())
        writer, reader = self.client.do_put(desc, batches[0].schema)
        for b in batches:
            writer.write_batch(b)
        writer.done_writing()
        buf = reader.read()
        writer.close()
        return json.loads(buf.to_pybytes()) if buf is not None else {}

    def read(self, table: str):
        tk = self.fl.Ticket(json.dumps({"table": table}).encode())
        return self.client.do_get(tk).read_all()

    def action(self, typ: str, body: dict):
        res = list(self.client.do_action(self.fl.Action(typ, json.dumps(body).encode())))
        return json.loads(res[0].body.to_pybytes()) if res else None


def make_writers(work: Path, discard_addr: str, sink_addr: str, tag: str):
    """The six peers for one workload; each writer(batches, epoch) lands one epoch."""
    import deltalake
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq

    disc = FlightPeer(discard_addr)
    sink = FlightPeer(sink_addr)
    pq_dir = work / f"parquet-{tag}"
    pq_dir.mkdir(parents=True, exist_ok=True)
    lance_uri = str(work / f"lance-{tag}.lance")
    delta_uri = str(work / f"delta-{tag}")
    qid = f"bench-{tag}"

    def discard(batches, epoch):
        ack = disc.put({"table": "discard", "query_id": qid, "epoch_id": epoch}, batches)
        assert ack.get("status") == "discarded", ack

    def parquet(batches, epoch):
        path = pq_dir / f"part-{epoch:06d}.parquet"
        with open(path, "wb") as f:
            # The file flight-sink writes: zstd level 1, dictionary only for the low-cardinality column.
            with pq.ParquetWriter(f, batches[0].schema, compression="zstd", compression_level=1,
                                  use_dictionary=["country"]) as w:
                for b in batches:
                    w.write_batch(b)
            f.flush()
            os.fsync(f.fileno())

    def pylance(batches, epoch):
        lance.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), lance_uri, mode="append")

    def delta(batches, epoch):
        deltalake.write_deltalake(delta_uri, pa.Table.from_batches(batches), mode="append")

    def route(table, create):
        def w(batches, epoch):
            ack = sink.put({"table": table, "query_id": qid, "epoch_id": epoch, "create": create}, batches)
            assert ack.get("status") == "committed", ack
        return w

    writers = {
        "discard": discard,
        "parquet": parquet,
        "pylance": pylance,
        "deltalake": delta,
        "direct": route(f"direct_{tag}", True),
        "memwal": route(f"memwal_{tag}", {"memwal": {"shards": 2}}),
    }
    readers = {
        "parquet": lambda: pq.read_table(pq_dir),
        "pylance": lambda: lance.dataset(lance_uri).to_table(),
        "deltalake": lambda: deltalake.DeltaTable(delta_uri).to_pyarrow_table(),
        "direct": lambda: sink.read(f"direct_{tag}"),
        "memwal": lambda: sink.read(f"memwal_{tag}"),
    }
    return writers, readers, sink


PEERS = ["discard", "parquet", "pylance", "deltalake", "direct", "memwal"]
LABEL = {
    "discard": "(a) Flight DoPut, discarding server",
    "parquet": "(b) pyarrow Parquet, local file",
    "pylance": "(c) pylance write_dataset append",
    "deltalake": "(d) deltalake write_deltalake append",
    "direct": "(e) flight-sink, direct route",
    "memwal": "(f) flight-sink, MemWAL route",
}
SHORT = {"discard": "(a) discard", "parquet": "(b) parquet", "pylance": "(c) pylance", "deltalake": "(d) deltalake",
         "direct": "(e) fs direct", "memwal": "(f) fs MemWAL"}


def pct(xs, p):
    s = sorted(xs)
    return s[int(p * (len(s) - 1))]


def read_back(readers, want_rows: int, want_distinct: int, repeat: int):
    out = {}
    for name, rd in readers.items():
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            tbl = rd()
            times.append(time.perf_counter() - t0)
        rows = tbl.num_rows
        distinct = len(tbl.column("id").unique())
        out[name] = {"seconds": min(times), "rows": rows, "ok": rows == want_rows and distinct == want_distinct}
        del tbl
    return out


def run_large(args, work, discard_addr, sink_addr, log):
    batches = [make_batch(i * args.batch_rows, args.batch_rows, 1) for i in range(args.batches)]
    nbytes = arrow_bytes(batches)
    writers, readers, _ = make_writers(work, discard_addr, sink_addr, "large")
    peers = args.peers
    times = {p: [] for p in peers}
    rounds = args.rounds + 1  # round 0 warms up and is not counted
    for r in range(rounds):
        order = peers[r % len(peers):] + peers[:r % len(peers)]  # rotate so drift hits each peer alike
        for p in order:
            t0 = time.perf_counter()
            writers[p](batches, r)
            d = time.perf_counter() - t0
            if r > 0:
                times[p].append(d)
            log(f"  large round {r} {p:10s} {d * 1000:9.1f} ms  {nbytes / 1e6 / d:8.1f} MB/s")
    res = {p: {"seconds": times[p], "best_mbps": nbytes / 1e6 / min(times[p]),
               "median_mbps": nbytes / 1e6 / statistics.median(times[p])} for p in peers}
    log("  reading back the large-batch tables")
    readers = {p: rd for p, rd in readers.items() if p in peers}
    # every round lands the same batches again: rounds x the rows, each id rounds times
    rb = read_back(readers, rounds * len(batches) * args.batch_rows, len(batches) * args.batch_rows, 2)
    return {"arrow_bytes": nbytes, "rows": args.batches * args.batch_rows, "peers": res, "read_back": rb}


def run_trigger(args, work, discard_addr, sink_addr, log):
    epochs = [make_batch(e * args.epoch_rows, args.epoch_rows, 2) for e in range(args.epochs)]
    writers, readers, sink = make_writers(work, discard_addr, sink_addr, "trigger")
    peers = args.peers
    lat = {p: [] for p in peers}
    t_start = time.perf_counter()
    for e, b in enumerate(epochs):  # interleaved: every peer lands epoch e before any lands e+1
        for p in peers:
            t0 = time.perf_counter()
            writers[p]([b], e)
            lat[p].append(time.perf_counter() - t0)
        if (e + 1) % 100 == 0:
            log(f"  trigger epoch {e + 1}/{args.epochs} after {time.perf_counter() - t_start:.0f} s: "
                + ", ".join(f"{p} p50 {pct(lat[p], 0.5) * 1000:.1f} ms" for p in peers))
    res = {p: {"epochs_per_s": len(lat[p]) / sum(lat[p]), "p50_ms": pct(lat[p], 0.5) * 1000,
               "p99_ms": pct(lat[p], 0.99) * 1000, "max_ms": max(lat[p]) * 1000, "lat_ms": [x * 1000 for x in lat[p]]}
           for p in peers}
    stats = {t: sink.action("table_stats", {"table": t}) for t in ("direct_trigger", "memwal_trigger") if t.split("_")[0] in peers}
    log("  reading back the trigger tables")
    readers = {p: rd for p, rd in readers.items() if p in peers}
    rb = read_back(readers, args.epochs * args.epoch_rows, args.epochs * args.epoch_rows, 2)
    return {"epochs": args.epochs, "epoch_rows": args.epoch_rows, "peers": res, "read_back": rb, "table_stats": stats}


# ----------------------------------------------------------------------------------------------
# Machine, plots, document.


def machine(go: str, load_start) -> dict:
    import deltalake
    import lance
    import matplotlib
    import pyarrow as pa

    mem_kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    gov = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(), "python": platform.python_version(), "go": gov.replace("go version ", ""),
        "pyarrow": pa.__version__, "pylance": lance.__version__, "deltalake": deltalake.__version__,
        "matplotlib": matplotlib.__version__, "git": rev or "unknown",
        "load_start": load_start, "load_end": os.getloadavg(),
    }


def plots(res, outdir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    colors = {"discard": "#9e9e9e", "parquet": "#607d8b", "pylance": "#ff9800", "deltalake": "#3f51b5",
              "direct": "#2e7d32", "memwal": "#66bb6a"}
    files = []

    L = res["large"]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    vals = [L["peers"][p]["best_mbps"] for p in PEERS]
    meds = [L["peers"][p]["median_mbps"] for p in PEERS]
    bars = ax.barh([SHORT[p] for p in PEERS], vals, color=[colors[p] for p in PEERS])
    ax.scatter(meds, range(len(PEERS)), color="black", marker="|", s=200, zorder=3, label="median")
    for b, v in zip(bars, vals):
        ax.text(v, b.get_y() + b.get_height() / 2, f" {v:.0f}", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("MB/s of Arrow data (best of %d; tick = median)" % len(L["peers"]["discard"]["seconds"]))
    ax.set_title("Large batches: one epoch of %d x %s rows (%.0f MB Arrow)"
                 % (res["args"]["batches"], f"{res['args']['batch_rows']:,}", L["arrow_bytes"] / 1e6))
    ax.set_xlim(0, max(vals) * 1.15)
    fig.tight_layout()
    fig.savefig(outdir / "throughput.png", dpi=110)
    plt.close(fig)
    files.append("throughput.png")

    T = res["trigger"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    eps = [T["peers"][p]["epochs_per_s"] for p in PEERS]
    bars = a1.barh([SHORT[p] for p in PEERS], eps, color=[colors[p] for p in PEERS])
    for b, v in zip(bars, eps):
        a1.text(v, b.get_y() + b.get_height() / 2, f" {v:.0f}", va="center", fontsize=9)
    a1.invert_yaxis()
    a1.set_xlim(0, max(eps) * 1.15)
    a1.set_xlabel("epochs/s, back to back")
    a1.set_title("1-second trigger: %d epochs of %s rows" % (T["epochs"], f"{T['epoch_rows']:,}"))
    for p in PEERS:
        xs = sorted(T["peers"][p]["lat_ms"])
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        a2.plot(xs, ys, label=SHORT[p], color=colors[p])
    a2.set_xscale("log")
    a2.set_xlabel("ack latency per epoch, ms (log scale)")
    a2.set_ylabel("fraction of epochs")
    a2.set_title("ack latency CDF")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(outdir / "trigger.png", dpi=110)
    plt.close(fig)
    files.append("trigger.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, (key, title) in zip(axes, [("large", "large-batch tables"), ("trigger", "1-second-trigger tables")]):
        rb = res[key]["read_back"]
        names = [p for p in PEERS if p in rb]
        secs = [rb[p]["seconds"] * 1000 for p in names]
        bars = ax.barh([SHORT[p] for p in names], secs, color=[colors[p] for p in names])
        for b, v in zip(bars, secs):
            ax.text(v, b.get_y() + b.get_height() / 2, f" {v:.0f}", va="center", fontsize=9)
        ax.invert_yaxis()
        ax.set_xlim(0, max(secs) * 1.2)
        ax.set_xlabel("ms to read the whole table into Arrow (best of 2)")
        ax.set_title("Read-back, %s (%s rows)" % (title, f"{rb[names[0]]['rows']:,}"))
    fig.tight_layout()
    fig.savefig(outdir / "readback.png", dpi=110)
    plt.close(fig)
    files.append("readback.png")
    return files


def targets(res) -> list[tuple[str, str, float, float, bool]]:
    L, T = res["large"]["peers"], res["trigger"]["peers"]
    rows = []

    def add(what, detail, got, need):
        rows.append((what, detail, got, need, got >= need))

    add("flight-sink direct ≥ 0.8× pyarrow local Parquet (large batches, best MB/s)",
        f"{L['direct']['best_mbps']:.0f} / {L['parquet']['best_mbps']:.0f} MB/s",
        L["direct"]["best_mbps"] / L["parquet"]["best_mbps"], 0.8)
    add("MemWAL route ≥ 0.8× discarding Flight server (large batches, best MB/s)",
        f"{L['memwal']['best_mbps']:.0f} / {L['discard']['best_mbps']:.0f} MB/s",
        L["memwal"]["best_mbps"] / L["discard"]["best_mbps"], 0.8)
    for fs in ("direct", "memwal"):
        for peer in ("pylance", "deltalake"):
            add(f"1-second trigger: flight-sink {fs} ≥ 5× {peer} (epochs/s)",
                f"{T[fs]['epochs_per_s']:.0f} / {T[peer]['epochs_per_s']:.0f} epochs/s",
                T[fs]["epochs_per_s"] / T[peer]["epochs_per_s"], 5.0)
    return rows


def write_doc(res, doc: Path, pngs: list[str]) -> None:
    m, a = res["machine"], res["args"]
    L, T = res["large"], res["trigger"]
    ls, le = m["load_start"], m["load_end"]
    out = []
    w = out.append
    w("# Benchmarks: flight-sink against the tools users would pick instead\n")
    w("<!-- Generated by bench/peers.py (`make bench-peers`); edit the driver or bench/analysis.md, not this file. -->\n")
    w("Users choose between flight-sink and writing from Spark or Python straight into a table format. "
      "This page measures, side by side in one run on the same generated data, what each costs. "
      "All numbers below come from the run described under *Machine*; rerun `make bench-peers` to "
      "regenerate the page and the plots.\n")
    w("## Machine\n")
    w(f"- run: {m['date']}, flight-sink `{m['git']}`")
    w(f"- {m['nproc']} cores ({m['cpu']}), {m['mem_gib']} GiB memory, Linux {m['kernel']}")
    w(f"- Python {m['python']}, {m['go']}; pyarrow {m['pyarrow']}, pylance {m['pylance']}, deltalake {m['deltalake']}")
    w(f"- load average (1/5/15 min) at the start {ls[0]:.2f} / {ls[1]:.2f} / {ls[2]:.2f}, at the end "
      f"{le[0]:.2f} / {le[1]:.2f} / {le[2]:.2f}. "
      + ("**The machine was shared with other jobs when the run started** (a load near or above its core count): "
         "absolute numbers are lower and noisier than on an idle machine; the ratios, measured "
         "interleaved, are what to read." if ls[0] > m["nproc"] * 0.75
         else "The machine was otherwise idle when the run started (the load at the end is the run's own)."))
    w(f"- client, servers and disk are all on this one machine: every peer competes for the same {m['nproc']} cores; "
      "the Flight peers talk over loopback TCP.\n")
    w("## What is measured\n")
    w("Data: the 8 mixed columns of `cmd/flight-sink/internal/flightbench` (`int64 id`, `int32 user_id`, `float64 amount`, "
      "`bool ok`, low-cardinality `string country` (12 values), high-cardinality `string session` (32 random hex "
      "characters), `timestamp[us, UTC] ts`, nullable `int64 score` with 20 % nulls), generated once with a fixed "
      "seed and handed to every peer as the same Arrow record batches. MB/s is Arrow buffer bytes "
      "(uncompressed payload) per second of wall time.\n")
    w("| peer | what one epoch is |")
    w("|---|---|")
    w("| (a) Flight DoPut, discarding server | one `pyarrow.flight` DoPut stream into `bench/discard` (Go, arrow-go): decodes every batch, drops it, acks. The network + IPC bound |")
    w("| (b) pyarrow Parquet, local file | `pyarrow.parquet.ParquetWriter`, zstd level 1 (flight-sink's codec), one row group per batch, then `fsync` (flight-sink fsyncs too). The encode bound; not a table: no version, no commit |")
    w("| (c) pylance | `lance.write_dataset(reader, uri, mode=\"append\")` (defaults) |")
    w("| (d) deltalake | `write_deltalake(uri, table, mode=\"append\")` (defaults) |")
    w("| (e) flight-sink direct route | `pyarrow.flight` DoPut with the CMD descriptor `{\"table\", \"query_id\", \"epoch_id\", \"create\": true}`; timed until the `committed` PutResult ack is read (the epoch is a durable table version) |")
    w("| (f) flight-sink MemWAL route | the same into a table created with `\"create\": {\"memwal\": {\"shards\": 2}}` (route `auto`); the ack means the epoch is durable in a shard's write-ahead log |")
    w("")
    w("Every peer uses one client (one connection, one writer) and lands epochs one after another; "
      "the flight-sink server and the discarding server run as separate processes built by the driver "
      "with `go build`, over a temporary root on the local disk, with default flags.\n")
    w(f"- **Large batches**: one epoch = one write of {a['batches']} batches x {a['batch_rows']:,} rows "
      f"({L['rows']:,} rows, {L['arrow_bytes'] / 1e6:.1f} MB Arrow) — one DoPut stream for the Flight peers, one "
      f"file for Parquet, one `write_dataset`/`write_deltalake` call for the table formats. One warm-up round, then "
      f"{a['rounds']} measured rounds; within a round the peers run one after another, and the order rotates "
      "between rounds. The table gives the best and the median round.")
    w(f"- **1-second trigger**: {T['epochs']} epochs of {T['epoch_rows']:,} rows (a Spark micro-batch every second "
      f"would be {T['epochs'] / 60:.0f} minutes of stream; {T['epochs']} rather than more to keep the run short on a "
      "small machine). The peers are interleaved: every peer lands epoch *e* before any "
      "lands *e+1*, so load drift hits them alike. Epochs/s = epochs / the summed ack latency of that peer "
      "(back-to-back capacity; a real 1-second trigger sends one per second). Ack latency = call start to "
      "acknowledgement (for pylance/deltalake: to the call's return).")
    w("- **Read-back**: the whole final table of each workload into one Arrow table in this Python process "
      "(best of 2): flight-sink DoGet `read_all()`, `lance.dataset(uri).to_table()`, "
      "`DeltaTable(uri).to_pyarrow_table()`, and for reference `pyarrow.parquet.read_table` over the Parquet "
      "files. Row counts and distinct ids are checked.\n")
    w("## Results\n")
    w(f"### Large batches ({a['batches']} x {a['batch_rows']:,} rows per epoch, {L['arrow_bytes'] / 1e6:.1f} MB Arrow)\n")
    w("| peer | best MB/s | median MB/s | best s/epoch | vs (a) discard | vs (b) Parquet |")
    w("|---|---:|---:|---:|---:|---:|")
    for p in PEERS:
        r = L["peers"][p]
        w(f"| {LABEL[p]} | {r['best_mbps']:.1f} | {r['median_mbps']:.1f} | {min(r['seconds']):.3f} | "
          f"{r['best_mbps'] / L['peers']['discard']['best_mbps']:.2f}x | {r['best_mbps'] / L['peers']['parquet']['best_mbps']:.2f}x |")
    w("\n![large-batch throughput](benchmarks/throughput.png)\n")
    w(f"### 1-second trigger ({T['epochs']} epochs of {T['epoch_rows']:,} rows)\n")
    w("| peer | epochs/s | ack p50 ms | ack p99 ms | max ms | flight-sink direct vs it | flight-sink MemWAL vs it |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for p in PEERS:
        r = T["peers"][p]
        w(f"| {LABEL[p]} | {r['epochs_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.1f} | "
          f"{T['peers']['direct']['epochs_per_s'] / r['epochs_per_s']:.2f}x | {T['peers']['memwal']['epochs_per_s'] / r['epochs_per_s']:.2f}x |")
    st = T.get("table_stats", {})
    if st:
        d, mw = st.get("direct_trigger") or {}, st.get("memwal_trigger") or {}
        w(f"\nAfter the run the direct table is at version {d.get('version')} (one version per epoch, plus "
          f"maintenance) with {d.get('fragments')} fragments (background maintenance compacts as epochs arrive); the "
          f"MemWAL table's base table holds {mw.get('rows', 0):,} of the {T['epochs'] * T['epoch_rows']:,} rows in "
          f"{mw.get('fragments')} fragment(s): the server folds a shard into it once 4 flushed generations (400,000 rows "
          "with the default memtable) wait; the other rows sit in the shards and are read from there at once.")
    w("\n![1-second trigger](benchmarks/trigger.png)\n")
    w("### Read-back of the final tables\n")
    w("| peer | large-batch table | rows | 1-second-trigger table | rows |")
    w("|---|---:|---:|---:|---:|")
    for p in PEERS:
        if p not in L["read_back"]:
            continue
        rl, rt = L["read_back"][p], T["read_back"][p]
        ok = lambda r: "" if r["ok"] else " **(rows wrong)**"
        note = " (reference: plain files)" if p == "parquet" else ""
        w(f"| {LABEL[p]}{note} | {rl['seconds'] * 1000:.0f} ms | {rl['rows']:,}{ok(rl)} | {rt['seconds'] * 1000:.0f} ms | {rt['rows']:,}{ok(rt)} |")
    w("\n![read-back](benchmarks/readback.png)\n")
    w("## Targets (one run)\n")
    w("| target | measured | ratio | met |")
    w("|---|---|---:|:---:|")
    for what, detail, got, need, ok in targets(res):
        w(f"| {what} | {detail} | {got:.2f}x | {'yes' if ok else '**no**'} |")
    w("")
    analysis = BENCH / "analysis.md"
    if analysis.exists():
        w(analysis.read_text().rstrip() + "\n")
    w("## Go micro-benchmarks\n")
    w("The hot paths have `testing.B` benchmarks (not rerun for this page), in `go test -bench` format for "
      "`benchstat`: commit — `engine` `BenchmarkCommitLatency`, `BenchmarkHistory`; dedupe check — `streaming` "
      "`BenchmarkDedupeCheck` (watermark hit, window scan, new query; 100 and 10,000 versions); WAL append — "
      "`memwal` `BenchmarkWALAppend` (raw entry create) and `BenchmarkEpochPut` (a whole MemWAL put vs a direct "
      "append, 1 and 8 streams); Parquet encode — `engine` `BenchmarkAppend` against `BenchmarkPqarrowBaseline` "
      "(plain single-threaded pqarrow, the Go-side encode bound); DoGet — `flightsvc` `BenchmarkDoGet` (full read "
      "over a real loopback Flight connection) and `BenchmarkDoPutEpoch`; plus the table-health benchmarks. "
      "`make bench` runs all of them and then `flight-sink bench` (the Go-client Flight benchmark of "
      "`cmd/flight-sink/internal/flightbench`: discard vs sink throughput, 1,000-row epoch rate, long-history ack latency, "
      "direct vs MemWAL for 1 and 8 concurrent queries):\n")
    w("```sh")
    w("make bench                         # every Go benchmark, then flight-sink bench (BENCHTIME=10s for steadier numbers)")
    w("go test -run '^$' -bench . -benchmem -count 6 ./engine/ ./memwal/ ./streaming/ ./flightsvc/ > new.txt   # then: benchstat old.txt new.txt")
    w("bin/flight-sink bench --only throughput")
    w("bin/flight-sink bench --only memwal-floor   # MemWAL against a discarding server and an fdatasync probe, in one run")
    w("make bench-servers                          # 16 queries over 2 servers on versitygw, 20 ms per store call: direct vs MemWAL")
    w("```\n")
    w("## Reproduce\n")
    w("```sh")
    w("make bench-peers                                   # this page and docs/benchmarks/*.png")
    w("python3 bench/peers.py --epochs 3600 --rounds 5    # longer run; --help lists the knobs")
    w("python3 bench/peers.py --quick --no-doc            # smoke test, writes nothing")
    w("```\n")
    venv = str(DEFAULT_VENV).replace(str(Path.home()), "~", 1)
    w(f"The driver installs `bench/requirements.txt` into a virtualenv (`{venv}` by default, "
      "`FLIGHT_SINK_BENCH_VENV` to move it), needs Go to build the servers, and removes its temporary root "
      "when done (`--keep` keeps it).")
    doc.write_text("\n".join(out) + "\n")


# ----------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-rows", type=int, default=65536, help="rows per batch, large-batch workload")
    ap.add_argument("--batches", type=int, default=16, help="batches per large epoch")
    ap.add_argument("--rounds", type=int, default=5, help="measured large-batch rounds (after one warm-up)")
    ap.add_argument("--epochs", type=int, default=600, help="epochs in the 1-second-trigger workload")
    ap.add_argument("--epoch-rows", type=int, default=1000, help="rows per trigger epoch")
    ap.add_argument("--only", choices=["large", "trigger"], help="run one workload (implies --no-doc)")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of %s (a subset implies --no-doc)" % ",".join(PEERS))
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that everything runs")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md and the plots")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--render", type=Path, help="only rewrite the doc and plots from a --json file of an earlier run")
    ap.add_argument("--keep", action="store_true", help="keep the temporary root")
    ap.add_argument("--profile", type=Path, help="write the flight-sink server's CPU profile of the whole run here "
                    "(serve --cpuprofile; read it with `go tool pprof`, -focus writeMemWALEpoch or writeAll to split the routes)")
    ap.add_argument("--bin", type=Path, help="use flight-sink and discard binaries from this directory instead of building them")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--no-venv", action="store_true", help="use this interpreter as is (packages already installed)")
    args = ap.parse_args()
    if not args.no_venv:
        bootstrap(args.venv)
    if args.render:
        res = json.loads(args.render.read_text())
        pngs = plots(res, args.doc.parent / "benchmarks")
        write_doc(res, args.doc, pngs)
        print(f"wrote {args.doc} and {', '.join(pngs)} from {args.render}")
        return 0
    args.peers = [p for p in PEERS if p in args.peers.split(",")]
    if args.only or args.peers != PEERS:
        args.no_doc = True  # the page needs every peer and both workloads
    if args.quick:
        args.batch_rows, args.batches, args.rounds, args.epochs = 4096, 2, 1, 20

    load_start = os.getloadavg()
    go = os.environ.get("GO", "go")
    work = Path(tempfile.mkdtemp(prefix="flight-sink-peers-"))
    procs: list[Proc] = []
    t_all = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_all:7.1f}s] {msg}", flush=True)

    try:
        if args.bin:
            for exe in ("flight-sink", "discard"):
                shutil.copy2(args.bin / exe, work / exe)
        else:
            log(f"building flight-sink and bench/discard into {work}")
            go_build(go, work / "flight-sink", "./cmd/flight-sink")
            go_build(go, work / "discard", "./bench/discard")
        sink_port = free_port()
        sink_addr = f"127.0.0.1:{sink_port}"
        (work / "root").mkdir()
        sink_argv = [str(work / "flight-sink"), "serve", "--listen", sink_addr, "--http-listen", "off",
                     "--root", str(work / "root"), "--log-level", "warn"]
        if args.profile:
            sink_argv += ["--cpuprofile", str(args.profile.resolve())]
        sink = Proc("flight-sink", sink_argv, work / "flight-sink.log")
        procs.append(sink)
        disc = Proc("discard", [str(work / "discard"), "-listen", "127.0.0.1:0"], work / "discard.log")
        procs.append(disc)
        line = disc.p.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"discard server did not start: {line!r}")
        discard_addr = line.split()[-1]
        wait_flight(sink_addr, sink)
        wait_flight(discard_addr, disc)
        log(f"flight-sink on {sink_addr} (pid {sink.p.pid}), discard on {discard_addr} (pid {disc.p.pid})")

        res = {"args": {k: v for k, v in vars(args).items() if k in ("batch_rows", "batches", "rounds", "epochs", "epoch_rows", "quick")}}
        if args.only in (None, "large"):
            log(f"large batches: {args.batches} x {args.batch_rows} rows, 1 warm-up + {args.rounds} rounds")
            res["large"] = run_large(args, work, discard_addr, sink_addr, log)
        if args.only in (None, "trigger"):
            log(f"1-second trigger: {args.epochs} epochs of {args.epoch_rows} rows")
            res["trigger"] = run_trigger(args, work, discard_addr, sink_addr, log)
        res["machine"] = machine(go, load_start)
    finally:
        for p in procs:
            p.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    print()
    if "large" in res:
        L = res["large"]["peers"]
        print("large batches (best MB/s):  " + ", ".join(f"{p} {L[p]['best_mbps']:.0f}" for p in L))
    if "trigger" in res:
        T = res["trigger"]["peers"]
        print("1-second trigger (epochs/s): " + ", ".join(f"{p} {T[p]['epochs_per_s']:.0f}" for p in T))
        print("ack p50/p99 ms: " + ", ".join(f"{p} {T[p]['p50_ms']:.1f}/{T[p]['p99_ms']:.1f}" for p in T))
    for key in [k for k in ("large", "trigger") if k in res]:
        print(f"read-back {key}: " + ", ".join(f"{p} {r['seconds'] * 1000:.0f} ms{'' if r['ok'] else ' (ROWS WRONG)'}"
                                              for p, r in res[key]["read_back"].items()))
    for what, detail, got, need, ok in (targets(res) if not args.no_doc else []):
        print(f"  [{'met ' if ok else 'MISS'}] {what}: {detail} = {got:.2f}x")
    if args.json:
        slim = json.loads(json.dumps(res))
        args.json.write_text(json.dumps(slim, indent=1))
    if not args.no_doc:
        pngs = plots(res, args.doc.parent / "benchmarks")
        write_doc(res, args.doc, pngs)
        print(f"wrote {args.doc} and {', '.join(pngs)}")
    bad = [k for key in ("large", "trigger") if key in res for k, r in res[key]["read_back"].items() if not r["ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
