"""Exceptions raised by the flight-sink client.

Every error the server answers is a gRPC status with a message that says what to change and a
``google.rpc.ErrorInfo`` detail whose reason (``SCHEMA_MISMATCH``, ``TABLE_NOT_FOUND``, ...) is
listed in ``docs/protocol.md``, section *Errors*. The client picks the :class:`FlightSinkError`
subclass from that reason, never from the message text, and keeps the reason
(:attr:`FlightSinkError.reason`), the status code (:attr:`FlightSinkError.code`) and the
server's own message (:attr:`FlightSinkError.server_message`), so callers can branch on the class
or the reason and users see the server's words::

    try:
        client.put_epoch("events", table, query_id="q", epoch_id=7)
    except flight_sink.SchemaMismatchError as e:
        print(e.reason)           # SCHEMA_MISMATCH
        print(e.server_message)   # table events: schema mismatch: column "id" has type ...

A reason this client does not know yet, and an error without one (the server unreachable, gRPC's
own refusal of an oversize message), falls back on the gRPC code.

The classes also derive from the closest built-in exception (``ValueError``, ``LookupError``,
``ConnectionError``, ``PermissionError``), so generic handlers keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

__all__ = [
    "ERROR_DOMAIN",
    "AbortedError",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "EpochNotCommittedError",
    "FailedPreconditionError",
    "FilterSyntaxError",
    "FlightSinkError",
    "InvalidRequestError",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "QueryReusedError",
    "ResourceExhaustedError",
    "SchemaMismatchError",
    "ServerInternalError",
    "ServerUnavailableError",
    "TableNotFoundError",
    "UnauthenticatedError",
    "UnsupportedError",
    "from_arrow_error",
]


class FlightSinkError(Exception):
    """Base class of every error this package raises for a failed call.

    Attributes:
        code: the gRPC status code in lower case with underscores (``"invalid_argument"``,
            ``"not_found"``, ``"unavailable"``, ...), or ``"client"`` for errors the client
            detected itself.
        server_message: the server's message (the status's own, without pyarrow's decoration;
            for an error without status details, such as an unreachable server, pyarrow's text).
        reason: the server's ``google.rpc.ErrorInfo`` reason (``"SCHEMA_MISMATCH"``,
            ``"FENCED"``, ...; ``docs/protocol.md`` lists them), or None when the error carried
            none (the server was unreachable, or the error was detected by the client).
        metadata: the ErrorInfo's structured fields (e.g. ``{"shard": ...}`` for ``FENCED``);
            empty when there are none.
        operation: what the client was doing (``"DoPut events"``, ``"DoAction history"``, ...).
    """

    code: str = "unknown"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        server_message: str = "",
        operation: str = "",
        reason: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.server_message = server_message
        self.operation = operation
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def retryable(self) -> bool:
        """True for transient conditions that a retry with backoff may get past.

        ``Unavailable`` (the server is down, restarting or unreachable), ``Aborted`` (a commit
        lost the race for a version too often) and the two ``ResourceExhausted`` that pass:
        ``BACKPRESSURE`` (a MemWAL shard's backlog) and ``LIMIT_EXCEEDED`` for more DoPut
        streams than the server's ``--max-concurrent-puts``. A ``LIMIT_EXCEEDED`` for a
        stream or message over a size limit is not retryable: the same data fails again.
        """
        if self.code in _RETRYABLE_CODES:
            return True
        if self.code == "resource_exhausted":
            return self.reason == "BACKPRESSURE" or "max-concurrent-puts" in self.server_message
        return False


class InvalidRequestError(FlightSinkError, ValueError):
    """``InvalidArgument``: a bad command, table name, schema, mode or JSON. Nothing was written."""

    code = "invalid_argument"


class SchemaMismatchError(InvalidRequestError):
    """``InvalidArgument`` because the stream's schema does not fit the table's."""


class NotFoundError(FlightSinkError, LookupError):
    """``NotFound``: an unknown table, version or stage."""

    code = "not_found"


class TableNotFoundError(NotFoundError):
    """``NotFound`` for a table that does not exist (write with ``create=True`` to create it)."""


class AlreadyExistsError(FlightSinkError):
    """``AlreadyExists``: ``create_table`` of a table that exists."""

    code = "already_exists"


class FailedPreconditionError(FlightSinkError):
    """``FailedPrecondition``: the request is valid but the table's state refuses it."""

    code = "failed_precondition"


class QueryReusedError(FailedPreconditionError):
    """An epoch below the query's watermark that was never committed.

    The ``query_id`` is being reused by a query with a new checkpoint: give the new query its own
    ``query_id`` (or restore its checkpoint). The epoch was refused, not silently skipped.
    """


class UnsupportedError(FlightSinkError, NotImplementedError):
    """``Unimplemented``, or an action this server does not run yet (``UNKNOWN_ACTION``)."""

    code = "unimplemented"


class AbortedError(FlightSinkError):
    """``Aborted``: the commit lost the race for a new version too often. Retryable."""

    code = "aborted"


class ResourceExhaustedError(FlightSinkError):
    """``ResourceExhausted``: a size limit (``--max-put-bytes``, ``--max-message-bytes``: not
    retryable), or a transient one (``--max-concurrent-puts``, MemWAL ``BACKPRESSURE``:
    retryable, see :attr:`FlightSinkError.retryable`)."""

    code = "resource_exhausted"


class UnauthenticatedError(FlightSinkError, PermissionError):
    """``Unauthenticated``: no or a wrong bearer token (pass ``token=``)."""

    code = "unauthenticated"


class PermissionDeniedError(FlightSinkError, PermissionError):
    """``PermissionDenied``: the token may not do this."""

    code = "permission_denied"


class ServerUnavailableError(FlightSinkError, ConnectionError):
    """``Unavailable``: the server is down or unreachable. Retryable."""

    code = "unavailable"


class DeadlineExceededError(FlightSinkError, TimeoutError):
    """The call did not finish within its timeout."""

    code = "deadline_exceeded"


class CancelledError(FlightSinkError):
    """``Canceled``: the call was cancelled; nothing was committed."""

    code = "cancelled"


class ServerInternalError(FlightSinkError):
    """``Internal`` (a server bug or a storage failure), ``DataLoss`` or ``Unknown``."""

    code = "internal"


class ProtocolError(FlightSinkError):
    """The server answered something this client does not understand (e.g. no acknowledgement)."""

    code = "protocol"


class EpochNotCommittedError(FlightSinkError):
    """A streaming epoch could not be committed; Spark must retry the batch.

    Raised by :class:`flight_sink.spark.FlightSink` so that the micro-batch fails instead of being
    recorded as done: no data is dropped silently.
    """

    code = "client"


class InvalidArgumentError(InvalidRequestError):
    """An argument the client refuses before sending anything (a mode, a URI, an option, a
    setting): a ``ValueError`` too. Its :attr:`~FlightSinkError.code` is ``"client"`` and it has
    no reason. (An argument of the wrong type raises ``TypeError``: a mistake in the calling
    code, not a condition to handle.)"""

    code = "client"


class ClientError(FlightSinkError):
    """A failure the client detected itself, outside any server's answer: a streamed epoch
    that cannot be sent again, a server that would not start (:mod:`flight_sink.local_server`),
    an injected test failure. Its :attr:`~FlightSinkError.code` is ``"client"``."""

    code = "client"


class FilterSyntaxError(InvalidArgumentError):
    """A filter text that does not parse, or an expression with no predicate form.

    Raised by the client before anything is sent (:mod:`flight_sink.filters`).

    Attributes:
        text: the filter text.
        position: the 0-based character offset of the mistake.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        self.text = text
        self.position = position
        caret = " " * position + "^"
        super().__init__(
            f"filter: {message} at position {position}:\n  {text}\n  {caret}", operation="filter"
        )


_RETRYABLE_CODES = frozenset({"unavailable", "aborted"})

#: The ``google.rpc.ErrorInfo`` domain of the flight-sink server's errors.
ERROR_DOMAIN = "flight-sink"

# gRPC status codes by number (google.rpc.Code), named as FlightSinkError.code names them.
_CODE_NAMES = (
    "ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
    "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
    "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
    "unauthenticated",
)

_CLASS_BY_CODE: dict[str, type[FlightSinkError]] = {
    "invalid_argument": InvalidRequestError,
    "out_of_range": InvalidRequestError,
    "not_found": NotFoundError,
    "already_exists": AlreadyExistsError,
    "failed_precondition": FailedPreconditionError,
    "unimplemented": UnsupportedError,
    "aborted": AbortedError,
    "resource_exhausted": ResourceExhaustedError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "unavailable": ServerUnavailableError,
    "deadline_exceeded": DeadlineExceededError,
    "cancelled": CancelledError,
    "internal": ServerInternalError,
    "data_loss": ServerInternalError,
    "unknown": ServerInternalError,
}

#: The exception class of every reason in ``docs/protocol.md`` (a test checks the two agree).
#: Reasons whose class is the one of their code are listed too, so the table is complete.
CLASS_BY_REASON: dict[str, type[FlightSinkError]] = {
    "INVALID_REQUEST": InvalidRequestError,
    "INVALID_TABLE_NAME": InvalidRequestError,
    "INVALID_PREDICATE": InvalidRequestError,
    "INVALID_PARTITION_SPEC": InvalidRequestError,
    "TOO_MANY_PARTITIONS": InvalidRequestError,
    "FRAGMENT_NOT_FOUND": InvalidRequestError,
    "MALFORMED_IPC": InvalidRequestError,
    "SCHEMA_MISMATCH": SchemaMismatchError,
    "SCHEMA_CHANGE_REFUSED": SchemaMismatchError,
    "SCHEMA_DATA_MISMATCH": SchemaMismatchError,
    "UNSUPPORTED_TYPE": SchemaMismatchError,
    "UNKNOWN_ACTION": UnsupportedError,
    "TABLE_NOT_FOUND": TableNotFoundError,
    "VERSION_NOT_FOUND": NotFoundError,
    "CHANGES_UNAVAILABLE": NotFoundError,
    "STAGE_NOT_FOUND": NotFoundError,
    "READ_SNAPSHOT_NOT_FOUND": NotFoundError,
    "TABLE_EXISTS": AlreadyExistsError,
    "QUERY_REUSED": QueryReusedError,
    "UNSUPPORTED": FailedPreconditionError,
    "EPOCH_ALREADY_COMMITTED": FailedPreconditionError,
    "COMMIT_CONFLICT": FailedPreconditionError,
    "FENCED": FailedPreconditionError,
    "ICEBERG_DISABLED": FailedPreconditionError,
    "ICEBERG_UNPUBLISHABLE": FailedPreconditionError,
    "TOO_MANY_RETRIES": AbortedError,
    "LIMIT_EXCEEDED": ResourceExhaustedError,
    "BACKPRESSURE": ResourceExhaustedError,
    "PUT_IDLE_TIMEOUT": DeadlineExceededError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "CANCELLED": CancelledError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNIMPLEMENTED": UnsupportedError,
    "STORAGE_UNAVAILABLE": ServerUnavailableError,
    "DATA_CORRUPT": ServerInternalError,
    "INTERNAL": ServerInternalError,
}


class _Status:
    """A call's status as this client reads it: code, message, ErrorInfo reason and metadata."""

    __slots__ = ("code", "message", "metadata", "reason")

    def __init__(
        self, code: str, message: str, reason: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})


