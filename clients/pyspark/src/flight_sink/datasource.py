"""The Spark data source ``flight-sink`` (PySpark 4.x Python Data Source API).

Register it once per session with :func:`flight_sink.spark.register`, then::

    df.writeStream.format("flight-sink").option("uri", u).option("table", t) \\
        .option("checkpointLocation", c).start()                   # streaming writes
    df.write.format("flight-sink").option("uri", u).option("table", t).mode("append").save()
    spark.read.format("flight-sink").option("uri", u).option("table", t).load()
    spark.readStream.format("flight-sink").option("uri", u).option("table", t).load()

Options (``clients/pyspark/README.md`` lists them with their defaults): ``uri``, ``table`` (both required), ``token``,
``query_id``, ``mergeSchema``, ``create`` (default true), ``primaryKey`` (comma separated, with
``create``), ``route``, ``version`` (reads), ``skipChangeCommits`` (streaming reads),
``pushFilters`` (batch reads, default true).

How each mode maps onto the protocol (``docs/protocol.md``):

- **Streaming writes**: every task of micro-batch ``B`` stages its partition with one DoPut
  carrying ``"partition": {"id", "attempt"}`` and returns the stage token in its commit message;
  the driver's ``commit(messages, B)`` commits the tokens with ``commit_epoch`` as one
  transaction for ``(query id, B)``. A failed task attempt (or an aborted batch) leaves stages
  that are never committed (the server's ``cleanup`` removes them). Spark replays a batch it did
  not record as done; its ``commit_epoch`` then answers ``duplicate`` and nothing is written
  twice. The query id is the ``query_id`` option when given, otherwise Spark's own
  ``StreamingQuery.id``, which each task reads from its local property
  ``sql.streaming.queryId`` and carries to the driver in its commit message (the driver-side
  ``commit`` runs in a Python worker that has no SparkContext to ask).
  Complete mode (Spark's ``overwrite=True``) commits each batch as one Overwrite, an empty batch
  included (a truncate).
- **Batch writes** stage the same way and commit once as epoch 0 of a fresh query id
  ``spark-write-<uuid>`` (or the ``query_id`` option): ``append`` is one Append, ``overwrite``
  one Overwrite.
- **Batch reads** are one Spark partition per GetFlightInfo endpoint, every ticket pinned to the
  version described, with the read schema's columns and the pushed filters added to the ticket.
- **Streaming reads**: see :class:`FlightSinkStreamReader`.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow as pa
import pyarrow.flight as fl
from pyspark.sql import datasource as _ds
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import _json
from ._data import normalize_schema
from .client import Client
from .errors import (
    ClientError,
    EpochNotCommittedError,
    FlightSinkError,
    InvalidArgumentError,
    TableNotFoundError,
    from_arrow_error,
)
from .results import Ack
from .retry import RetryPolicy

__all__ = [
    "ARROW_WRITERS",
    "SOURCE_NAME",
    "FlightSinkCommitMessage",
    "FlightSinkDataSource",
    "FlightSinkStreamReader",
]

log = logging.getLogger("flight_sink")

#: The name the data source is registered under.
SOURCE_NAME = "flight-sink"

_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"

# Arrow writers exist from PySpark 4.1; on 4.0 the row writers convert rows to Arrow batches.
_StreamArrowWriter = getattr(_ds, "DataSourceStreamArrowWriter", None)
_ArrowWriter = getattr(_ds, "DataSourceArrowWriter", None)
#: True when this PySpark hands the writers Arrow batches (4.1+), False for row writers (4.0).
ARROW_WRITERS = _StreamArrowWriter is not None and _ArrowWriter is not None

#: Test-only option: ``"<partition>:<attempt>"`` makes that task attempt raise right after its
#: partition was staged, to prove that a retried task's rows land once. Never set it in production.
TEST_FAIL_AFTER_STAGE_OPTION = "_testFailAfterStage"

# Operations of the `history` action (engine/commit_transaction.go), as streaming reads classify them.
_APPENDS = frozenset({"Append"})
_NO_ROW_CHANGE = frozenset({"Create", "Rewrite", "CreateIndex", "OptimizeIndex", "UpdateConfig"})
_ROW_CHANGES = frozenset({"Overwrite", "Delete", "Update", "Upsert"})


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"flight-sink option {name} must be true or false, got {raw!r}")


@dataclass(frozen=True)
class _Options:
    """The data source's options, parsed once on the driver and pickled to the tasks."""

    uri: str
    table: str
    token: Optional[str] = None
    query_id: Optional[str] = None
    merge_schema: bool = False
    create: Any = True
    route: Optional[str] = None
    version: Optional[int] = None
    skip_change_commits: bool = False
    push_filters: bool = True
    fail_after_stage: Optional[tuple[int, int]] = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        uri, table = options.get("uri"), options.get("table")
        if not uri or not table:
            raise InvalidArgumentError(
                "the flight-sink data source needs the options uri and table, e.g. "
                '.option("uri", "grpc://127.0.0.1:8815").option("table", "events")'
            )
        qid = options.get("query_id")
        if qid is not None and not str(qid).strip():
            raise InvalidArgumentError("flight-sink option query_id must not be blank")
        create: Any = _bool_option(options, "create", True)
        pk = options.get("primaryKey")
        if pk:
            keys = [k.strip() for k in str(pk).split(",") if k.strip()]
            create = {"primary_key": keys} if create else False
        version = options.get("version")
        fail = options.get(TEST_FAIL_AFTER_STAGE_OPTION)
        merge = _bool_option(options, "mergeSchema", False)
        return cls(
            uri=str(uri),
            table=str(table),
            token=options.get("token") or None,
            query_id=str(qid).strip() if qid is not None else None,
            merge_schema=merge,
            create=create,
            route=options.get("route") or None,
            version=int(version) if version not in (None, "") else None,
            skip_change_commits=_bool_option(options, "skipChangeCommits", False),
            push_filters=_bool_option(options, "pushFilters", True),
            fail_after_stage=tuple(int(x) for x in str(fail).split(":")) if fail else None,  # type: ignore[arg-type]
        )

    def client(self) -> Client:
        """This process's Client for the server (one per process, reused by its tasks)."""
        return _process_client(self.uri, self.token)

    def merge_kwargs(self) -> dict[str, Any]:
        # merge_schema goes on the wire only when true, so servers without schema
        # evolution see exactly the requests they always did.
        return {"merge_schema": True} if self.merge_schema else {}


