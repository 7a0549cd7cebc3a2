#!/usr/bin/env python3
"""Spark Structured Streaming sinks side by side: flight-sink's JVM connector against Iceberg,
Delta and format("parquet"), in one Spark session, on the same prepared input.

`make bench-spark` runs this with the PySpark 4.1 environment (clients/pyspark/tools/spark41_env.sh).
It fetches the Iceberg and Delta jars from Maven Central (bench/spark_jars.sh), starts the
flight-sink server given by --server-bin on a free loopback port over a temporary root, and writes
the input once: parquet files of `--small-rows` rows (small workload) and of `--large-rows` rows
(large workload), one file per micro-batch. Every sink then reads the same files with the file
source (`maxFilesPerTrigger` 1, `trigger(availableNow=True)`, so each micro-batch is one file) in
one SparkSession (`local[2]`, every jar on `spark.jars`), with its own checkpoint (exactly once).

Sinks (--sinks picks some):
  jvm             format("flight-sink"), the JVM connector, into a plain table (direct route)
  jvm-memwal      format("flight-sink") into a table created with MemWAL shards (create_table)
  iceberg         format("iceberg") into a Hadoop catalog table
  delta           format("delta") into a path
  parquet         format("parquet") (the file sink and its _spark_metadata log)
  fb              foreachBatch(FlightSink) (Python client), direct (not in the default set)
  fb-memwal       foreachBatch(FlightSink(through_driver=True)) on a MemWAL table (ditto)
  noop            format("noop"), Spark's own sink that discards every row: the floor of any
                  DataSource V2 sink in this session (ditto)

After one untimed warm-up query per sink, each repetition runs every sink once, in order (ABCABC),
for each workload. Reported per sink:
batches/s (small) and rows/s (large) over the query's micro-batches (first batch's trigger start to
last batch's trigger end, from StreamingQueryProgress), min-max over repetitions; and "batch start ->
rows readable": the progress' trigger timestamp to the sink's own commit record of that batch
(flight-sink: the history entry stamped with the epoch; Iceberg: the snapshot's committed_at with
spark.sql.streaming.epochId; Delta: the STREAMING UPDATE commit's timestamp with epochId; parquet: the
mtime of _spark_metadata/<batch>). An epoch a MemWAL table acknowledges has no table version; its rows
are readable once addBatch returns, so its bound is the trigger start + the phases before and
including addBatch. p50 over the small workload's batches of all repetitions. Also the mean
durationMs per phase (addBatch, walCommit, commitOffsets, ...), for finding where the time goes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "clients" / "pyspark" / "src"))

from peers import Proc, free_port, make_batch, wait_flight  # noqa: E402

DEFAULT_SINKS = ["jvm", "jvm-memwal", "iceberg", "delta", "parquet"]
ALL_SINKS = DEFAULT_SINKS + ["fb", "fb-memwal", "noop"]
PHASES = ["latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution"]
# Phases that run before the sink's commit is done (MicroBatchExecution's order); commitOffsets follows.
PHASES_TO_COMMIT = ["latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch"]
MEMWAL_SHARDS = 2


def iso_ns(s: str) -> int:
    """Spark's progress timestamp (ISO 8601, ms, Z) as Unix nanoseconds."""
    t = dt.datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(t.timestamp() * 1000) * 1_000_000


