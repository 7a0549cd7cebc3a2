"""A ``foreach`` writer for Spark's Real-Time Mode: rows land in a MemWAL table, exactly once.

Real-Time Mode (PySpark 4.2+, ``.trigger(realTime="5 seconds")``) allow-lists only ``foreach``
writers, so :class:`FlightSinkForeachWriter` is the way into flight-sink there (it works in
ordinary micro-batch queries too)::

    from flight_sink.foreach import FlightSinkForeachWriter

    (df.writeStream.outputMode("update")
       .foreach(FlightSinkForeachWriter("grpc://127.0.0.1:8815", table="clicks"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 seconds")
       .start())

Spark calls ``open(partition_id, epoch_id)``, then ``process(row)`` per row, then
``close(error)`` once per partition and epoch. The rows of one (partition, epoch) are buffered
and sent in ``close`` as **one** epoch write, with the identity

    query_id = "<query>/p<partition_id>",  epoch_id = epoch_id

so each partition is its own stream of epochs to the server. ``close`` returns only after the
server acknowledged the write (an ack means durable: in a MemWAL table, in the shard's
write-ahead log). When Spark replays an epoch after a failure, the partition sends the same
identity again and the server answers ``duplicate``: nothing is counted twice. ``<query>`` is the
``query_id`` argument, or Spark's own ``StreamingQuery.id`` (the task's
``sql.streaming.queryId`` local property), stable across restarts from one checkpoint.

One write per (partition, epoch), not one per chunk of rows: a MemWAL shard summarises a
stream's flushed epochs by its highest one, and an older identity is refused as a reused query
id, so a replay must present exactly the identities it presented before: Spark replays an epoch
whole, never part of one.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import pyarrow as pa

from .client import Client, CreateSpec
from .errors import EpochNotCommittedError, InvalidArgumentError
from .results import Ack
from .retry import RetryPolicy

__all__ = ["FlightSinkForeachWriter", "partition_query_id"]

log = logging.getLogger("flight_sink")

_QUERY_ID_PROPERTY = "sql.streaming.queryId"

#: A hook run in the task after an epoch's write was acknowledged:
#: ``hook(partition_id, epoch_id, ack)``. Raising fails the task (used by tests).
CloseHook = Callable[[int, int, Ack], None]


def partition_query_id(query_id: str, partition_id: int) -> str:
    """The epoch identity's query id of one partition of a foreach query."""
    return f"{query_id}/p{int(partition_id)}"


class FlightSinkForeachWriter:
    """A Structured Streaming ``foreach`` writer landing each (partition, epoch) exactly once.

    Args:
        uri: the server.
        table: the table, a MemWAL table for Real-Time Mode (``create`` makes one).
        query_id: the query part of the identity; default: Spark's ``StreamingQuery.id``.
        token: bearer token.
        create: create the table on first write: default ``{"memwal": {"shards": 1}}`` (a
            MemWAL table: epochs land in the shards, not one table version each); ``True`` for a
            plain table; a dict for other options; ``False`` to require an existing table.
        route: the DoPut ``route`` (default ``auto``: a MemWAL table's appends go to its shards).
        retry: retry policy for transient unavailability.

    The object is pickled to the executors; every task opens (and reuses, per Python worker)
    its own connection.
    """

    def __init__(
        self,
        uri: str,
        table: str,
        *,
        query_id: Optional[str] = None,
        token: Optional[str] = None,
        create: CreateSpec = None,  # type: ignore[assignment]
        route: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        _close_hook: Optional[CloseHook] = None,
    ) -> None:
        if not table:
            raise InvalidArgumentError("table is required")
        self.uri = uri
        self.table = table
        self.query_id = query_id
        self.token = token
        self.create: CreateSpec = {"memwal": {"shards": 1}} if create is None else create
        self.route = route
        self.retry = retry
        self._close_hook = _close_hook
        self._rows: list[Any] = []
        self._partition = 0
        self._epoch = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_rows"] = []
        return state

    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Start (partition, epoch); always processes it (a replay is deduped by the server)."""
        self._partition, self._epoch = int(partition_id), int(epoch_id)
        self._rows = []
        return True

    def process(self, row: Any) -> None:
        """Buffer one row of the epoch."""
        self._rows.append(row)

    def _resolve_query_id(self) -> str:
        if self.query_id:
            return str(self.query_id).strip()
        from pyspark import TaskContext

        ctx = TaskContext.get()
        qid = ctx.getLocalProperty(_QUERY_ID_PROPERTY) if ctx is not None else None
        if not qid:
            raise InvalidArgumentError(
                "FlightSinkForeachWriter: the task has no sql.streaming.queryId local property; "
                "pass query_id="
            )
        return str(qid)

    @staticmethod
    def _arrow(rows: list[Any]) -> pa.Table:
        """The epoch's rows as an Arrow table (types inferred from the values)."""
        return pa.Table.from_pylist([r.asDict(recursive=True) for r in rows])

    def close(self, error: Optional[BaseException]) -> None:
        """Send the epoch's rows and wait for the durable ack; a failed epoch sends nothing."""
        rows, self._rows = self._rows, []
        if error is not None or not rows:
            # A failed epoch: Spark fails the task and replays the epoch; nothing was sent. An
            # empty one has nothing to land (and replaying it is empty again).
            return
        data = self._arrow(rows)
        from .datasource import _process_client

        client: Client = _process_client(self.uri, self.token, self.retry)
        qid = partition_query_id(self._resolve_query_id(), self._partition)
        ack = client.put_epoch(
            self.table, data, query_id=qid, epoch_id=self._epoch, create=self.create,
            route=self.route, staged=False,
        )
        if not ack.landed:
            raise EpochNotCommittedError(
                f"epoch {self._epoch} of {qid} was not landed in {self.table}: {ack.raw!r}"
            )
        log.debug("FlightSinkForeachWriter: %s epoch %d -> %s", qid, self._epoch, ack.status)
        if self._close_hook is not None:
            self._close_hook(self._partition, self._epoch, ack)