_clients: dict[tuple[str, Optional[str], Optional[RetryPolicy]], Client] = {}


def _process_client(uri: str, token: Optional[str], retry: Optional[RetryPolicy] = None) -> Client:
    """One Client per process, server and retry policy, reused by the tasks the process runs."""
    key = (uri, token, retry)
    c = _clients.get(key)
    if c is None:
        c = _clients[key] = Client(uri, token, retry=retry)
    return c


# -- Arrow <-> Spark ----------------------------------------------------------------------------


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return normalize_schema(to_arrow_schema(schema, timezone="UTC"))


def _rows_to_batches(schema: StructType, rows: Iterator[Any], chunk: int = 8192) -> Iterator[pa.RecordBatch]:
    """PySpark 4.0's row writers: Rows to Arrow batches of the Spark schema."""
    arrow = _arrow_schema(schema)
    names = schema.fieldNames()
    buf: list[Any] = []
    for r in rows:
        buf.append(r)
        if len(buf) >= chunk:
            yield pa.RecordBatch.from_pylist([dict(zip(names, x)) for x in buf], schema=arrow)
            buf = []
    if buf:
        yield pa.RecordBatch.from_pylist([dict(zip(names, x)) for x in buf], schema=arrow)


# -- writes -------------------------------------------------------------------------------------


