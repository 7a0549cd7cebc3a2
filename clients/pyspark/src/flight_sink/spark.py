"""Spark Structured Streaming sink: one line in ``foreachBatch``, exactly once across restarts.

::

    from flight_sink.spark import FlightSink

    query = (
        df.writeStream
        .foreachBatch(FlightSink("grpc://127.0.0.1:8815", table="events"))
        .option("checkpointLocation", "/checkpoints/events")
        .start()
    )

How a micro-batch lands (``docs/protocol.md``, *Multi-writer epochs*):

1. The driver asks the server for ``epoch_status`` of ``(query_id, batch_id)``. A batch that
   Spark replays after a crash but that is already committed sends no data.
2. Otherwise every executor task pushes its partition in its own staged DoPut (through
   ``mapInArrow``), in parallel, and returns the stage token. A failed task attempt leaves a
   stage that is never committed; Spark's retry of the task stages again.
3. The driver collects one token per partition and calls ``commit_epoch``: the whole batch is
   one transaction, committed exactly once (on a MemWAL table, one MemWAL put).

With ``through_driver=True`` the batch is instead collected to the driver and sent in one DoPut,
which suits small batches (for example complete-mode aggregates). It is not needed to reach
MemWAL: staged batches land there too.

``query_id`` defaults to Spark's ``StreamingQuery.id``, which is stable across restarts from one
checkpoint, so a restarted query is recognised. Any failure raises inside ``foreachBatch``: the
micro-batch is not marked done and Spark replays it when the query restarts; nothing is dropped.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

import pyarrow as pa

from ._data import normalize_schema
from .client import MODES, Client, CreateSpec
from .errors import EpochNotCommittedError, InvalidArgumentError, TableNotFoundError
from .results import Ack
from .retry import RetryPolicy

__all__ = [
    "FlightSink",
    "SinkMetrics",
    "failure_line",
    "register",
    "spark_output_mode",
    "spark_query_id",
]

log = logging.getLogger("flight_sink")
T = TypeVar("T")

_QUERY_ID_PROPERTY = "sql.streaming.queryId"

# One result row per partition task (the mapInArrow output schema).
_RESULT_SCHEMA = pa.schema(
    [
        ("partition", pa.int64()),
        ("attempt", pa.int64()),
        ("status", pa.string()),
        ("stage", pa.string()),
        ("rows", pa.int64()),
        ("client_seconds", pa.float64()),
        ("task_seconds", pa.float64()),
    ]
)
_RESULT_DDL = (
    "partition long, attempt long, status string, stage string, rows long, "
    "client_seconds double, task_seconds double"
)

#: A hook run in each executor task after its DoPut was acknowledged:
#: ``hook(partition_id, attempt, ack)``. Raising fails the task attempt (used by tests).
TaskHook = Callable[[int, int, Ack], None]


_FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the Spark data source ``flight-sink`` in ``spark`` (PySpark 4.0+).

    After this, ``format("flight-sink")`` works for ``read``, ``readStream``, ``write`` and
    ``writeStream`` (:mod:`flight_sink.datasource` describes each). On PySpark 4.1+ it also sets
    ``spark.sql.python.filterPushdown.enabled`` to true (Spark refuses a Python reader that
    pushes filters while it is off); a session that turns it off again must read with
    ``.option("pushFilters", "false")``.
    """
    from .datasource import FlightSinkDataSource

    spark.dataSource.register(FlightSinkDataSource)
    from pyspark.sql import datasource as _ds

    if hasattr(_ds, "Filter"):
        spark.conf.set(_FILTER_PUSHDOWN_CONF, "true")


# -- Spark introspection ------------------------------------------------------------------------


