"""A thin Python client for the flight-sink Arrow Flight server.

It speaks the wire protocol in ``docs/protocol.md`` (protocol version 1) through
``pyarrow.flight`` and nothing else. One-off writes and filtered reads::

    c = Client("grpc://127.0.0.1:8815")
    c.write("orders", pandas_or_polars_df)              # creates the table, appends
    c.read("orders", filter="amount > 50 and country = 'NL'")

A streaming job's epochs, exactly once across its restarts::

    import pyarrow as pa
    from flight_sink import Client

    with Client("grpc://127.0.0.1:8815") as c:
        ack = c.put_epoch("events", pa.table({"id": [1, 2]}), query_id="q-1", epoch_id=0,
                          create=True)
        print(ack.status, ack.version)             # committed 2 (version 1 created the table)
        c.put_epoch("events", pa.table({"id": [1, 2]}), query_id="q-1", epoch_id=0).status
        # 'duplicate': a replayed epoch is acknowledged and nothing is written
        print(c.read("events").num_rows)           # 2
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

import pyarrow as pa
import pyarrow.flight as fl

from . import _direct, _json
from ._data import ArrowData, BatchSource, arrow_type_name, normalize_schema
from .errors import FlightSinkError, InvalidArgumentError, ProtocolError, from_arrow_error
from .filters import FilterSpec, to_predicate
from .results import (
    Ack,
    CleanupResult,
    CompactResult,
    CreateTableResult,
    DeleteResult,
    DropTableResult,
    EpochStatus,
    FlushMemWALResult,
    FoldMemWALResult,
    History,
    HistoryEntry,
    OptimizeIndicesResult,
    PublishIcebergResult,
    Result,
    TableConfig,
    TableStats,
    TableVersion,
)
from .retry import RetryPolicy

__all__ = ["MODES", "URI_SCHEMES", "Client", "CreateSpec", "PartitionSpec"]

R = TypeVar("R", bound=Result)

log = logging.getLogger("flight_sink")

#: The output modes an epoch can be written in (``docs/protocol.md``, *Modes*).
MODES = ("append", "complete", "update")

#: A table's partition spec (``docs/partitions.md``): a list of
#: ``{"column": "ts", "transform": "day"}`` (``transform`` absent: ``identity``), or of column
#: names for identity partitions.
PartitionSpec = Sequence[Union[str, Mapping[str, str]]]

#: DoPut's ``create`` option: ``True``, or the new table's options ``{"primary_key": [...],
#: "memwal": {"shards": n}, "data_codec": ..., "partition_by": [...],
#: "max_partitions_per_write": n}``.
CreateSpec = Union[bool, Mapping[str, Any]]


def _partition_by(spec: PartitionSpec) -> list[dict[str, str]]:
    """The wire form of a partition spec: a column name is its identity partition."""
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        raise TypeError(
            'partition_by must be a list such as [{"column": "ts", "transform": "day"}] or '
            f"[\"country\"], got {type(spec).__name__}"
        )
    out = []
    for f in spec:
        if isinstance(f, str):
            out.append({"column": f})
        elif isinstance(f, Mapping):
            out.append(dict(f))
        else:
            raise TypeError(f"a partition field is a column name or a {{\"column\", \"transform\"}} dict, got {f!r}")
    return out


def _create_json(create: CreateSpec) -> Union[bool, dict[str, Any]]:
    """DoPut's ``create`` object: ``partition_by`` given as :data:`PartitionSpec` in its wire form."""
    if not isinstance(create, Mapping):
        return True
    body = dict(create)
    if body.get("partition_by") is not None:
        body["partition_by"] = _partition_by(body["partition_by"])
    return body


def _shard_id(shard: Any) -> str:
    """A MemWAL shard id as the server names shards: a non-empty string (a UUID)."""
    if not isinstance(shard, str) or not shard.strip():
        raise TypeError(
            f"shard must be a MemWAL shard id string as table_stats lists it, got {shard!r}"
        )
    return shard


#: The URI schemes a Client connects with (Arrow Flight over gRPC).
URI_SCHEMES = ("grpc", "grpc+tcp", "grpc+tls", "grpc+unix")


def _check_uri(uri: object) -> None:
    """Raise ValueError unless ``uri`` is a Flight URI this client can connect to."""
    example = "grpc://127.0.0.1:8815 (or grpc+tls://host:port)"
    if not isinstance(uri, str):
        raise TypeError(f"uri must be a string such as {example}, got {type(uri).__name__}")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise InvalidArgumentError(f"uri {uri!r} has no scheme: write it as {example}")
    if scheme.lower() not in URI_SCHEMES:
        raise InvalidArgumentError(
            f"uri {uri!r}: scheme {scheme!r} is not one of {', '.join(URI_SCHEMES)}; flight-sink "
            f"speaks Arrow Flight over gRPC on its --listen address, e.g. {example}"
        )
    if scheme.lower() == "grpc+unix":
        if not rest:
            raise InvalidArgumentError(f"uri {uri!r} names no socket path: grpc+unix:///path/to.sock")
        return
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in rest.rstrip("/"):
        raise InvalidArgumentError(f"uri {uri!r} must name a host and a port (1..65535): {example}")


def _partition_json(partition: Union[tuple[int, int], Mapping[str, int]]) -> dict[str, int]:
    if isinstance(partition, Mapping):
        return {"id": int(partition["id"]), "attempt": int(partition.get("attempt", 0))}
    pid, attempt = partition
    return {"id": int(pid), "attempt": int(attempt)}