@dataclass
class FlightSinkCommitMessage(WriterCommitMessage):
    """What one write task hands the driver: its stage (None for an empty partition).

    Attributes:
        partition: the Spark partition id.
        attempt: the task attempt that staged it.
        stage: the stage token of the ``staged`` DoPut, None when the partition was empty or the
            epoch was already committed (``duplicate``).
        rows: rows staged.
        query_id: Spark's ``sql.streaming.queryId`` as the task saw it (None outside streaming).
        status: the DoPut's status (``staged``, ``duplicate``) or ``empty``.
    """

    partition: int
    attempt: int
    stage: Optional[str]
    rows: int
    query_id: Optional[str]
    status: str


def _our_messages(messages: Sequence[Optional[WriterCommitMessage]]) -> list[Optional[FlightSinkCommitMessage]]:
    """The commit messages Spark hands back to the writer: the write tasks' (None for a task
    that failed)."""
    out: list[Optional[FlightSinkCommitMessage]] = []
    for m in messages:
        if m is not None and not isinstance(m, FlightSinkCommitMessage):
            raise TypeError(f"flight-sink: a commit message its write tasks did not make: {m!r}")
        out.append(m)
    return out


def _task_identity() -> tuple[int, int, Optional[str], Optional[int]]:
    """(partition id, attempt, Spark's streaming query id, batch id) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, None, None
    qid = ctx.getLocalProperty(_QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(_BATCH_ID_PROPERTY)
    return int(ctx.partitionId()), int(ctx.attemptNumber()), qid or None, int(batch) if batch else None


def _stage_partition(
    opts: _Options, batches: Iterator[pa.RecordBatch], query_id: str, epoch_id: int, mode: str,
    partition: int, attempt: int, spark_query_id: Optional[str],
) -> FlightSinkCommitMessage:
    """Stage this task's partition in one DoPut; an empty partition sends nothing."""
    it = (b for b in batches if b.num_rows)
    first = next(it, None)
    if first is None:
        return FlightSinkCommitMessage(partition, attempt, None, 0, spark_query_id, "empty")

    def stream() -> Iterator[pa.RecordBatch]:
        yield first
        yield from it

    ack = opts.client().put_epoch(
        opts.table,
        stream(),
        query_id=query_id,
        epoch_id=epoch_id,
        mode=mode,
        create=opts.create,
        partition=(partition, attempt),
        schema=first.schema,
        route=opts.route,
        **opts.merge_kwargs(),
    )
    if ack.status not in ("staged", "duplicate"):
        raise EpochNotCommittedError(
            f"partition {partition} of epoch {epoch_id} of {query_id}: unexpected "
            f"acknowledgement {ack.raw!r}"
        )
    if opts.fail_after_stage == (partition, attempt):
        raise ClientError(
            f"{TEST_FAIL_AFTER_STAGE_OPTION}: injected failure after staging partition "
            f"{partition} attempt {attempt} (stage {ack.stage})"
        )
    return FlightSinkCommitMessage(partition, attempt, ack.stage, ack.rows, spark_query_id, ack.status)


def _commit(
    opts: _Options, messages: Sequence[Optional[FlightSinkCommitMessage]], query_id: str,
    epoch_id: int, mode: str, schema: StructType,
) -> Ack:
    """Commit the stages of ``messages`` as one transaction; ``duplicate`` is success."""
    stages: dict[int, str] = {}
    for m in messages:
        if m is None:
            raise EpochNotCommittedError(
                f"epoch {epoch_id} of {query_id}: a write task left no commit message; not committing"
            )
        if m.stage is not None:
            if m.partition in stages:
                raise EpochNotCommittedError(
                    f"epoch {epoch_id}: two stages for partition {m.partition}; not committing"
                )
            stages[m.partition] = m.stage
    client = opts.client()
    try:
        ack = client.commit_epoch(
            opts.table,
            query_id=query_id,
            epoch_id=epoch_id,
            stages=[stages[p] for p in sorted(stages)],
            mode=mode,
            **opts.merge_kwargs(),
        )
    except TableNotFoundError:
        if stages:
            raise
        if mode != "complete":
            # Every partition was empty and no table exists yet: nothing to commit.
            return Ack(status="empty", table=opts.table, query_id=query_id, epoch_id=epoch_id)
        if not opts.create:
            raise
        # An empty complete batch before the table exists: create it with the batch's schema
        # and commit the empty overwrite in one DoPut.
        ack = client.put_epoch(
            opts.table,
            _arrow_schema(schema).empty_table(),
            query_id=query_id,
            epoch_id=epoch_id,
            mode=mode,
            create=opts.create,
            staged=False,
            **opts.merge_kwargs(),
        )
    if not ack.landed:
        raise EpochNotCommittedError(
            f"epoch {epoch_id} of {query_id} was not committed to {opts.table}: {ack.raw!r}"
        )
    log.info("flight-sink: epoch %d of %s -> %s (version %s, %d rows)", epoch_id, query_id,
             ack.status, ack.version, ack.rows)
    return ack


