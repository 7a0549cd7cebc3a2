"""The model-based test of a table, with Spark as the writer and the reader (the JVM connector).

reliability/model checks the server with random operation sequences over Flight; this is its
Spark variant. From a seed it runs a random sequence of

- batch writes (``df.write.format("flight-sink")...mode("append")``, 1 to 3 partitions: staged
  partitions and one ``commit_epoch``);
- streaming epochs: a long-running query of JSON files into the table (one file a micro-batch,
  1 to 3 partitions: a single-partition epoch committed by its task, or staged partitions);
- restarts of that query after making it forget its last epoch's commit, so Spark replays it;
- replays of older epochs of the query over Flight (the Python client), with the epoch's rows
  (a duplicate without a warning) or other rows (a duplicate: the warning where the committed
  rows are known);
- deletes by predicate over Flight;
- Spark reads of the table with a random filter (pushed to the server where the connector's
  rules allow, evaluated by Spark otherwise) and a random column selection,

against a real server, on a plain table and on one with two MemWAL shards, and checks every
read against an in-memory model of the table: a dict of rows by id, filtered with Spark's
semantics (three-valued logic, NaN equal to itself and above every other double, -0.0 equal to
0.0). A failure names the seed and prints the operations that led to it;
``FLIGHT_SINK_SPARK_MODEL_SEED`` (with ``FLIGHT_SINK_SPARK_MODEL_STEPS`` and
``FLIGHT_SINK_SPARK_MODEL_SECONDS``, the time budget of one sequence: 45 s, 0 for none) runs
another sequence.

It drives Spark from Python rather than from Go (reliability/model) because PySpark is how a
test reaches Spark: a Go test would start a Python driver per operation; here one Spark session
serves every step, next to the jar's other PySpark tests, which ``make test-spark`` runs.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

pyspark = pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

import flight_sink as fs  # noqa: E402

# (seed, table kind): a few fixed sequences in the normal run.
SEEDS = [(20261206, "plain"), (7, "memwal"), (31337, "plain")]
STEPS = int(os.environ.get("FLIGHT_SINK_SPARK_MODEL_STEPS", "12"))
# Each sequence stops drawing operations after this many seconds (then checks the whole table),
# so the fixed seeds stay within about three minutes on a loaded machine: a slow machine runs a
# shorter prefix of the same sequence. 0: no bound.
SECONDS = float(os.environ.get("FLIGHT_SINK_SPARK_MODEL_SECONDS", "45"))
READS_PER_STEP = 4  # a read is cheap next to a write: each read step reads with several filters

SPARK_SCHEMA = "id long, g int, s string, f double"
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.int32()), ("s", pa.string()), ("f", pa.float64())])
COLUMNS = ["id", "g", "s", "f"]

Row = Tuple[Optional[int], Optional[int], Optional[str], Optional[float]]


@pytest.fixture(scope="module")
def spark(jar):
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("flight-sink-spark-model")
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.schemaInference", "false")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


# -- values and filters with Spark's semantics ---------------------------------------------------


def _gen_rows(rng: random.Random, first_id: int, n: int) -> List[Row]:
    rows = []
    for i in range(n):
        g = None if rng.random() < 0.15 else rng.randrange(6)
        s = None if rng.random() < 0.2 else rng.choice(["a", "b", "ab", "ba", ""]) + str(rng.randrange(3))
        f = rng.choice([None, math.nan, 0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, 1e300, round(rng.uniform(-10, 10), 3)])
        rows.append((first_id + i, g, s, f))
    return rows


def _dkey(x: float) -> Tuple[int, float]:
    """Spark's order of doubles: NaN equal to itself and above everything; -0.0 equal to 0.0."""
    return (1, 0.0) if math.isnan(x) else (0, x + 0.0)