class Client:
    """A connection to a flight-sink server.

    Args:
        uri: the server, e.g. ``"grpc://127.0.0.1:8815"`` or ``"grpc+tls://host:8815"``.
        token: a bearer token, sent as the gRPC header ``authorization: Bearer <token>`` on
            every call (servers started with ``--auth-token`` require it).
        timeout: a deadline in seconds for every call (default: none).
        retry: how idempotent calls are retried on transient unavailability
            (:class:`~flight_sink.RetryPolicy`; default: for up to 60 s, jittered backoff up to 2 s).
            ``RetryPolicy.none()`` disables retries.
        tls_root_certs: PEM root certificates for ``grpc+tls://`` servers with a private CA.
        max_retry_buffer_bytes: how much of a *streamed* epoch (an iterator or
            RecordBatchReader) is kept in memory so that a retry can send it again. A stream
            larger than this is not retried after a failure; the error is raised instead.

    Errors are raised as :class:`~flight_sink.FlightSinkError` subclasses carrying the server's
    message. A Client is safe to use from one thread at a time; it connects lazily and can be
    used as a context manager (``with Client(uri) as c: ...``).
    """

    def __init__(
        self,
        uri: str,
        token: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        retry: Optional[RetryPolicy] = None,
        tls_root_certs: Optional[Union[str, bytes]] = None,
        max_retry_buffer_bytes: int = 256 << 20,
    ) -> None:
        _check_uri(uri)
        self._uri = uri
        self._token = token
        self._timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self._tls_root_certs = tls_root_certs
        self._max_buffer = max_retry_buffer_bytes
        self._conn: Optional[fl.FlightClient] = None
        self._lock = threading.Lock()
        # The epoch identity of write(): one query id per Client, epochs increasing.
        self._write_query_id = f"flight_sink.write.{uuid.uuid4()}"
        self._write_epoch = 0
        # Whether the server's local data files are not on this machine (read(direct=None)).
        self._files_elsewhere = False

    def __repr__(self) -> str:
        return f"Client({self._uri!r}{', token=***' if self._token else ''})"

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The server URI."""
        return self._uri

    def _client(self) -> fl.FlightClient:
        with self._lock:
            if self._conn is None:
                kwargs: dict[str, Any] = {}
                if self._tls_root_certs is not None:
                    kwargs["tls_root_certs"] = self._tls_root_certs
                self._conn = fl.FlightClient(self._uri, **kwargs)
            return self._conn

    def _options(self) -> fl.FlightCallOptions:
        headers: list[tuple[bytes, bytes]] = []
        if self._token:
            headers.append((b"authorization", b"Bearer " + self._token.encode()))
        return fl.FlightCallOptions(timeout=self._timeout, headers=headers)

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001  # pragma: no cover - closing a broken channel fails in any way
                pass

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _action(self, name: str, body: Mapping[str, Any], *, retry: bool = True) -> Any:
        """Run DoAction ``name`` with a JSON body and return the decoded JSON result."""
        payload = _json.dumps(body).encode()
        what = f"{name} {body.get('table', '')}".strip()

        def attempt() -> Any:
            try:
                results = list(self._client().do_action(fl.Action(name, payload), self._options()))
            except pa.ArrowException as e:
                raise from_arrow_error(e, what, self._uri) from e
            if not results:
                return None
            return json.loads(results[0].body.to_pybytes())

        if not retry:
            return attempt()
        return self.retry.call(what, attempt)

    def _do_put(self, what: str, descriptor: fl.FlightDescriptor, source: BatchSource) -> Ack:
        """One DoPut of ``source``; returns the acknowledgement."""
        try:
            writer, reader = self._client().do_put(descriptor, source.schema, self._options())
        except pa.ArrowException as e:
            raise from_arrow_error(e, what, self._uri) from e

        def fail(e: BaseException) -> FlightSinkError:
            # The call's status often only shows when the stream is closed.
            try:
                writer.close()
            except pa.ArrowException as e2:
                return from_arrow_error(e2, what, self._uri)
            return from_arrow_error(e, what, self._uri)

        batches = source.batches()
        while True:
            # Errors raised by the source itself (not by the network) propagate unchanged.
            b = next(batches, None)
            if b is None:
                break
            try:
                writer.write_batch(b)
            except pa.ArrowException as e:
                raise fail(e) from e
        try:
            writer.done_writing()
            buf = reader.read()
        except pa.ArrowException as e:
            raise fail(e) from e
        try:
            writer.close()
        except pa.ArrowException as e:
            raise from_arrow_error(e, what, self._uri) from e
        if buf is None:
            raise ProtocolError(
                f"{what}: the server ended the DoPut without an acknowledgement; nothing may be "
                "assumed (replay the epoch with the same query_id and epoch_id)",
                operation=what,
            )
        return Ack.from_json(json.loads(buf.to_pybytes()))

    # -- writes -----------------------------------------------------------------------------

    #: The modes of :meth:`write`.
    WRITE_MODES = ("append", "overwrite")

    def write(
        self,
        table: str,
        data: ArrowData,
        mode: str = "append",
        *,
        create: CreateSpec = True,
        schema: Optional[pa.Schema] = None,
        merge_schema: bool = False,
    ) -> Ack:
        """Write ``data`` to ``table`` in one call: append it, or replace the table's rows with it.

        ``data`` is a pyarrow Table, RecordBatch, RecordBatchReader or iterable of
        RecordBatch, or a pandas or Polars DataFrame. The write is one transaction, and it is
        retried as :attr:`retry` allows (e.g. across a server restart) without ever landing
        twice: each call is one epoch of this Client's own query id
        (``flight_sink.write.<uuid>``, listed in :meth:`table_stats` ``streams``). For a
        stream whose epochs must land exactly once across restarts of *your* program, use
        :meth:`put_epoch` with your query's stable id.

        Args:
            table: the table name.
            data: the rows.
            mode: ``"append"`` adds the rows; ``"overwrite"`` replaces every row of the table
                with them (one Overwrite transaction; earlier versions stay readable).
            create: create the table from the data's schema if it does not exist (default);
                ``{"primary_key": [...]}`` creates it keyed; ``False`` raises
                :class:`~flight_sink.TableNotFoundError` for an unknown table.
            schema: the schema, needed only for an iterator that may yield no batch.
            merge_schema: let the data add columns or widen types (see :meth:`put_epoch`).

        Returns:
            The acknowledgement (``committed``, or ``empty`` for an append without rows).
        """
        if mode not in self.WRITE_MODES:
            raise InvalidArgumentError(f"mode must be one of {self.WRITE_MODES}, got {mode!r}")
        with self._lock:
            # Increasing within this Client; the wall clock keeps them increasing across
            # Clients that a program creates one after another for the same query id.
            self._write_epoch = max(self._write_epoch + 1, time.time_ns() // 1000)
            epoch = self._write_epoch
        return self.put_epoch(
            table,
            data,
            query_id=self._write_query_id,
            epoch_id=epoch,
            mode="complete" if mode == "overwrite" else "append",
            create=create,
            schema=schema,
            merge_schema=merge_schema,
        )

    def put_epoch(
        self,
        table: str,
        data: ArrowData,
        *,
        query_id: str,
        epoch_id: int,
        mode: str = "append",
        create: CreateSpec = False,
        partition: Optional[Union[tuple[int, int], Mapping[str, int]]] = None,
        schema: Optional[pa.Schema] = None,
        staged: Optional[bool] = None,
        dedupe_lookback_versions: Optional[int] = None,
        route: Optional[str] = None,
        merge_schema: bool = False,
    ) -> Ack:
        """Write one epoch of a streaming query, exactly once.

        Replaying an epoch with the same ``(query_id, epoch_id)`` is acknowledged as
        ``duplicate`` and writes nothing, so after any failure the epoch can simply be sent
        again. Transient unavailability is retried as :attr:`retry` allows.

        Args:
            table: the table name.
            data: a pyarrow Table, RecordBatch, RecordBatchReader or an iterable of
                RecordBatch. Zoned timestamps are sent labelled UTC.
            query_id: the query's stable id (e.g. Spark's ``StreamingQuery.id``).
            epoch_id: the micro-batch id, >= 0.
            mode: ``"append"``, ``"complete"`` (replace the table's content with this epoch,
                even an empty one) or ``"update"``.
            create: ``True`` (or ``{"primary_key": [...]}``) creates the table from the data's
                schema if it does not exist; otherwise an unknown table raises
                :class:`~flight_sink.TableNotFoundError`.
            partition: ``(id, attempt)`` stages one partition of a multi-writer epoch: the
                result is a ``staged`` ack whose :attr:`Ack.stage` goes to
                :meth:`commit_epoch`.
            schema: the schema, required only for an iterator that may yield no batch.
            staged: send the epoch as one stage plus :meth:`commit_epoch` instead of a single
                DoPut. The default (None) stages streamed data (iterators, readers) and sends
                in-memory data in one DoPut. Staging makes a stream that fails half-way
                harmless: Flight cannot abort a DoPut, and a half-sent stage is never committed.
            dedupe_lookback_versions: versions the server's dedupe scan reads (1..10000).
            route: ``"auto"``, ``"direct"`` or ``"memwal"``.
            merge_schema: let the epoch change the table schema: new nullable columns are
                added, types promoted the way Iceberg allows (int8->...->int64,
                float32->float64, decimal precision up), in the same commit as the rows.
                Without it such an epoch raises :class:`~flight_sink.SchemaMismatchError`;
                a change no merge allows (a dropped required column, a narrowing, a
                primary-key change) is refused either way (reason ``SCHEMA_CHANGE_REFUSED``).
                An epoch that only omits nullable columns or sends narrower types needs no
                merge.

        Returns:
            The acknowledgement: ``committed``, ``duplicate``, ``empty`` (append/update without
            rows) or, with ``partition``, ``staged``.
        """
        if mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        source = BatchSource(data, schema, self._max_buffer)
        cmd: dict[str, Any] = {
            "table": table,
            "query_id": query_id,
            "epoch_id": int(epoch_id),
            "mode": mode,
        }
        if create:
            cmd["create"] = _create_json(create)
        if dedupe_lookback_versions is not None:
            cmd["dedupe_lookback_versions"] = int(dedupe_lookback_versions)
        if route is not None:
            cmd["route"] = route
        if merge_schema:
            cmd["merge_schema"] = True
        if staged is None:
            staged = not source.materialized
        if partition is None and staged:
            partition = (0, 0)
            commit_after = True
        else:
            commit_after = False
        if partition is not None:
            cmd["partition"] = _partition_json(partition)
        if source.materialized:
            # Announce the row count: a stream cut short by a half-close then commits nothing
            # instead of committing the part that arrived as the whole epoch.
            cmd["rows"] = source.total_rows()
        what = f"DoPut {table} epoch {epoch_id}"
        descriptor = fl.FlightDescriptor.for_command(_json.dumps(cmd))
        ack = self.retry.call(
            what, lambda: self._do_put(what, descriptor, source), lambda: source.replayable
        )
        if commit_after and ack.status == "staged":
            assert ack.stage is not None
            return self.commit_epoch(
                table,
                query_id=query_id,
                epoch_id=epoch_id,
                stages=[ack.stage],
                mode=mode,
                dedupe_lookback_versions=dedupe_lookback_versions,
                merge_schema=merge_schema,
            )
        return ack

    def commit_epoch(
        self,
        table: str,
        *,
        query_id: str,
        epoch_id: int,
        stages: Sequence[str],
        mode: str = "append",
        dedupe_lookback_versions: Optional[int] = None,
        merge_schema: bool = False,
    ) -> Ack:
        """Commit the staged partitions of a multi-writer epoch as one transaction.

        Pass one stage token per partition (the attempt that succeeded). A second call for
        the same epoch answers ``duplicate``; an empty ``stages`` list commits an empty epoch
        (which, in ``complete`` mode, truncates the table). ``merge_schema``: the stages (put
        with ``merge_schema=True``) may change the table schema, merged in this commit.
        """
        if mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        body: dict[str, Any] = {
            "table": table,
            "query_id": query_id,
            "epoch_id": int(epoch_id),
            "mode": mode,
            "stages": list(stages),
        }
        if dedupe_lookback_versions is not None:
            body["dedupe_lookback_versions"] = int(dedupe_lookback_versions)
        if merge_schema:
            body["merge_schema"] = True
        res = self._action("commit_epoch", body)
        if not isinstance(res, Mapping):
            raise ProtocolError(f"commit_epoch {table}: unexpected result {res!r}")
        return Ack.from_json(res)

    def put(self, table: str, data: ArrowData, *, schema: Optional[pa.Schema] = None) -> Ack:
        """Append ``data`` to an existing table, without epoch identity (no dedupe).

        ``data`` is what :meth:`write` takes. :meth:`write` is the one-call write that also
        creates the table and is retried safely; ``put`` is the protocol's plain append.

        A plain append is not idempotent, so it is never retried: after an error that may
        have happened after the server committed, check :meth:`history` before sending again.
        A stream (iterator, reader) is read completely before the call starts, so a source
        that fails half-way never leaves a partial append. Use :meth:`put_epoch` for writes that
        must land exactly once.
        """
        source = BatchSource(data, schema, self._max_buffer)
        if not source.materialized:
            batches = list(source.batches())
            source = BatchSource(pa.Table.from_batches(batches, schema=source.schema))
        what = f"DoPut {table}"
        return self._do_put(what, fl.FlightDescriptor.for_path(table), source)

    # -- reads ------------------------------------------------------------------------------

    def read(
        self,
        table: str,
        *,
        version: Optional[int] = None,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[FilterSpec] = None,
        parallel: int = 1,
        direct: Optional[bool] = None,
    ) -> pa.Table:
        """Read one consistent snapshot of a table (default: the latest version).

        Args:
            table: the table name.
            version: the version to read (a given version is the base table as it was, without
                the rows still in MemWAL shards).
            columns: the columns to read, in this order (default: all, in table order).
            filter: only the rows for which it is true: a text such as
                ``"amount > 50 and country = 'NL'"`` (:mod:`flight_sink.filters` gives the
                grammar), a ``pyarrow.compute.Expression`` (``pc.field("amount") > 50``) or the
                predicate JSON of ``delete``'s ``where`` (a dict). It is parsed here (a mistake
                raises :class:`~flight_sink.filters.FilterSyntaxError` naming its position) and
                applied on the server, which skips row groups whose Parquet statistics exclude a
                match.
            parallel: with ``parallel > 1`` the table is described with GetFlightInfo and its
                endpoints (groups of fragments, and the MemWAL rows) are read by ``parallel``
                threads; the result is the same rows as one DoGet at the moment of the
                GetFlightInfo, in endpoint order.
            direct: read the data files themselves where this process can reach them
                (``docs/protocol.md``, *Direct reads*): GetFlightInfo hands out each base
                fragment's file (a local path, or a presigned URL on S3) with its deleted rows,
                and pyarrow reads them in parallel (two threads a CPU); the rows only the server can produce (MemWAL
                rows, a filtered read) and every file that cannot be opened (another machine,
                removed since by compaction and cleanup) are read with DoGet. The result is the
                same rows and schema as DoGet's. ``None`` (the default): direct where possible,
                except with a ``filter`` (which the server applies), and once a read finds the
                server's local files on another machine (their directory is not here), this
                Client reads with DoGet as with ``False``; ``True``: always ask, and
                raise :class:`~flight_sink.ProtocolError` instead of falling back when a file
                handed out cannot be read; ``False``: DoGet only.
        """
        if direct or (direct is None and filter is None and not self._files_elsewhere):
            out = self._read_direct(table, version, columns, filter, parallel, strict=bool(direct))
            if out is not None:
                return out
        if parallel > 1:
            return self._read_parallel(table, version, columns, filter, parallel)
        ticket = self._read_command(table, version, columns, filter)
        return self.read_ticket(_json.dumps(ticket).encode(), what=f"DoGet {table}")

    @staticmethod
    def _read_command(
        table: str,
        version: Optional[int],
        columns: Optional[Sequence[str]],
        filter: Optional[FilterSpec],
    ) -> dict[str, Any]:
        cmd: dict[str, Any] = {"table": table}
        if version is not None:
            cmd["version"] = int(version)
        if columns is not None:
            cmd["columns"] = list(columns)
        if filter is not None:
            cmd["filter"] = to_predicate(filter)
        return cmd

    def flight_info(
        self,
        table: str,
        *,
        version: Optional[int] = None,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[FilterSpec] = None,
        direct: bool = False,
    ) -> fl.FlightInfo:
        """Describe a table for a parallel read: GetFlightInfo with a descriptor command.

        Each endpoint's ticket reads one part (``read_ticket``); together they are exactly one
        read of the table now. ``total_records`` counts them (``-1`` with a filter). With
        ``direct`` the endpoints also carry the data files' locations (``read(direct=...)``).
        """
        cmd = self._read_command(table, version, columns, filter)
        if direct:
            cmd["direct"] = True
        desc = fl.FlightDescriptor.for_command(_json.dumps(cmd).encode())
        what = f"GetFlightInfo {table}"

        def attempt() -> fl.FlightInfo:
            try:
                return self._client().get_flight_info(desc, self._options())
            except pa.ArrowException as e:
                raise from_arrow_error(e, what, self._uri) from e

        return self.retry.call(what, attempt)

    def read_ticket(self, ticket: Union[bytes, fl.Ticket], *, what: str = "DoGet") -> pa.Table:
        """Read one DoGet ticket (an endpoint's, from ``flight_info``) to the end."""
        tk = ticket if isinstance(ticket, fl.Ticket) else fl.Ticket(ticket)

        def attempt() -> pa.Table:
            try:
                return self._client().do_get(tk, self._options()).read_all()
            except pa.ArrowException as e:
                raise from_arrow_error(e, what, self._uri) from e

        return self.retry.call(what, attempt)

    def _read_parallel(
        self,
        table: str,
        version: Optional[int],
        columns: Optional[Sequence[str]],
        filter: Optional[FilterSpec],
        parallel: int,
    ) -> pa.Table:
        from concurrent.futures import ThreadPoolExecutor

        info = self.flight_info(table, version=version, columns=columns, filter=filter)
        tickets = [ep.ticket for ep in info.endpoints]
        if not tickets:
            return info.schema.empty_table()
        self._client()  # connect once, before the threads share the connection
        with ThreadPoolExecutor(max_workers=min(parallel, len(tickets))) as pool:
            parts = list(pool.map(lambda tk: self.read_ticket(tk, what=f"DoGet {table} endpoint"), tickets))
        return pa.concat_tables(parts)

    def _read_direct(
        self,
        table: str,
        version: Optional[int],
        columns: Optional[Sequence[str]],
        filter: Optional[FilterSpec],
        parallel: int,
        strict: bool,
    ) -> Optional[pa.Table]:
        info = self.flight_info(table, version=version, columns=columns, filter=filter, direct=True)
        if not strict and _direct.elsewhere(info.endpoints):
            # The server's files are on another machine: every endpoint would fall back, one
            # DoGet per fragment. Read as without direct, now and from now on.
            self._files_elsewhere = True
            return None
        return self.read_flight_info(info, parallel=parallel, direct=True if strict else None)

    def read_flight_info(self, info: fl.FlightInfo, *, parallel: int = 1, direct: Optional[bool] = None) -> pa.Table:
        """Read every endpoint of a FlightInfo (``flight_info``), in order, as one table.

        An endpoint with a location is read directly from its file unless ``direct`` is False;
        when the file cannot be read as its DoGet would return it, its ticket is read with DoGet
        (``direct=None``) or :class:`~flight_sink.ProtocolError` is raised (``direct=True``).
        Endpoints are read by up to ``max(parallel, 2 x CPU count)`` threads.
        """
        import os
        from concurrent.futures import ThreadPoolExecutor

        schema = info.schema
        endpoints = list(info.endpoints)
        if not endpoints:
            return schema.empty_table()
        table = info.descriptor.path[0].decode() if info.descriptor.path else "table"
        what = f"DoGet {table} endpoint"
        strict = direct is True

        def read(ep: fl.FlightEndpoint) -> pa.Table:
            if direct is not False and _direct.location_of(ep) is not None:
                try:
                    return _direct.read_endpoint(ep, schema)
                except _direct.DirectReadError as e:
                    if strict:
                        raise ProtocolError(f"direct read of {table}: {e}") from e
                    log.debug("direct read of %s falls back to DoGet: %s", table, e)
            return self.read_ticket(ep.ticket, what=what)

        self._client()  # connect once, before the threads share the connection
        # Two threads a CPU: a file's read also waits on page faults and on pyarrow's own pool.
        workers = min(len(endpoints), max(parallel, 2 * (os.cpu_count() or 1)))
        if workers <= 1:
            parts = [read(ep) for ep in endpoints]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                parts = list(pool.map(read, endpoints))
        return pa.concat_tables(parts)

    def schema(self, table: str) -> pa.Schema:
        """The table's schema at its latest version."""
        what = f"GetFlightInfo {table}"

        def attempt() -> pa.Schema:
            # GetFlightInfo rather than GetSchema: pyarrow's get_schema drops the error's status
            # details (it raises a plain ArrowKeyError without extra_info), so its reason.
            try:
                return self._client().get_flight_info(
                    fl.FlightDescriptor.for_path(table), self._options()
                ).schema
            except pa.ArrowException as e:
                raise from_arrow_error(e, what, self._uri) from e

        return self.retry.call(what, attempt)

    def list_tables(self) -> list[str]:
        """The names of the tables under the server's root."""

        def attempt() -> list[str]:
            try:
                infos = list(self._client().list_flights(options=self._options()))
            except pa.ArrowException as e:
                raise from_arrow_error(e, "ListFlights", self._uri) from e
            names = []
            for info in infos:
                path = info.descriptor.path
                if path:
                    p = path[0]
                    names.append(p.decode() if isinstance(p, bytes) else str(p))
            return names

        return self.retry.call("ListFlights", attempt)

    def list_actions(self) -> dict[str, str]:
        """The actions the server runs, with their descriptions."""

        def attempt() -> dict[str, str]:
            try:
                return {a.type: a.description for a in self._client().list_actions(self._options())}
            except pa.ArrowException as e:
                raise from_arrow_error(e, "ListActions", self._uri) from e

        return self.retry.call("ListActions", attempt)

    def epoch_status(self, table: str, *, query_id: str, epoch_id: int) -> EpochStatus:
        """Whether epoch ``epoch_id`` of ``query_id`` is committed in ``table``.

        Raises :class:`~flight_sink.TableNotFoundError` for an unknown table and
        :class:`~flight_sink.QueryReusedError` when the epoch is below the query's watermark
        but was never committed (a new checkpoint reusing the query id).
        """
        res = self._action(
            "epoch_status", {"table": table, "query_id": query_id, "epoch_id": int(epoch_id)}
        )
        return EpochStatus.from_json(res)

    def history(self, table: str, limit: int = 20) -> list[HistoryEntry]:
        """The table's transactions, newest first (``limit`` 1..10000).

        Each :class:`~flight_sink.results.HistoryEntry` has ``version``, ``timestamp``,
        ``operation`` (``Create``, ``Append``, ``Overwrite``, ...), ``read_version``,
        ``properties`` (epoch commits carry ``flight_sink.streaming.query_id`` and
        ``flight_sink.streaming.epoch_id``) and ``transaction_file``; a version cleanup removed
        has ``missing`` set.
        """
        res = self._action("history", {"table": table, "limit": int(limit)})
        return History.from_json(res, what="history").versions

    def table_stats(self, table: str) -> TableStats:
        """Table statistics (:class:`~flight_sink.results.TableStats`): ``version``, ``rows``,
        ``fragments``, ``data_bytes``, ``primary_key``, ``partition_by``, ``streams`` (each
        query's last committed epoch), ``schema`` and, for a MemWAL table, ``memwal``
        (``memwal.shards[i].shard`` is a shard id)."""
        return self._result(TableStats, "table_stats", {"table": table})

    # -- administration ---------------------------------------------------------------------

    def get_table_config(self, table: str) -> dict[str, str]:
        """The table's maintenance settings as ``{key: value}``: each key's stored value or its
        default (``compaction.max_fragments``, ``mode``, ``cleanup.keep_last``, ...; the keys are
        listed in docs/operations.md)."""
        res = self._action("get_table_config", {"table": table})
        return TableConfig.from_json(res, what="get_table_config").values()

    def set_table_config(self, table: str, settings: Mapping[str, Any]) -> dict[str, str]:
        """Change maintenance settings in one commit; the next maintenance run follows them.

        Values are sent as text (``True`` as ``"true"``); ``""`` or ``None`` restores a key's
        default. An unknown key or a bad value raises :class:`InvalidRequestError` naming the key,
        and changes nothing. Returns the settings as :meth:`get_table_config` does.
        """

        def text(v: Any) -> str:
            if v is None:
                return ""
            if isinstance(v, bool):
                return "true" if v else "false"
            return str(v)

        body = {"table": table, "set": {k: text(v) for k, v in settings.items()}}
        res = self._action("set_table_config", body)
        return TableConfig.from_json(res, what="set_table_config").values()

    def create_table(
        self,
        table: str,
        schema: Union[pa.Schema, Sequence[Mapping[str, Any]]],
        *,
        primary_key: Optional[Sequence[str]] = None,
        partition_by: Optional[PartitionSpec] = None,
        max_partitions_per_write: Optional[int] = None,
        memwal_shards: Optional[int] = None,
        data_codec: Optional[str] = None,
    ) -> CreateTableResult:
        """Create an empty table.

        Args:
            table: the name: 1-128 characters of ``[A-Za-z0-9_.-]``, starting with a letter or
                digit.
            schema: a pyarrow Schema, or a list of ``{"name", "type", "nullable"}`` with the
                type names of ``docs/protocol.md`` (``int64``, ``utf8``,
                ``timestamp[us, tz=UTC]``, ...).
            primary_key: key columns.
            partition_by: the partition spec: a list of ``{"column": "ts", "transform":
                "day"}`` with Iceberg's transforms ``identity`` (the default), ``year``,
                ``month``, ``day``, ``hour``, ``bucket[N]`` and ``truncate[W]``, or plain column
                names for identity partitions (``["country"]``). Every data file then holds the
                rows of one partition, and a read filtered on a source column skips the others.
            max_partitions_per_write: the most partitions one write may hold (default: the
                server's ``--max-partitions-per-write``, 1,000); a write past it raises
                :class:`~flight_sink.InvalidRequestError` (``TOO_MANY_PARTITIONS``) and commits
                nothing.
            memwal_shards: MemWAL shards (servers with MemWAL).
            data_codec: the compression of the table's data files: ``"zstd"`` (the
                server's default: the smallest files), ``"lz4_raw"`` (cheaper to decode, larger),
                ``"snappy"`` or ``"none"`` (docs/storage.md has the trade-off).

        Returns:
            The table, its first version and its schema as stored, with field ids. Raises
            :class:`~flight_sink.AlreadyExistsError` if the table exists and
            :class:`~flight_sink.InvalidRequestError` (``INVALID_PARTITION_SPEC``, its
            ``metadata["column"]`` naming the column) for a partition spec that does not fit the
            schema: nothing is created. Not retried.
        """
        if isinstance(schema, pa.Schema):
            cols = [
                {"name": f.name, "type": arrow_type_name(f.type), "nullable": f.nullable}
                for f in normalize_schema(schema)
            ]
        else:
            cols = [dict(c) for c in schema]
        body: dict[str, Any] = {"table": table, "schema": cols}
        if primary_key:
            body["primary_key"] = list(primary_key)
        if partition_by is not None:
            body["partition_by"] = _partition_by(partition_by)
        if max_partitions_per_write is not None:
            body["max_partitions_per_write"] = int(max_partitions_per_write)
        if memwal_shards is not None:
            body["memwal"] = {"shards": int(memwal_shards)}
        if data_codec is not None:
            body["data_codec"] = data_codec
        return self._result(CreateTableResult, "create_table", body, retry=False)

    def drop_table(self, table: str) -> DropTableResult:
        """Delete a table and every object under it (the ``drop_table`` action; not retried).

        Its versions, data, MemWAL shards (rows not folded yet included) and Iceberg metadata
        go; a later :meth:`write` or ``put_epoch(create=...)`` makes a fresh table at version 1,
        and anything else answers :class:`~flight_sink.TableNotFoundError`. Returns the table's
        newest version when it was dropped.
        """
        return self._result(DropTableResult, "drop_table", {"table": table}, retry=False)

    def compact(
        self,
        table: str,
        *,
        target_rows_per_fragment: Optional[int] = None,
        max_deleted_share: Optional[float] = None,
    ) -> CompactResult:
        """Compact small fragments and fragments with many deleted rows (the ``compact`` action).

        Streaming writers keep committing meanwhile.

        Args:
            table: the table.
            target_rows_per_fragment: rows per rewritten fragment (server default 1,048,576).
            max_deleted_share: rewrite fragments with more than this share of deleted rows
                (0..1, server default 0.1).

        Returns:
            The rewrite: ``version`` (None when there was nothing to compact), ``groups``,
            ``fragments_removed``, ``fragments_added``, ``rows_rewritten``, ...
        """
        body: dict[str, Any] = {"table": table}
        if target_rows_per_fragment is not None:
            body["target_rows_per_fragment"] = int(target_rows_per_fragment)
        if max_deleted_share is not None:
            body["max_deleted_share"] = float(max_deleted_share)
        return self._result(CompactResult, "compact", body)

    def cleanup(
        self,
        table: str,
        *,
        older_than_seconds: Optional[float] = None,
        keep_last: Optional[int] = None,
        dry_run: bool = False,
    ) -> CleanupResult:
        """Remove old versions, expired multi-writer stages and unreferenced files.

        Args:
            table: the table.
            older_than_seconds: remove versions superseded for longer than this (server
                default 7 days); the latest and the newest ``keep_last`` are always kept.
            keep_last: versions always kept (server default 1).
            dry_run: only report what would be removed.

        Returns:
            ``versions_removed``, ``files_removed``, ``stages_expired``, the files removed by
            kind and ``bytes_removed``.
        """
        body: dict[str, Any] = {"table": table, "dry_run": bool(dry_run)}
        if older_than_seconds is not None:
            body["older_than_seconds"] = int(older_than_seconds)
        if keep_last is not None:
            body["keep_last"] = int(keep_last)
        return self._result(CleanupResult, "cleanup", body)

    def delete(self, table: str, where: FilterSpec) -> DeleteResult:
        """Delete the rows matching a predicate (the ``delete`` action; not retried).

        ``where`` is what :meth:`read`'s ``filter`` takes: a text (``"id in (1, 2)"``), a
        pyarrow expression or the protocol's JSON predicate, e.g. ``{"op": "=", "column":
        "id", "value": 3}``. Returns ``version``, ``committed`` (false when no row matched) and
        ``rows_deleted``.
        """
        body = {"table": table, "where": to_predicate(where)}
        return self._result(DeleteResult, "delete", body, retry=False)

    def create_index(self, table: str, name: Optional[str] = None) -> TableVersion:
        """Build the primary-key index of a keyed table (``create_index``); upserts then find
        keys through it (docs/indices.md). ``name`` defaults to ``"pk"`` on the server. Returns
        the version that committed the index."""
        body: dict[str, Any] = {"table": table}
        if name is not None:
            body["name"] = name
        return self._result(TableVersion, "create_index", body)

    def optimize_indices(
        self, table: str, names: Optional[Sequence[str]] = None, *, merge_all: bool = False
    ) -> OptimizeIndicesResult:
        """Index the fragments no index segment covers yet and merge segments
        (``optimize_indices``); ``names`` limits it to those indices (default: every index),
        ``merge_all`` merges every segment into one."""
        body: dict[str, Any] = {"table": table}
        if names is not None:
            body["names"] = list(names)
        if merge_all:
            body["merge_all"] = True
        return self._result(OptimizeIndicesResult, "optimize_indices", body)

    def flush_memwal(self, table: str, shard: Optional[str] = None) -> FlushMemWALResult:
        """Flush a MemWAL table's memtables into generations.

        Args:
            table: a table created with MemWAL shards.
            shard: one shard's id, a string as :meth:`table_stats` lists it
                (``stats.memwal.shards[i].shard``; default: every shard).

        Returns:
            ``shards_flushed``: the shards selected (one another live server writes is skipped).
        """
        body: dict[str, Any] = {"table": table}
        if shard is not None:
            body["shard"] = _shard_id(shard)
        return self._result(FlushMemWALResult, "flush_memwal", body)

    def fold_memwal_shard(
        self, table: str, shard: Optional[str] = None, min_generations: Optional[int] = None
    ) -> FoldMemWALResult:
        """Fold a MemWAL table's flushed generations into the table (``fold_memwal_shard``).

        Args:
            table: a table created with MemWAL shards.
            shard: one shard's id, a string as :meth:`table_stats` lists it
                (``stats.memwal.shards[i].shard``; default: every shard).
            min_generations: fold a shard only when it has at least this many generations.

        Returns:
            ``generations_reclaimed``: the generations folded.
        """
        body: dict[str, Any] = {"table": table}
        if shard is not None:
            body["shard"] = _shard_id(shard)
        if min_generations is not None:
            body["min_generations"] = int(min_generations)
        return self._result(FoldMemWALResult, "fold_memwal_shard", body)

    def publish_iceberg(self, table: str) -> PublishIcebergResult:
        """Bring the table's Iceberg metadata (docs/iceberg.md) up to its newest version now
        (``publish_iceberg``; maintenance does it after every commit). Raises
        :class:`~flight_sink.FailedPreconditionError` (reason ``ICEBERG_DISABLED``) when the
        table or the server turns publishing off."""
        return self._result(PublishIcebergResult, "publish_iceberg", {"table": table})

    # -- change feed ------------------------------------------------------------------------

    def changes(
        self,
        table: str,
        from_version: int,
        to_version: Optional[int] = None,
        *,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[FilterSpec] = None,
    ) -> pa.Table:
        """Every row change of versions ``from_version`` .. ``to_version`` (inclusive; None:
        up to the latest), as one table (``docs/protocol.md``, *Change feed*).

        The result has the table's columns (or ``columns``) and ``_change_type`` (``insert``,
        ``delete``, ``update_preimage``, ``update_postimage``), ``_commit_version`` and
        ``_commit_timestamp``, ordered by version, then deletes and pre-images before inserts
        and post-images. An append is inserts, a delete deletes of the old rows, an upsert on a
        keyed table a pre-image and a post-image per changed key; compaction, index and
        configuration versions change nothing. ``filter`` (as :meth:`read` takes it) keeps the
        changes whose row matches. A range that reaches a version cleanup removed raises
        :class:`~flight_sink.NotFoundError` naming the oldest version still readable.
        """
        ticket: dict[str, Any] = {"table": table, "changes": {"from_version": int(from_version)}}
        if to_version is not None:
            ticket["changes"]["to_version"] = int(to_version)
        if columns is not None:
            ticket["columns"] = list(columns)
        if filter is not None:
            ticket["filter"] = to_predicate(filter)
        return self.read_ticket(_json.dumps(ticket).encode(), what=f"DoGet {table} changes")

    def follow_changes(
        self,
        table: str,
        from_version: int,
        *,
        poll: float = 1.0,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[FilterSpec] = None,
    ) -> Iterator[pa.Table]:
        """Follow the table's changes from ``from_version`` on: yields one table per new
        version that changed rows, in version order, as :meth:`changes` returns it, and waits
        ``poll`` seconds between looks for new versions. Versions that change no row
        (compaction, indices, configuration) yield nothing. The iterator does not end by itself:
        stop iterating to stop. To resume after a restart, start from the last
        ``_commit_version`` seen + 1.
        """
        if poll <= 0:
            raise InvalidArgumentError(f"poll must be > 0 seconds, got {poll!r}")
        next_version = int(from_version)
        while True:
            latest = self._latest_version(table)
            if latest >= next_version:
                changed = self.changes(table, next_version, latest, columns=columns, filter=filter)
                yield from _split_by_version(changed)
                next_version = latest + 1
            else:
                time.sleep(poll)

    def _latest_version(self, table: str) -> int:
        res = self._action("history", {"table": table, "limit": 1})
        return History.from_json(res, what="history").latest_version

    # -- any action -------------------------------------------------------------------------

    def action(self, name: str, body: Mapping[str, Any], *, retry: bool = False) -> Any:
        """Run any DoAction with a JSON body and return its decoded JSON result.

        For actions this client has no method for yet (every action of ``docs/protocol.md``
        has one). ``retry=True`` only for idempotent ones.
        """
        return self._action(name, body, retry=retry)

    def _result(self, cls: type[R], name: str, body: Mapping[str, Any], *, retry: bool = True) -> R:
        """Run action ``name`` and decode its result as ``cls``."""
        return cls.from_json(self._action(name, body, retry=retry), what=name)


def _split_by_version(changed: pa.Table) -> Iterator[pa.Table]:
    """The rows of a change feed table, one table per ``_commit_version``, in version order."""
    if changed.num_rows == 0:
        return
    import pyarrow.compute as pc

    versions = changed.column("_commit_version")
    for v in sorted(pc.unique(versions).to_pylist()):
        yield changed.filter(pc.equal(versions, v))