class _StreamWriter:
    """Streaming writes: stage per task, commit per micro-batch (module docstring)."""

    def __init__(self, opts: _Options, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        self.schema = schema
        self.mode = "complete" if overwrite else "append"

    def _write(self, batches: Iterator[pa.RecordBatch]) -> FlightSinkCommitMessage:
        pid, attempt, spark_qid, batch_id = _task_identity()
        qid = self.opts.query_id or spark_qid
        if qid is None or batch_id is None:
            raise InvalidArgumentError(
                "flight-sink streaming write: the task has no sql.streaming.queryId / "
                "streaming.sql.batchId local property (not a micro-batch query?)"
            )
        return _stage_partition(self.opts, batches, qid, batch_id, self.mode, pid, attempt, spark_qid)

    def _query_id(self, messages: Sequence[Optional[FlightSinkCommitMessage]]) -> str:
        """The epoch's query id: the ``query_id`` option wins over Spark's id from the tasks."""
        if self.opts.query_id:
            return self.opts.query_id
        ids = {m.query_id for m in messages if m is not None and m.query_id}
        if len(ids) > 1:
            raise EpochNotCommittedError(f"write tasks disagree on the streaming query id: {sorted(ids)}")
        if not ids:
            raise EpochNotCommittedError(
                "flight-sink: no write task reported Spark's streaming query id (a batch with no "
                "partitions?); set the query_id option"
            )
        return ids.pop()

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        ours = _our_messages(messages)
        _commit(self.opts, ours, self._query_id(ours), int(batchId), self.mode, self.schema)

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        # Nothing to undo: stages are invisible until committed and cleanup removes them.
        staged = [m.stage for m in _our_messages(messages) if m is not None and m.stage]
        log.warning("flight-sink: micro-batch %s aborted; %d stage(s) left uncommitted", batchId, len(staged))


if _StreamArrowWriter is not None:

    class FlightSinkStreamWriter(_StreamWriter, _StreamArrowWriter):  # type: ignore[misc, valid-type]
        """Streaming writer handed Arrow batches (PySpark 4.1+)."""

        def write(self, iterator: Iterator[pa.RecordBatch]) -> FlightSinkCommitMessage:
            return self._write(iterator)

else:

    class FlightSinkStreamWriter(_StreamWriter, DataSourceStreamWriter):  # type: ignore[no-redef]
        """Streaming writer handed rows (PySpark 4.0), sent as Arrow batches."""

        def write(self, iterator: Iterator[Any]) -> FlightSinkCommitMessage:
            return self._write(_rows_to_batches(self.schema, iterator))


class _BatchWriter:
    """``df.write``: every task stages, the driver commits once (epoch 0 of a fresh query id)."""

    def __init__(self, opts: _Options, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        self.schema = schema
        self.mode = "complete" if overwrite else "append"
        # Made where Spark creates the writer (once per write) and pickled to the tasks.
        self.query_id = opts.query_id or f"spark-write-{uuid.uuid4()}"

    def _write(self, batches: Iterator[pa.RecordBatch]) -> FlightSinkCommitMessage:
        pid, attempt, _, _ = _task_identity()
        return _stage_partition(self.opts, batches, self.query_id, 0, self.mode, pid, attempt, None)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        _commit(self.opts, _our_messages(messages), self.query_id, 0, self.mode, self.schema)

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        log.warning("flight-sink: write %s aborted; nothing was committed", self.query_id)


if _ArrowWriter is not None:

    class FlightSinkWriter(_BatchWriter, _ArrowWriter):  # type: ignore[misc, valid-type]
        """Batch writer handed Arrow batches (PySpark 4.1+)."""

        def write(self, iterator: Iterator[pa.RecordBatch]) -> FlightSinkCommitMessage:
            return self._write(iterator)

else:

    class FlightSinkWriter(_BatchWriter, DataSourceWriter):  # type: ignore[no-redef]
        """Batch writer handed rows (PySpark 4.0), sent as Arrow batches."""

        def write(self, iterator: Iterator[Any]) -> FlightSinkCommitMessage:
            return self._write(_rows_to_batches(self.schema, iterator))


# -- reads --------------------------------------------------------------------------------------


def _read_ticket(client: Client, ticket: bytes) -> Iterator[pa.RecordBatch]:
    """The record batches of one DoGet ticket, through the client's connection."""
    what = f"DoGet {ticket[:200].decode(errors='replace')}"
    try:
        reader = client._client().do_get(fl.Ticket(ticket), client._options())
        for chunk in reader:
            if chunk.data is not None and chunk.data.num_rows:
                yield chunk.data
    except pa.ArrowException as e:
        raise from_arrow_error(e, what, client.uri) from e


def _predicate_value(v: Any) -> Any:
    """A filter literal as predicate JSON, or raises TypeError for one not pushed."""
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.timezone.utc)  # Spark hands session-zone (UTC) values
        return v.isoformat()
    if isinstance(v, _dt.date):
        return v.isoformat()
    raise TypeError(type(v).__name__)


def filter_to_predicate(f: Any) -> Optional[dict[str, Any]]:
    """A Spark data source ``Filter`` as the protocol's predicate JSON, or None if not pushed.

    Translated: ``EqualTo``, ``EqualNullSafe`` with a non-null value, ``GreaterThan(OrEqual)``,
    ``LessThan(OrEqual)``, ``In``, ``IsNull``, ``IsNotNull`` and ``Not`` of those, on top-level
    columns with bool, number, string, date or timestamp literals. String patterns and nested
    columns are left to Spark.
    """
    ops = {
        "EqualTo": "=", "EqualNullSafe": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=",
        "LessThan": "<", "LessThanOrEqual": "<=",
    }
    name = type(f).__name__
    try:
        if name == "Not":
            inner = filter_to_predicate(f.child)
            return {"op": "not", "args": [inner]} if inner is not None else None
        attr = getattr(f, "attribute", None)
        if attr is None or len(attr) != 1:
            return None
        col = attr[0]
        if name in ops:
            if f.value is None:
                return None
            return {"op": ops[name], "column": col, "value": _predicate_value(f.value)}
        if name == "In":
            values = [_predicate_value(v) for v in f.value if v is not None]
            return {"op": "in", "column": col, "values": values} if values else None
        if name == "IsNull":
            return {"op": "is_null", "column": col}
        if name == "IsNotNull":
            return {"op": "is_not_null", "column": col}
    except TypeError:
        return None
    return None


class FlightSinkPartition(InputPartition):
    """One Spark partition of a read: one DoGet ticket (a GetFlightInfo endpoint)."""

    def __init__(self, ticket: bytes) -> None:
        super().__init__(ticket)
        self.ticket = ticket


def _our_partition(partition: InputPartition) -> FlightSinkPartition:
    """A partition Spark hands back to the reader: one :meth:`partitions` made."""
    if not isinstance(partition, FlightSinkPartition):
        raise TypeError(f"flight-sink: a read of a partition it did not make: {partition!r}")
    return partition


def _read_partition(opts: _Options, part: FlightSinkPartition) -> Iterator[pa.RecordBatch]:
    return _read_ticket(opts.client(), part.ticket)


def _endpoint_partitions(info: fl.FlightInfo) -> list[FlightSinkPartition]:
    return [FlightSinkPartition(ep.ticket.ticket) for ep in info.endpoints]


class _BatchReader:
    def __init__(self, opts: _Options, schema: StructType) -> None:
        self.opts = opts
        self.columns = schema.fieldNames()
        self.predicates: list[dict[str, Any]] = []

    def partitions(self) -> Sequence[InputPartition]:
        pred: Optional[dict[str, Any]] = None
        if len(self.predicates) == 1:
            pred = self.predicates[0]
        elif self.predicates:
            pred = {"op": "and", "args": list(self.predicates)}
        info = self.opts.client().flight_info(self.opts.table, version=self.opts.version, columns=self.columns, filter=pred)
        return _endpoint_partitions(info)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, _our_partition(partition))