def failure_line(exc: BaseException) -> str:
    """The cause of a failed Spark job in one line, for a program that reports it to a user.

    A failure inside ``foreachBatch`` or a data source task reaches the driver wrapped in
    Spark's ``StreamingQueryException`` (or a task failure) with the Python and JVM stack traces
    in its message; the flight-sink client's own error (``flight_sink.errors.SchemaMismatchError:
    ...``) is one line of it, and the one worth showing. Otherwise: the exception's type and the
    first line of its message.
    """
    import re

    text = str(exc)
    for line in text.splitlines():
        m = re.search(r"flight_sink\.errors\.(\w+Error): (.*)", line)
        if m:
            return f"{m.group(1)}: {m.group(2).strip()}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def spark_query_id(df: Any) -> Optional[str]:
    """Spark's ``StreamingQuery.id`` of the micro-batch ``df`` belongs to, or None.

    Spark sets the local property ``sql.streaming.queryId`` on the thread that runs the
    micro-batch, and ``foreachBatch`` calls back on that thread, so the id can be read through
    the batch DataFrame's SparkContext (classic PySpark 3.5 and 4.x). Returns None where that is
    not available (e.g. Spark Connect); pass ``query_id=`` there.
    """
    try:
        value = df.sparkSession.sparkContext.getLocalProperty(_QUERY_ID_PROPERTY)
    except Exception:  # noqa: BLE001 - any failure of the probe (Spark Connect: py4j absent) means "not available"
        return None
    return str(value) if value else None


def _jvm_sessions(df: Any) -> list[Any]:
    """JVM SparkSession objects that may own the streaming query, best candidates first."""
    out: list[Any] = []
    try:
        out.append(df.sparkSession._jsparkSession)
    except Exception:  # noqa: BLE001 - a probe of JVM internals: a session that cannot be reached is skipped
        pass
    try:
        from pyspark.sql import SparkSession

        for s in (SparkSession.getActiveSession(), getattr(SparkSession, "_instantiatedSession", None)):
            if s is not None and hasattr(s, "_jsparkSession"):
                out.append(s._jsparkSession)
    except Exception:  # noqa: BLE001 - a probe of JVM internals: a session that cannot be reached is skipped
        pass
    try:
        jvm = df.sparkSession.sparkContext._jvm
        jss = jvm.org.apache.spark.sql.SparkSession
        for opt in (jss.getDefaultSession(), jss.getActiveSession()):
            if opt is not None and opt.isDefined():
                out.append(opt.get())
    except Exception:  # noqa: BLE001 - a probe of JVM internals: a session that cannot be reached is skipped
        pass
    return out


def spark_output_mode(df: Any, query_id: str) -> Optional[str]:
    """The output mode (``append``, ``complete`` or ``update``) of the running query, or None.

    PySpark exposes no public accessor; this asks the JVM's StreamingQueryManager of the
    session that started the query for ``StreamExecution.outputMode``. The micro-batch itself
    runs in a cloned session whose manager does not list the query, so the active and default
    sessions are asked too. Returns None when none of them knows the query.
    """
    for js in _jvm_sessions(df):
        try:
            jsq = js.streams().get(query_id)
            if jsq is None:
                continue
            mode = str(jsq.streamingQuery().outputMode().toString()).strip().lower()
        except Exception:  # noqa: BLE001 - a session that does not know the query (py4j errors of any kind)
            continue
        if mode in MODES:
            return mode
    return None