def write_input(dirpath: Path, batches: int, rows: int, seed: int) -> None:
    """batches parquet files of rows rows each, mtimes 1 s apart in order (the file source takes
    the oldest first), row groups of 131,072 rows so Spark can split a large file between tasks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dirpath.mkdir(parents=True)
    base = time.time() - batches - 10
    for i in range(batches):
        b = make_batch(i * rows, rows, seed)
        t = pa.Table.from_batches([b])
        t = t.cast(pa.schema([f.with_nullable(True) for f in t.schema]))  # Spark reads every column nullable
        p = dirpath / f"part-{i:05d}.parquet"
        pq.write_table(t, p, compression="zstd", row_group_size=131_072)
        os.utime(p, (base + i, base + i))


class Bench:
    def __init__(self, args, work: Path, uri: str, jars: str, log):
        from pyspark.sql import SparkSession

        self.args, self.work, self.uri, self.log = args, work, uri, log
        self.spark = (
            SparkSession.builder.master("local[2]")
            .appName("flight-sink-bench-spark")
            .config("spark.jars", jars)
            .config("spark.driver.memory", args.driver_memory)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            # Delta rebuilds its snapshot state with this many tasks (default 50); local[2] has 2 cores.
            .config("spark.databricks.delta.snapshotPartitions", "2")
            .config("spark.sql.catalog.bench", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.bench.type", "hadoop")
            .config("spark.sql.catalog.bench.warehouse", str(work / "iceberg"))
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("WARN")
        from flight_sink import Client

        self.client = Client(uri)
        self.n = 0

    def source(self, input_dir: Path):
        schema = self.spark.read.parquet(str(input_dir)).schema
        return (self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                .parquet(str(input_dir))), schema

    def run(self, sink: str, workload: str, input_dir: Path) -> dict:
        """One streaming query of sink over every file of input_dir; returns its figures."""
        self.n += 1
        name = f"{workload}_{sink.replace('-', '_')}_{self.n}"
        out = self.work / "out" / name
        ckpt = self.work / "ckpt" / name
        df, schema = self.source(input_dir)
        w = df.writeStream.outputMode("append").option("checkpointLocation", str(ckpt)).trigger(availableNow=True)
        if sink in ("jvm-memwal", "fb-memwal"):
            self.create_memwal_table(name, schema)
        if sink in ("jvm", "jvm-memwal"):
            q = w.format("flight-sink").option("uri", self.uri).option("table", name).start()
        elif sink in ("fb", "fb-memwal"):
            from flight_sink.spark import FlightSink

            q = w.foreachBatch(FlightSink(self.uri, table=name, through_driver=sink == "fb-memwal")).start()
        elif sink == "iceberg":
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
            self.spark.sql(f"CREATE TABLE bench.db.{name} ({cols}) USING iceberg")
            q = w.format("iceberg").toTable(f"bench.db.{name}")
        elif sink == "delta":
            q = w.format("delta").start(str(out))
        elif sink == "parquet":
            q = w.format("parquet").start(str(out))
        elif sink == "noop":
            q = w.format("noop").start()
        else:
            raise ValueError(sink)
        t0 = time.perf_counter()
        q.awaitTermination()
        wall = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"{sink}: {q.exception()}")
        progs = [p for p in q.recentProgress if p.numInputRows > 0]
        qid = q.id
        commits = self.commit_times(sink, name, out, qid, max((p.batchId for p in progs), default=-1) + 1)
        res = figures(progs, commits)
        res["wall_s"] = wall
        if sink == "iceberg":
            self.spark.sql(f"DROP TABLE bench.db.{name} PURGE")
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        return res

    def create_memwal_table(self, name: str, spark_schema) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        s = to_arrow_schema(spark_schema)
        s = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f for f in s])
        self.client.create_table(name, s, memwal_shards=MEMWAL_SHARDS)

    def commit_times(self, sink: str, name: str, out: Path, qid: str, n_batches: int) -> dict[int, int]:
        """batch id -> Unix ns at which the sink recorded that batch's commit."""
        got: dict[int, int] = {}
        if sink in ("jvm", "jvm-memwal", "fb", "fb-memwal"):
            # Where the last epoch landed says the route of all (epoch_status only looks 100 versions back).
            last = self.client.epoch_status(name, query_id=qid, epoch_id=n_batches - 1)
            if last.route == "memwal":
                return got
            for h in self.client.history(name, limit=10000):
                props = h.properties
                if props.get("flight_sink.streaming.query_id") == qid and "flight_sink.streaming.epoch_id" in props:
                    got[int(props["flight_sink.streaming.epoch_id"])] = iso_ns_rfc3339(h.raw["timestamp"])  # nanoseconds: the datetime keeps microseconds
        elif sink == "iceberg":
            for r in self.spark.sql(f"SELECT committed_at, summary FROM bench.db.{name}.snapshots").collect():
                e = (r.summary or {}).get("spark.sql.streaming.epochId")
                if e is not None:
                    got[int(e)] = to_ns(r.committed_at)
        elif sink == "delta":
            for r in self.spark.sql(f"DESCRIBE HISTORY delta.`{out}`").collect():
                params = r.operationParameters or {}
                if r.operation == "STREAMING UPDATE" and "epochId" in params:
                    got[int(params["epochId"])] = to_ns(r.timestamp)
        elif sink == "parquet":
            for p in (out / "_spark_metadata").iterdir():
                head = p.name.removesuffix(".compact")  # every 10th batch's log entry is a compaction
                if head.isdigit():
                    got[int(head)] = p.stat().st_mtime_ns
        return got

    def close(self) -> None:
        self.client.close()
        self.spark.stop()