class FlightSinkReader(_BatchReader, DataSourceReader):
    """Batch reads without filter pushdown (``pushFilters=false``, or PySpark 4.0)."""


class FlightSinkFilteringReader(FlightSinkReader):
    """Batch reads that push filters into the tickets (PySpark 4.1+).

    Every pushed filter is also returned to Spark, which evaluates it again after the scan: the
    server's filter cuts what is read and sent, Spark's keeps the result exact for literals
    whose translation could differ in a corner (time zones of naive timestamps, say).
    """

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        for f in filters:
            p = filter_to_predicate(f)
            if p is not None:
                self.predicates.append(p)
            yield f


@dataclass
class _VersionRun:
    """A run of consecutive Append versions ``first..last`` (streaming reads)."""

    first: int
    last: int


def _base_fragments(info: fl.FlightInfo) -> Optional[list[list[int]]]:
    """The fragment ids of each base endpoint of ``info`` (the tickets' ``fragments``), or None
    when a ticket does not list them (a server without parallel endpoints)."""
    groups: list[list[int]] = []
    for ep in info.endpoints:
        t = json.loads(ep.ticket.ticket)
        if t.get("memwal"):
            continue
        if "fragments" not in t:
            return None
        groups.append([int(x) for x in t["fragments"]])
    return groups


class FlightSinkStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("flight-sink")``: a streaming source whose offsets are versions.

    The offset is ``{"version": v}``. The first micro-batch of a new query reads the whole table
    at the latest version (as Delta does), in one Spark partition per endpoint; each later one
    reads the rows the versions in ``(start, end]`` appended, each once across restarts (the
    versions are pinned, so a replayed batch reads the same rows). Versions are classified by
    the ``history`` action:

    - ``Append`` (epochs, plain appends, MemWAL folds): its rows are read. MemWAL rows are read
      once a fold appended them to the table, not while they sit in the shards.
    - ``Create``, ``Rewrite`` (compaction) and index or config changes: no rows changed, skipped.
    - ``Overwrite``, ``Delete``, ``Update``, ``Upsert``: rows were changed; the query fails
      naming the version unless ``skipChangeCommits`` is true, which skips the whole version
      (its new rows included), as Delta does.

    The rows a run of Appends ``a..b`` added are read, without a server-side "changes" read, as
    the fragments of version ``b`` that version ``a - 1`` does not have: an Append only adds
    fragments (with new ids), so those are exactly its rows. The fragment ids come from the
    ``fragments`` of the GetFlightInfo endpoint tickets of both versions, and the rows from
    DoGet tickets ``{"table", "version": b, "fragments": [...], "columns"}``, one Spark
    partition per endpoint group of ``b``.
    """

    def __init__(self, opts: _Options, schema: StructType) -> None:
        self.opts = opts
        self.columns = schema.fieldNames()

    def initialOffset(self) -> dict[str, int]:
        return {"version": 0}

    # PySpark before 4.3 calls latestOffset() without arguments; the reader admits every
    # version at once, so it takes none.
    def latestOffset(self) -> dict[str, int]:  # type: ignore[override]
        try:
            stats = self.opts.client().table_stats(self.opts.table)
        except TableNotFoundError:
            return {"version": 0}
        return {"version": stats.version}

    def _runs(self, start: int, end: int) -> list[_VersionRun]:
        client = self.opts.client()
        limit = self.latestOffset()["version"] - start
        if limit > 10000:
            raise FlightSinkError(
                f"flight-sink stream of {self.opts.table}: {limit} versions behind (more than "
                "the history action lists); restart the query from a new checkpoint"
            )
        ops: dict[int, tuple[str, bool]] = {}
        for h in client.history(self.opts.table, limit=max(limit, 1)):
            ops[h.version] = (h.operation, h.missing)
        runs: list[_VersionRun] = []
        for v in range(start + 1, end + 1):
            op, missing = ops.get(v, ("", True))
            if missing:
                raise FlightSinkError(
                    f"flight-sink stream of {self.opts.table}: version {v} was cleaned up before "
                    "the stream read it; restart the query from a new checkpoint"
                )
            if op in _APPENDS:
                if runs and runs[-1].last == v - 1:
                    runs[-1].last = v
                else:
                    runs.append(_VersionRun(v, v))
            elif op in _NO_ROW_CHANGE:
                continue
            elif op in _ROW_CHANGES and self.opts.skip_change_commits:
                log.info("flight-sink stream of %s: skipping %s version %d (skipChangeCommits)",
                         self.opts.table, op, v)
            elif op in _ROW_CHANGES:
                raise FlightSinkError(
                    f"flight-sink stream of {self.opts.table}: version {v} is an {op}, which "
                    "changed or removed rows a stream of appends cannot express; set the option "
                    "skipChangeCommits=true to skip such versions"
                )
            else:
                raise FlightSinkError(
                    f"flight-sink stream of {self.opts.table}: version {v} has operation {op!r}, "
                    "which this client does not know how to read as a stream"
                )
        return runs

    def _run_partitions(self, run: _VersionRun) -> list[FlightSinkPartition]:
        client = self.opts.client()
        before = _base_fragments(client.flight_info(self.opts.table, version=run.first - 1))
        after = _base_fragments(client.flight_info(self.opts.table, version=run.last))
        if before is None or after is None:
            raise FlightSinkError(
                "flight-sink streaming reads need a server whose GetFlightInfo tickets list "
                "their fragments (docs/protocol.md, Endpoint tickets)"
            )
        old = {f for g in before for f in g}
        out = []
        for group in after:
            new = [f for f in group if f not in old]
            if new:
                ticket = {"table": self.opts.table, "version": run.last, "fragments": new,
                          "columns": self.columns}
                out.append(FlightSinkPartition(_json.dumps(ticket).encode()))
        return out

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = int(start["version"]), int(end["version"])
        if e <= s:
            return []
        if s == 0:
            return _endpoint_partitions(self.opts.client().flight_info(self.opts.table, version=e, columns=self.columns))
        out: list[InputPartition] = []
        for run in self._runs(s, e):
            out.extend(self._run_partitions(run))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, _our_partition(partition))

    def commit(self, end: dict[str, Any]) -> None:
        pass


# -- the data source ----------------------------------------------------------------------------


class FlightSinkDataSource(DataSource):
    """The ``flight-sink`` data source: options and modes in the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = _Options.parse(options)

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        info = self.opts.client().flight_info(self.opts.table, version=self.opts.version)
        return from_arrow_schema(info.schema, prefer_timestamp_ntz=True)

    def reader(self, schema: StructType) -> DataSourceReader:
        if self.opts.push_filters and hasattr(_ds, "Filter"):
            return FlightSinkFilteringReader(self.opts, schema)
        return FlightSinkReader(self.opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return FlightSinkWriter(self.opts, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return FlightSinkStreamWriter(self.opts, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FlightSinkStreamReader(self.opts, schema)