def _spark_arrow_schema(df: Any) -> pa.Schema:
    """The Arrow schema Spark uses for ``df`` (for batches that produced no rows)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(df.schema, timezone="UTC")  # PySpark 4.x
    except TypeError:
        schema = to_arrow_schema(df.schema)  # PySpark 3.5
    return normalize_schema(schema)


def _collect_arrow(df: Any) -> pa.Table:
    """Collect ``df`` to the driver as an Arrow table (``toArrow`` on 4.x, the 3.5 fallback)."""
    if hasattr(df, "toArrow"):
        tbl = df.toArrow()
        return tbl
    batches = df._collect_as_arrow()
    schema = batches[0].schema if batches else _spark_arrow_schema(df)
    return pa.Table.from_batches(batches, schema=schema)


def _evaluate_without_output(df: Any) -> None:
    """Run the micro-batch to completion and discard its rows.

    Used for a replayed batch whose epoch is already committed: no data is sent, but stateful
    queries still need every partition to run (their state stores commit when the tasks
    finish, and PySpark 4.x checks that in ``foreachBatch``).
    """
    df.write.format("noop").mode("overwrite").save()


# -- executor side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TaskConfig:
    """Everything an executor task needs; pickled to the executors with the task."""

    uri: str
    token: Optional[str]
    timeout: Optional[float]
    retry: RetryPolicy
    tls_root_certs: Optional[Any]
    max_retry_buffer_bytes: int
    table: str
    query_id: str
    epoch_id: int
    mode: str
    create: CreateSpec
    dedupe_lookback_versions: Optional[int]
    hook: Optional[TaskHook] = None
    merge_schema: bool = False


_task_clients: dict[tuple[Any, ...], Client] = {}
_task_clients_lock = threading.Lock()


def _task_client(cfg: _TaskConfig) -> Client:
    """One Client per Python worker process and server, reused by the tasks it runs."""
    key = (cfg.uri, cfg.token, cfg.timeout, cfg.retry, cfg.tls_root_certs, cfg.max_retry_buffer_bytes)
    with _task_clients_lock:
        c = _task_clients.get(key)
        if c is None:
            c = Client(
                cfg.uri,
                cfg.token,
                timeout=cfg.timeout,
                retry=cfg.retry,
                tls_root_certs=cfg.tls_root_certs,
                max_retry_buffer_bytes=cfg.max_retry_buffer_bytes,
            )
            _task_clients[key] = c
        return c


def _result_batch(pid: int, attempt: int, status: str, stage: Optional[str], rows: int,
                  client_s: float, task_s: float) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "partition": [pid],
            "attempt": [attempt],
            "status": [status],
            "stage": [stage],
            "rows": [rows],
            "client_seconds": [client_s],
            "task_seconds": [task_s],
        },
        schema=_RESULT_SCHEMA,
    )


def push_partition(cfg: _TaskConfig, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: stage this task's partition in one DoPut and yield its stage token.

    Runs inside ``mapInArrow``. An empty partition sends nothing. The DoPut carries
    ``"partition": {"id": <partition id>, "attempt": <attempt number>}``; a retried attempt
    stages anew and only the token of the attempt Spark keeps reaches the driver.
    """
    from pyspark import TaskContext

    start = time.perf_counter()
    ctx = TaskContext.get()
    pid = int(ctx.partitionId()) if ctx is not None else 0
    attempt = int(ctx.attemptNumber()) if ctx is not None else 0
    spark_wait = 0.0
    it = iter(batches)

    def timed() -> Iterator[pa.RecordBatch]:
        nonlocal spark_wait
        while True:
            t = time.perf_counter()
            b = next(it, None)
            spark_wait += time.perf_counter() - t
            if b is None:
                return
            if b.num_rows:
                yield b

    src = timed()
    first = next(src, None)
    if first is None:
        yield _result_batch(pid, attempt, "empty", None, 0, 0.0, time.perf_counter() - start)
        return
    client = _task_client(cfg)
    put_start = time.perf_counter()
    wait_before_put = spark_wait
    ack = client.put_epoch(
        cfg.table,
        itertools.chain([first], src),
        query_id=cfg.query_id,
        epoch_id=cfg.epoch_id,
        mode=cfg.mode,
        create=cfg.create,
        partition=(pid, attempt),
        schema=first.schema,
        dedupe_lookback_versions=cfg.dedupe_lookback_versions,
        merge_schema=cfg.merge_schema,
    )
    end = time.perf_counter()
    if ack.status not in ("staged", "duplicate"):
        raise EpochNotCommittedError(
            f"partition {pid} of epoch {cfg.epoch_id}: unexpected acknowledgement {ack.raw!r}"
        )
    if cfg.hook is not None:
        cfg.hook(pid, attempt, ack)
    client_s = (end - put_start) - (spark_wait - wait_before_put)
    yield _result_batch(
        pid, attempt, ack.status, ack.stage, ack.rows, max(client_s, 0.0), end - start
    )