def iso_ns_rfc3339(s: str) -> int:
    """The server's RFC 3339 timestamp with nanoseconds as Unix nanoseconds."""
    head, _, frac = s.rstrip("Z").partition(".")
    t = dt.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def to_ns(t: dt.datetime) -> int:
    """A Spark TIMESTAMP (a naive datetime in the session time zone, UTC) as Unix nanoseconds."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1_000_000) * 1000


def figures(progs, commits: dict[int, int]) -> dict:
    starts = [iso_ns(p.timestamp) for p in progs]
    ends = [s + p.durationMs.get("triggerExecution", 0) * 1_000_000 for s, p in zip(starts, progs)]
    span = (max(ends) - min(starts)) / 1e9
    rows = sum(p.numInputRows for p in progs)
    lat, bounded = [], 0
    for s, p in zip(starts, progs):
        c = commits.get(p.batchId)
        if c is None:  # no commit record with a time (an epoch held by MemWAL shards): the addBatch bound
            bounded += 1
            c = s + sum(p.durationMs.get(k, 0) for k in PHASES_TO_COMMIT) * 1_000_000
        lat.append((c - s) / 1e6)
    phases = {k: statistics.fmean(p.durationMs.get(k, 0) for p in progs) for k in PHASES}
    return {"batches": len(progs), "rows": rows, "span_s": span, "batches_per_s": len(progs) / span,
            "rows_per_s": rows / span, "latency_ms": lat, "latency_bounded": bounded, "phases_ms": phases}


def rng(vals, fmt) -> str:
    return fmt(min(vals)) + ("" if len(vals) == 1 else "–" + fmt(max(vals)))


def human_rows(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.0f} k" if v >= 1e4 else f"{v:.0f}"


def report(res: dict, sinks: list[str], args) -> str:
    lines = []
    w = lines.append
    ice = res.get("iceberg")
    w(f"| sink | {args.small_rows:,}-row batches/s | {args.large_rows:,}-row batches, rows/s | "
      "batch start → rows readable p50 (small) | ÷ Iceberg per repetition (small; large) |")
    w("|---|---|---|---|---|")
    for s in sinks:
        r = res[s]
        small = [x["batches_per_s"] for x in r["small"]]
        large = [x["rows_per_s"] for x in r["large"]]
        lat = [v for x in r["small"] for v in x["latency_ms"]]
        bounded = sum(x["latency_bounded"] for x in r["small"])
        p50 = f"{statistics.median(lat):.0f} ms" + (f" ({bounded} bounded by addBatch)" if bounded else "") if lat else "-"
        vs = "-"
        if ice and s != "iceberg":
            # Within a repetition: the sinks ran minutes apart, repetitions may be further apart.
            per = [", ".join(f"{a / b:.2f}×" for a, b in zip(mine, [x[k] for x in ice[wl]]))
                   for mine, wl, k in ((small, "small", "batches_per_s"), (large, "large", "rows_per_s"))]
            vs = "; ".join(p or "-" for p in per)
        w(f"| {LABELS[s]} | {rng(small, lambda v: f'{v:.2f}') if small else '-'} | "
          f"{rng(large, human_rows) if large else '-'} | {p50} | {vs} |")
    w("")
    w("Mean durationMs per micro-batch (StreamingQueryProgress), all repetitions:")
    w("")
    w("| sink | workload | " + " | ".join(PHASES) + " |")
    w("|---|---|" + "---|" * len(PHASES))
    for s in sinks:
        for wl in ("small", "large"):
            xs = res[s][wl]
            if xs:
                w(f"| {s} | {wl} | " + " | ".join(f"{statistics.fmean(x['phases_ms'][k] for x in xs):.0f}" for k in PHASES) + " |")
    return "\n".join(lines)


LABELS = {
    "jvm": '`format("flight-sink")` JVM connector, direct',
    "jvm-memwal": '`format("flight-sink")` JVM connector, MemWAL table',
    "iceberg": 'Iceberg 1.12 `format("iceberg")` (Hadoop catalog)',
    "delta": 'Delta 4.3.1 `format("delta")`',
    "parquet": '`format("parquet")`',
    "fb": "`foreachBatch(FlightSink)`, direct",
    "fb-memwal": "`foreachBatch(FlightSink(through_driver=True))`, MemWAL table",
    "noop": '`format("noop")` (discards every row)',
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-bin", type=Path, default=REPO / "bin" / "flight-sink", help="the flight-sink server binary")
    ap.add_argument("--jar", type=Path, help="the connector jar (default: clients/spark/target/flight-sink-spark-*.jar)")
    ap.add_argument("--sinks", default=",".join(DEFAULT_SINKS), help=f"comma-separated, of {','.join(ALL_SINKS)}")
    ap.add_argument("--reps", type=int, default=2, help="repetitions (each runs every sink once per workload)")
    ap.add_argument("--small-rows", type=int, default=1000)
    ap.add_argument("--small-batches", type=int, default=100)
    ap.add_argument("--large-rows", type=int, default=1_048_576)
    ap.add_argument("--large-batches", type=int, default=10)
    ap.add_argument("--only", choices=["small", "large"], help="one workload")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed warm-up query of each sink")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 small batches, 3 large of 100,000 rows, 2 repetitions")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--profile", type=Path, help="a directory for the server's CPU profile of the whole run (serve "
                    "--cpuprofile: cpu.pprof, read with `go tool pprof`) and its /metrics at the end (metrics.txt)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if args.quick:
        args.small_batches, args.large_rows, args.large_batches, args.reps = 10, 100_000, 3, 2
    sinks = [s for s in args.sinks.split(",") if s]
    for s in sinks:
        if s not in ALL_SINKS:
            ap.error(f"unknown sink {s!r}")
    jar = args.jar or next(iter(sorted(glob.glob(str(REPO / "clients/spark/target/flight-sink-spark-*.jar")))), None)
    if not jar or not Path(jar).exists():
        ap.error("no connector jar: run make spark-jar or pass --jar")
    if not args.server_bin.exists():
        ap.error(f"no server binary {args.server_bin}: run make build or pass --server-bin")
    peers = subprocess.run([str(REPO / "bench" / "spark_jars.sh")], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    jars = ",".join([str(Path(jar).resolve()), peers])

    # foreachBatch(FlightSink) unpickles in Python workers: they import this checkout's client.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "clients" / "pyspark" / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="flight-sink-bench-spark-"))
    t_all = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_all:7.1f}s] {msg}", flush=True)

    server = None
    bench = None
    workloads = [w for w in ("small", "large") if args.only in (None, w)]
    res = {s: {"small": [], "large": []} for s in sinks}
    load_start = os.getloadavg()
    try:
        port = free_port()
        (work / "root").mkdir()
        http = "off"
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            http = f"127.0.0.1:{free_port()}"
        argv = [str(args.server_bin), "serve", "--listen", f"127.0.0.1:{port}", "--http-listen", http,
                "--root", str(work / "root"), "--log-level", "warn"]
        if args.profile:
            argv += ["--cpuprofile", str((args.profile / "cpu.pprof").resolve())]
        server = Proc("flight-sink", argv, work / "flight-sink.log")
        wait_flight(f"127.0.0.1:{port}", server)
        log(f"flight-sink on 127.0.0.1:{port} (pid {server.p.pid}); jars {jars}")
        inputs = {}
        if "small" in workloads:
            inputs["small"] = work / "in-small"
            write_input(inputs["small"], args.small_batches, args.small_rows, 1)
        if "large" in workloads:
            inputs["large"] = work / "in-large"
            write_input(inputs["large"], args.large_batches, args.large_rows, 2)
        log(f"input written: {', '.join(str(p) for p in inputs.values())}")
        bench = Bench(args, work, f"grpc://127.0.0.1:{port}", jars, log)
        import pyspark

        log(f"PySpark {pyspark.__version__}, local[2]")
        if args.warmup:
            # One untimed query per sink first, so no sink pays the session's class loading and JIT.
            warm = work / "in-warm"
            write_input(warm, 3, args.small_rows, 3)
            for s in sinks:
                bench.run(s, "warm", warm)
            log("warm-up: every sink ran once on 3 small batches (not counted)")
        for rep in range(args.reps):
            for wl in workloads:
                for s in sinks:
                    r = bench.run(s, wl, inputs[wl])
                    res[s][wl].append(r)
                    lat = statistics.median(r["latency_ms"])
                    log(f"rep {rep + 1} {wl:5s} {s:10s} {r['batches']} batches {r['batches_per_s']:6.2f}/s "
                        f"{human_rows(r['rows_per_s'])} rows/s, readable p50 {lat:.0f} ms, query wall {r['wall_s']:.1f} s")
    finally:
        if bench:
            bench.close()
        if server:
            if args.profile and server.p.poll() is None:
                import urllib.request

                with urllib.request.urlopen(f"http://{http}/metrics", timeout=30) as r:
                    (args.profile / "metrics.txt").write_bytes(r.read())
            server.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
          f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end; {args.reps} repetitions, "
          f"small {args.small_batches} x {args.small_rows:,} rows, large {args.large_batches} x {args.large_rows:,} rows")
    print(report(res, sinks, args))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"server_bin": str(args.server_bin), "jar": str(jar), "json": None},
                                         "results": res}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