def _cmp(a: Any, op: str, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        a, b = _dkey(float(a)), _dkey(float(b))
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _sql_lit(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        if math.isnan(v):
            return "double('NaN')"
        if math.isinf(v):
            return "double('Infinity')" if v > 0 else "double('-Infinity')"
        return repr(v) + "D"
    return str(v)


class Filter:
    """A predicate: its Spark SQL text and its three-valued evaluation (None: unknown)."""

    def __init__(self, sql: str, ev: Callable[[Dict[str, Any]], Optional[bool]], server: bool = True):
        self.sql = sql
        self.ev = ev
        self.server = server  # the server's text syntax reads it too (deletes)


def _f_cmp(col: str, op: str, v: Any) -> Filter:
    def ev(r):
        x = r[col]
        return None if x is None else _cmp(x, op, v)

    return Filter(f"{col} {op} {_sql_lit(v)}", ev, server=not isinstance(v, float))


def _f_in(col: str, vs: List[Any]) -> Filter:
    def ev(r):
        x = r[col]
        return None if x is None else any(_cmp(x, "=", v) for v in vs)

    return Filter(f"{col} IN ({', '.join(_sql_lit(v) for v in vs)})", ev)


def _f_null(col: str, neg: bool) -> Filter:
    return Filter(f"{col} IS {'NOT ' if neg else ''}NULL", lambda r: (r[col] is not None) == neg)


def _f_nullsafe_ne(col: str, v: Any) -> Filter:
    # NOT (col <=> v): true for null, never unknown.
    return Filter(f"NOT ({col} <=> {_sql_lit(v)})", lambda r: r[col] is None or not _cmp(r[col], "=", v), server=False)


def _and(a: Filter, b: Filter) -> Filter:
    def ev(r):
        x, y = a.ev(r), b.ev(r)
        if x is False or y is False:
            return False
        return None if x is None or y is None else True

    return Filter(f"({a.sql}) AND ({b.sql})", ev, a.server and b.server)


def _or(a: Filter, b: Filter) -> Filter:
    def ev(r):
        x, y = a.ev(r), b.ev(r)
        if x is True or y is True:
            return True
        return None if x is None or y is None else False

    return Filter(f"({a.sql}) OR ({b.sql})", ev, a.server and b.server)


def _not(a: Filter) -> Filter:
    return Filter(f"NOT ({a.sql})", lambda r: None if a.ev(r) is None else not a.ev(r), a.server)


def _gen_filter(rng: random.Random, max_id: int, depth: int = 0) -> Filter:
    # Doubles (kind 2) are drawn twice as often: NaN, ±0.0 and ±Inf are where the server's
    # comparisons and Spark's may part.
    kind = rng.choice([0, 1, 2, 2, 3, 4, 5, 6] + ([7, 8, 9] if depth < 2 else []))
    if kind == 0:
        return _f_cmp("g", rng.choice(["=", "<>", "<", ">="]), rng.randrange(6))
    if kind == 1:
        return _f_cmp("id", rng.choice(["<", ">=", "="]), rng.randrange(max_id + 1))
    if kind == 2:
        return _f_cmp("f", rng.choice(["=", "<", ">", ">="]), rng.choice([0.0, -0.0, 1.5, 1e300, math.inf, -math.inf, math.nan]))
    if kind == 3:
        return _f_cmp("s", rng.choice(["=", "<", ">="]), rng.choice(["a0", "ab1", "b", ""]))
    if kind == 4:
        return _f_in(rng.choice(["g", "id"]), [rng.randrange(max(max_id, 6) + 1) for _ in range(rng.randrange(1, 5))])
    if kind == 5:
        return _f_null(rng.choice(["g", "s", "f"]), rng.random() < 0.5)
    if kind == 6:
        return _f_nullsafe_ne("g", rng.randrange(6))
    if kind == 7:
        return _and(_gen_filter(rng, max_id, depth + 1), _gen_filter(rng, max_id, depth + 1))
    if kind == 8:
        return _or(_gen_filter(rng, max_id, depth + 1), _gen_filter(rng, max_id, depth + 1))
    return _not(_gen_filter(rng, max_id, depth + 1))


def _gen_delete(rng: random.Random, max_id: int) -> Filter:
    """A delete predicate in the subset the server's text syntax shares with Spark SQL."""
    while True:
        f = _gen_filter(rng, max_id, depth=1)
        if f.server:
            return f


def _canon(row: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A row as comparable values: NaN as a string, so equal rows compare equal."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def _row_dict(r: Row) -> Dict[str, Any]:
    return dict(zip(COLUMNS, r))


# -- the run -----------------------------------------------------------------------------------


class Run:
    """One sequence: the table, the model, the streaming query and the operation log."""

    def __init__(self, spark, server, tmp: Path, seed: int, kind: str):
        self.spark, self.uri, self.tmp = spark, server.uri, tmp
        self.rng = random.Random(seed)
        self.seed, self.kind = seed, kind
        self.table = f"model_{kind}_{seed}"
        self.client = fs.Client(server.uri)
        self.client.create_table(self.table, ARROW_SCHEMA, memwal_shards=2 if kind == "memwal" else None)
        self.model: Dict[int, Row] = {}
        self.next_id = 0
        self.log: List[str] = []
        self.src, self.ckpt = tmp / "in", tmp / "ckpt"
        self.src.mkdir()
        self.files = 0
        self.query = None
        self.epochs: Dict[int, List[Row]] = {}  # streaming epoch -> its rows

    def note(self, what: str) -> None:
        self.log.append(what)

    def fail(self, msg: str) -> None:
        pytest.fail(
            f"seed {self.seed} ({self.kind}), after {len(self.log)} operations: {msg}\n"
            + "\n".join(f"  {i}: {op}" for i, op in enumerate(self.log))
        )

    def new_rows(self, n: int) -> List[Row]:
        rows = _gen_rows(self.rng, self.next_id, n)
        self.next_id += n
        return rows

    def reader(self):
        return self.spark.read.format("flight-sink").option("uri", self.uri).option("table", self.table).load()

    # operations

    def batch_append(self) -> None:
        rows, parts = self.new_rows(self.rng.randrange(0, 30)), self.rng.randrange(1, 4)
        self.note(f"batch append {len(rows)} rows in {parts} partitions")
        df = self.spark.createDataFrame(rows, SPARK_SCHEMA).repartition(parts)
        df.write.format("flight-sink").option("uri", self.uri).option("table", self.table).mode("append").save()
        self.model.update((r[0], r) for r in rows)

    def start_query(self) -> None:
        parts = self.rng.randrange(1, 4)
        self.note(f"start the streaming query ({parts} partitions an epoch)")
        df = self.spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).json(str(self.src))
        df = df.coalesce(1) if parts == 1 else df.repartition(parts)
        self.query = (
            df.writeStream.format("flight-sink").option("uri", self.uri).option("table", self.table)
            .option("checkpointLocation", str(self.ckpt)).trigger(processingTime="50 milliseconds").start()
        )

    def stream_epoch(self) -> None:
        if self.query is None:
            self.start_query()
        rows = self.new_rows(self.rng.randrange(1, 20))
        tmp = self.tmp / f".tmp-{self.files}.json"
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(_row_dict(r)) + "\n")  # NaN and Infinity as Spark's JSON reads them
        os.replace(tmp, self.src / f"part-{self.files:05d}.json")
        self.files += 1
        self.query.processAllAvailable()
        epoch = self.last_committed()
        self.note(f"streaming epoch {epoch}: {len(rows)} rows")
        self.epochs[epoch] = rows
        self.model.update((r[0], r) for r in rows)
        time.sleep(0.02)  # distinct modification times keep the file source's order

    def last_committed(self) -> int:
        """The newest micro-batch the query's checkpoint records as committed."""
        return max(int(p.name) for p in (self.ckpt / "commits").iterdir() if p.name.isdigit())

    def restart_with_replay(self) -> None:
        if self.query is None or not self.epochs:
            return self.stream_epoch()
        last = max(self.epochs)
        self.query.stop()
        # Spark forgets it committed the last epoch (as after a crash between the sink's commit
        # and its commit log): the restarted query replays it, and the server answers duplicate.
        for name in (str(last), f".{last}.crc"):
            p = self.ckpt / "commits" / name
            if p.exists():
                p.unlink()
        self.note(f"restart, replaying epoch {last}")
        self.start_query()
        self.query.processAllAvailable()

    def replay_old_epoch(self) -> None:
        if not self.epochs:
            return self.stream_epoch()
        # A MemWAL shard knows a query's epochs exactly while they are in its WAL and, once
        # flushed, its two newest ones; an older flushed epoch is refused as a reused query id
        # (docs/storage.md), and Spark never replays one: replays there pick the two newest.
        epochs = sorted(self.epochs) if self.kind == "plain" else sorted(self.epochs)[-2:]
        epoch = self.rng.choice(epochs)
        rows = self.epochs[epoch]
        other = self.rng.random() < 0.5 and len(rows) > 1
        sent = rows[: len(rows) // 2] if other else rows
        self.note(f"replay epoch {epoch} over Flight with {len(sent)} of its {len(rows)} rows")
        data = pa.Table.from_pylist([_row_dict(r) for r in sent], schema=ARROW_SCHEMA)
        ack = self.client.put_epoch(self.table, data, query_id=str(self.query.id), epoch_id=epoch)
        if ack.status != "duplicate":
            self.fail(f"a replay of epoch {epoch} answered {ack.raw}")
        if not other and ack.warning:
            self.fail(f"a replay of epoch {epoch}'s own rows warns: {ack.warning}")
        if other and self.kind == "plain" and not ack.warning:
            # A committed table version records the epoch's rows; MemWAL shards know them only
            # while the epoch is in memory.
            self.fail(f"a replay of epoch {epoch} with other rows has no warning: {ack.raw}")
        if ack.warning and f"this replay sent {len(sent)}" not in ack.warning:
            self.fail(f"the warning does not name the rows sent: {ack.warning}")

    def delete(self) -> None:
        f = _gen_delete(self.rng, self.next_id)
        res = self.client.delete(self.table, f.sql)
        gone = [i for i, r in self.model.items() if f.ev(_row_dict(r)) is True]
        self.note(f"delete where {f.sql}: {res.rows_deleted} rows (model: {len(gone)})")
        if res.rows_deleted != len(gone):
            self.fail(f"delete where {f.sql} deleted {res.rows_deleted} rows, the model {len(gone)}")
        for i in gone:
            del self.model[i]

    def read(self) -> None:
        for _ in range(READS_PER_STEP):
            self.read_one()

    def read_one(self) -> None:
        f = _gen_filter(self.rng, self.next_id)
        cols = COLUMNS if self.rng.random() < 0.6 else ["id"] + self.rng.sample(COLUMNS[1:], self.rng.randrange(0, 3))
        self.note(f"read {cols} where {f.sql}")
        got = sorted(_canon(tuple(r)) for r in self.reader().where(f.sql).select(*cols).collect())
        idx = [COLUMNS.index(c) for c in cols]
        want = sorted(
            _canon(tuple(r[i] for i in idx)) for r in self.model.values() if f.ev(_row_dict(r)) is True
        )
        if got != want:
            missing = sorted(set(want) - set(got))[:10]
            extra = sorted(set(got) - set(want))[:10]
            self.fail(f"read where {f.sql}: {len(got)} rows, the model {len(want)}; missing {missing}, extra {extra}")

    def check_all(self) -> None:
        self.note("read the whole table")
        got = sorted(_canon(tuple(r)) for r in self.reader().collect())
        want = sorted(_canon(r) for r in self.model.values())
        if got != want:
            self.fail(f"the table holds {len(got)} rows, the model {len(want)}")

    def close(self) -> None:
        if self.query is not None:
            self.query.stop()
        self.client.close()


OPERATIONS = [
    ("batch_append", 4),
    ("stream_epoch", 6),
    ("restart_with_replay", 1),
    ("replay_old_epoch", 2),
    ("delete", 2),
    ("read", 5),
]


def _run(spark, server, tmp: Path, seed: int, kind: str, steps: int) -> None:
    run = Run(spark, server, tmp, seed, kind)
    names = [n for n, _ in OPERATIONS]
    weights = [w for _, w in OPERATIONS]
    deadline = time.monotonic() + SECONDS if SECONDS > 0 else math.inf
    try:
        for _ in range(steps):
            if time.monotonic() > deadline:
                run.note(f"time budget of {SECONDS:g} s spent")
                break
            op = run.rng.choices(names, weights)[0]
            try:
                getattr(run, op)()
            except Exception as e:  # a Spark or Flight error: the same report as a wrong read
                if isinstance(e, pytest.fail.Exception):
                    raise
                run.fail(f"{op} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        run.check_all()
    finally:
        run.close()


@pytest.mark.parametrize("seed,kind", SEEDS, ids=[f"{k}-{s}" for s, k in SEEDS])
def test_spark_model(spark, server, tmp_path, seed, kind):
    _run(spark, server, tmp_path, seed, kind, STEPS)


def test_spark_model_from_env(spark, server, tmp_path):
    """The sequence of FLIGHT_SINK_SPARK_MODEL_SEED (``<seed>`` or ``<seed>:<plain|memwal>``)."""
    env = os.environ.get("FLIGHT_SINK_SPARK_MODEL_SEED")
    if not env:
        pytest.skip("FLIGHT_SINK_SPARK_MODEL_SEED is not set")
    seed, _, kind = env.partition(":")
    _run(spark, server, tmp_path, int(seed), kind or "plain", STEPS)