def _make_pusher(cfg: _TaskConfig) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def flight_sink_push(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return push_partition(cfg, batches)

    return flight_sink_push


# -- driver side --------------------------------------------------------------------------------


@dataclass
class SinkMetrics:
    """What a :class:`FlightSink` did, summed over the micro-batches it handled.

    Attributes:
        batches: micro-batches handled.
        replays_skipped: replayed batches whose epoch was already committed (no data sent).
        committed: epochs committed by this sink.
        empty: append/update epochs without rows (nothing to commit).
        rows: rows acknowledged by the server.
        sink_seconds: wall time inside ``FlightSink.__call__`` (includes running the batch).
        driver_client_seconds: driver time in client calls (epoch_status, commit_epoch, DoPut).
        task_seconds: time executor tasks spent in the push function (summed over tasks).
        task_client_seconds: the part of ``task_seconds`` spent in the client (serialising and
            sending Arrow data and waiting for acks), not in Spark producing rows.
    """

    batches: int = 0
    replays_skipped: int = 0
    committed: int = 0
    empty: int = 0
    rows: int = 0
    sink_seconds: float = 0.0
    driver_client_seconds: float = 0.0
    task_seconds: float = 0.0
    task_client_seconds: float = 0.0
    last_ack: Optional[Ack] = field(default=None, repr=False)


class FlightSink:
    """A ``foreachBatch`` function that lands each micro-batch in a flight-sink table exactly once.

    Args:
        uri: the server, e.g. ``"grpc://127.0.0.1:8815"``.
        table: the table to write.
        query_id: the epoch identity's query id. Default: Spark's ``StreamingQuery.id``, read
            from the micro-batch (stable across restarts from one checkpoint). Pass one only to
            keep a query's identity when its checkpoint moves; a query with a *new* checkpoint
            must not reuse an old id (the server refuses its epochs with
            :class:`~flight_sink.QueryReusedError`).
        mode: ``"append"``, ``"complete"`` or ``"update"``. Default: the query's own output mode
            (read from the running query); when it cannot be read (Spark Connect, a DataFrame
            outside a streaming query) the batch fails with a ``ValueError`` asking for ``mode=``,
            and nothing is written. ``complete`` replaces the table with every batch, even an
            empty one.
            ``update`` appends to a table without a primary key and upserts by key into a keyed
            table (those batches go through the driver: the server upserts one DoPut, not
            staged partitions).
        token: bearer token for servers started with ``--auth-token``.
        through_driver: collect each batch to the driver and send it in one DoPut instead of
            one staged DoPut per executor task. For small batches (complete-mode aggregates,
            low-rate streams); the whole batch must fit in the driver's memory.
        create: create the table from the batch's schema on first write (default True); a dict
            gives its options as :meth:`flight_sink.Client.create_table` takes them:
            ``{"primary_key": ["id"]}``, ``{"partition_by": [{"column": "ts", "transform":
            "day"}]}``, ``"memwal"``, ``"data_codec"``.
        retry: retry policy for transient unavailability (:class:`~flight_sink.RetryPolicy`).
        timeout: per-call deadline in seconds (default: none).
        tls_root_certs: PEM root certificates for ``grpc+tls://`` with a private CA.
        dedupe_lookback_versions: the server's dedupe look-back for these epochs (1..10000).
        max_retry_buffer_bytes: per task, how much of a partition is kept to resend it after a
            transient failure; larger partitions fail the task instead (Spark retries it).
        merge_schema: let a batch whose schema gained nullable columns (or promoted a type:
            int to long, float to double, decimal precision up) change the table schema, in the
            same commit as its rows. Without it such a batch fails with
            :class:`~flight_sink.SchemaMismatchError` and nothing is written.

    Call it as ``sink(batch_df, batch_id)`` (what ``foreachBatch`` does). It raises
    :class:`~flight_sink.FlightSinkError` subclasses when the epoch cannot be committed, so the
    batch fails rather than being marked done. :attr:`metrics` sums up what it did.

    The package must be installed on the executors too (they run the push tasks).
    """

    def __init__(
        self,
        uri: str,
        table: str,
        *,
        query_id: Optional[str] = None,
        mode: Optional[str] = None,
        token: Optional[str] = None,
        through_driver: bool = False,
        create: CreateSpec = True,
        retry: Optional[RetryPolicy] = None,
        timeout: Optional[float] = None,
        tls_root_certs: Optional[Any] = None,
        dedupe_lookback_versions: Optional[int] = None,
        max_retry_buffer_bytes: int = 256 << 20,
        merge_schema: bool = False,
        _task_hook: Optional[TaskHook] = None,
    ) -> None:
        if not table:
            raise InvalidArgumentError("table is required")
        if mode is not None and mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES} or None, got {mode!r}")
        if query_id is not None and not str(query_id).strip():
            raise InvalidArgumentError("query_id must not be blank")
        self.uri = uri
        self.table = table
        self.query_id = query_id
        self.mode = mode
        self.token = token
        self.through_driver = through_driver
        self.create = create
        self.retry = retry if retry is not None else RetryPolicy()
        self.timeout = timeout
        self.tls_root_certs = tls_root_certs
        self.dedupe_lookback_versions = dedupe_lookback_versions
        self.max_retry_buffer_bytes = max_retry_buffer_bytes
        self.merge_schema = merge_schema
        self._task_hook = _task_hook
        self.metrics = SinkMetrics()
        self._client: Optional[Client] = None
        self._primary_key: Optional[list[str]] = None  # the table's key, once it exists

    def __repr__(self) -> str:
        return f"FlightSink({self.uri!r}, table={self.table!r}, mode={self.mode!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # connections do not travel (e.g. Spark Connect pickles this)
        return state

    @property
    def client(self) -> Client:
        """The driver's :class:`~flight_sink.Client`."""
        if self._client is None:
            self._client = Client(
                self.uri,
                self.token,
                timeout=self.timeout,
                retry=self.retry,
                tls_root_certs=self.tls_root_certs,
                max_retry_buffer_bytes=self.max_retry_buffer_bytes,
            )
        return self._client

    def close(self) -> None:
        """Close the driver's connection."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _resolve_query_id(self, df: Any) -> str:
        if self.query_id is not None:
            return str(self.query_id).strip()
        qid = spark_query_id(df)
        if qid is None:
            raise InvalidArgumentError(
                "FlightSink could not read Spark's streaming query id from the micro-batch "
                "(local property sql.streaming.queryId is not set: not a foreachBatch of a "
                "classic Structured Streaming query?). Pass query_id= explicitly, e.g. "
                "FlightSink(uri, table=..., query_id='my-query')."
            )
        return qid

    def _resolve_mode(self, df: Any, query_id: str) -> str:
        """The mode to write in: ``mode=`` if given, else the running query's output mode.

        Guessing is never safe: appending the batches of a complete-mode aggregate would add
        every batch's full result to the table, and overwriting with an append query's batches
        would drop data. So a mode that cannot be read fails the batch before anything is sent.
        """
        if self.mode is not None:
            return self.mode
        # The running query is found by Spark's own id, which a query_id= given by the user is not.
        spark_id = spark_query_id(df)
        mode = spark_output_mode(df, spark_id) if spark_id is not None else None
        if mode is None:
            raise InvalidArgumentError(
                f"FlightSink could not read the output mode of streaming query {query_id} (PySpark "
                "exposes it only through the JVM of the session that started the query: Spark "
                "Connect, or a batch DataFrame outside a streaming query?). Pass the query's "
                "output mode explicitly, e.g. FlightSink(uri, table=..., mode='complete'); "
                "nothing was written."
            )
        return mode

    def _timed(self, fn: Callable[[], T]) -> T:
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.metrics.driver_client_seconds += time.perf_counter() - t

    def __call__(self, df: Any, batch_id: int) -> None:
        """Land micro-batch ``batch_id`` (the ``foreachBatch`` contract)."""
        start = time.perf_counter()
        try:
            self._write_batch(df, int(batch_id))
        finally:
            self.metrics.batches += 1
            self.metrics.sink_seconds += time.perf_counter() - start

    def _write_batch(self, df: Any, epoch: int) -> None:
        qid = self._resolve_query_id(df)
        mode = self._resolve_mode(df, qid)
        client = self.client
        try:
            st = self._timed(lambda: client.epoch_status(self.table, query_id=qid, epoch_id=epoch))
            committed, version = st.committed, st.version
        except TableNotFoundError:
            committed, version = False, None
        if committed:
            log.info(
                "FlightSink: epoch %d of query %s is already committed in %s (version %s); "
                "replayed batch sends no data", epoch, qid, self.table, version,
            )
            _evaluate_without_output(df)
            self.metrics.replays_skipped += 1
            return
        if self.through_driver or (mode == "update" and self._keyed_table()):
            ack = self._write_through_driver(df, qid, epoch, mode)
        else:
            ack = self._write_from_executors(df, qid, epoch, mode)
        self._account(ack, qid, epoch)

    def _keyed_table(self) -> bool:
        """Whether the table has (or will be created with) a primary key.

        An update epoch on a keyed table is an upsert by key, which the server applies to one
        DoPut, not to staged partitions: such batches go through the driver.
        """
        if self._primary_key is None:
            try:
                stats = self._timed(lambda: self.client.table_stats(self.table))
            except TableNotFoundError:
                spec = self.create if isinstance(self.create, Mapping) else {}
                return bool(spec.get("primary_key"))
            self._primary_key = list(stats.primary_key)
            if self._primary_key:
                log.info(
                    "FlightSink: table %s has primary key %s: update batches are upserts and go "
                    "through the driver in one DoPut", self.table, self._primary_key,
                )
        return bool(self._primary_key)

    def _account(self, ack: Ack, qid: str, epoch: int) -> None:
        if not ack.landed:
            raise EpochNotCommittedError(
                f"epoch {epoch} of query {qid} was not committed to {self.table}: server "
                f"answered {ack.raw!r}"
            )
        self.metrics.last_ack = ack
        if ack.status == "committed":
            self.metrics.committed += 1
            self.metrics.rows += ack.rows
        elif ack.status == "empty":
            self.metrics.empty += 1
        log.debug("FlightSink: epoch %d of query %s: %s", epoch, qid, ack)

    def _write_through_driver(self, df: Any, qid: str, epoch: int, mode: str) -> Ack:
        tbl = _collect_arrow(df)
        return self._timed(
            lambda: self.client.put_epoch(
                self.table,
                tbl,
                query_id=qid,
                epoch_id=epoch,
                mode=mode,
                create=self.create,
                staged=False,
                dedupe_lookback_versions=self.dedupe_lookback_versions,
                merge_schema=self.merge_schema,
            )
        )

    def _write_from_executors(self, df: Any, qid: str, epoch: int, mode: str) -> Ack:
        cfg = _TaskConfig(
            uri=self.uri,
            token=self.token,
            timeout=self.timeout,
            retry=self.retry,
            tls_root_certs=self.tls_root_certs,
            max_retry_buffer_bytes=self.max_retry_buffer_bytes,
            table=self.table,
            query_id=qid,
            epoch_id=epoch,
            mode=mode,
            create=self.create,
            dedupe_lookback_versions=self.dedupe_lookback_versions,
            hook=self._task_hook,
            merge_schema=self.merge_schema,
        )
        results = df.mapInArrow(_make_pusher(cfg), _RESULT_DDL).collect()
        stages: dict[int, str] = {}
        for r in results:
            self.metrics.task_seconds += r["task_seconds"] or 0.0
            self.metrics.task_client_seconds += r["client_seconds"] or 0.0
            if r["status"] == "staged":
                pid = int(r["partition"])
                if pid in stages:
                    raise EpochNotCommittedError(
                        f"epoch {epoch}: two stages for partition {pid} "
                        f"({stages[pid]}, {r['stage']}); not committing"
                    )
                stages[pid] = r["stage"]
        try:
            return self._timed(
                lambda: self.client.commit_epoch(
                    self.table,
                    query_id=qid,
                    epoch_id=epoch,
                    stages=[stages[p] for p in sorted(stages)],
                    mode=mode,
                    dedupe_lookback_versions=self.dedupe_lookback_versions,
                    merge_schema=self.merge_schema,
                )
            )
        except TableNotFoundError:
            if stages or (mode == "complete" and not self.create):
                raise
        # Every partition was empty and the table does not exist yet. An empty append/update
        # epoch commits nothing anyway; an empty complete epoch creates the table and commits an
        # empty overwrite.
        if mode != "complete":
            return Ack(status="empty", table=self.table, query_id=qid, epoch_id=epoch,
                       raw={"status": "empty"})
        schema = _spark_arrow_schema(df)
        return self._timed(
            lambda: self.client.put_epoch(
                self.table,
                schema.empty_table(),
                query_id=qid,
                epoch_id=epoch,
                mode=mode,
                create=self.create,
                staged=False,
                dedupe_lookback_versions=self.dedupe_lookback_versions,
                merge_schema=self.merge_schema,
            )
        )