def decode_status_details(extra_info: bytes) -> Optional[_Status]:
    """Decode the ``grpc-status-details-bin`` trailer: a serialized ``google.rpc.Status``.

    pyarrow hands it over as :attr:`pyarrow.flight.FlightError.extra_info`. Returns None when
    ``extra_info`` is empty or not a ``google.rpc.Status``. The reason is taken from the first
    ``google.rpc.ErrorInfo`` detail of the flight-sink domain.
    """
    if not extra_info:
        return None
    from google.protobuf.message import DecodeError
    from google.rpc import error_details_pb2, status_pb2

    try:
        st = status_pb2.Status.FromString(extra_info)
    except DecodeError:
        return None
    code = _CODE_NAMES[st.code] if 0 <= st.code < len(_CODE_NAMES) else "unknown"
    for detail in st.details:
        if not detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            continue
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return _Status(code, st.message, info.reason, dict(info.metadata))
    return _Status(code, st.message)


def _code_from_type(exc: BaseException) -> str:
    """The gRPC code of an error that carried no status details, from pyarrow's exception type."""
    try:
        import pyarrow.flight as fl
    except ImportError:  # pragma: no cover - pyarrow always has flight in supported versions
        return "unknown"
    pairs = [
        (fl.FlightUnavailableError, "unavailable"),
        (fl.FlightUnauthenticatedError, "unauthenticated"),
        (fl.FlightUnauthorizedError, "permission_denied"),
        (fl.FlightTimedOutError, "deadline_exceeded"),
        (fl.FlightCancelledError, "cancelled"),
        (fl.FlightInternalError, "internal"),
    ]
    for cls, code in pairs:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, KeyError):
        return "not_found"
    if isinstance(exc, NotImplementedError):
        return "unimplemented"
    if isinstance(exc, ValueError):
        return "invalid_argument"
    if isinstance(exc, (ConnectionError, BrokenPipeError)):
        return "unavailable"
    return "unknown"


def status_of(exc: BaseException) -> _Status:
    """The status of an exception raised by pyarrow.flight.

    The server's errors carry a ``google.rpc.Status`` (code, message, ErrorInfo reason) that
    pyarrow exposes as ``extra_info``. Anything else (an unreachable server, a status gRPC made
    itself) has only pyarrow's exception type, which gives the code; its message is pyarrow's.
    """
    st = decode_status_details(getattr(exc, "extra_info", b"") or b"")
    if st is not None:
        return st
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return _Status(_code_from_type(exc), text.strip())


def from_arrow_error(exc: BaseException, operation: str = "", uri: str = "") -> FlightSinkError:
    """Convert an exception raised by pyarrow.flight into the matching :class:`FlightSinkError`.

    The class comes from the server's ErrorInfo reason (:data:`CLASS_BY_REASON`), or from the
    gRPC code for a reason this client does not know and for errors without one.

    Args:
        exc: the exception pyarrow raised for a Flight call.
        operation: what was being done, put in front of the message (``"DoPut events"``).
        uri: the server's URI, named in the message when it cannot be reached.
    """
    if isinstance(exc, FlightSinkError):
        return exc
    st = status_of(exc)
    cls = CLASS_BY_REASON.get(st.reason or "") or _CLASS_BY_CODE.get(st.code, ServerInternalError)
    prefix = f"{operation}: " if operation else ""
    tag = f"{st.code}, {st.reason}" if st.reason else st.code
    hint = ""
    if cls is ServerUnavailableError and uri:
        hint = f" (is the flight-sink server running at {uri}?)"
    return cls(
        f"{prefix}{st.message} [{tag}]{hint}",
        code=st.code,
        server_message=st.message,
        operation=operation,
        reason=st.reason,
        metadata=st.metadata,
    )
