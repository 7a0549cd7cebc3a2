"""Exceptions raised by the flight-sink client.

Every error the server answers is a gRPC status with a message that says what to change
(``docs/protocol.md``, section *Errors*). The client turns it into a :class:`FlightSinkError`
subclass that carries the status code (:attr:`FlightSinkError.code`) and the server's own message
(:attr:`FlightSinkError.server_message`), so callers can branch on the class and users see the
server's words::

    try:
        client.put_epoch("events", table, query_id="q", epoch_id=7)
    except flight_sink.SchemaMismatchError as e:
        print(e.server_message)   # table events: schema mismatch: column "id" has type ...

The classes also derive from the closest built-in exception (``ValueError``, ``LookupError``,
``ConnectionError``, ``PermissionError``), so generic handlers keep working.
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = [
    "FlightSinkError",
    "InvalidRequestError",
    "SchemaMismatchError",
    "NotFoundError",
    "TableNotFoundError",
    "AlreadyExistsError",
    "FailedPreconditionError",
    "QueryReusedError",
    "UnsupportedError",
    "AbortedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "ServerUnavailableError",
    "DeadlineExceededError",
    "CancelledError",
    "ServerInternalError",
    "ProtocolError",
    "EpochNotCommittedError",
    "from_arrow_error",
]


class FlightSinkError(Exception):
    """Base class of every error this package raises for a failed call.

    Attributes:
        code: the gRPC status code in lower case with underscores (``"invalid_argument"``,
            ``"not_found"``, ``"unavailable"``, ...), or ``"client"`` for errors the client
            detected itself.
        server_message: the server's message, without pyarrow's debug context (empty when the
            error did not come from the server).
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
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.server_message = server_message
        self.operation = operation

    @property
    def retryable(self) -> bool:
        """True for transient conditions that a retry with backoff may get past."""
        return self.code in _RETRYABLE_CODES


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
    """``Unimplemented``, or an action this server does not run yet (``unknown action``)."""

    code = "unimplemented"


class AbortedError(FlightSinkError):
    """``Aborted``: the commit lost the race for a new version too often. Retryable."""

    code = "aborted"


class ResourceExhaustedError(FlightSinkError):
    """``ResourceExhausted``: e.g. a message larger than the server's ``--max-message-bytes``."""

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


_RETRYABLE_CODES = frozenset({"unavailable", "aborted"})

# pyarrow renders a gRPC status as "<Flight|gRPC> returned <phrase> error, with message: <msg>"
# (or "Flight cancelled call, with message: ..." / "Flight RPC failed with message: ...").
_PHRASES = {
    "already exists": "already_exists",
    "internal": "internal",
    "invalid argument": "invalid_argument",
    "not found": "not_found",
    "timeout": "deadline_exceeded",
    "deadline exceeded": "deadline_exceeded",
    "unauthenticated": "unauthenticated",
    "unauthorized": "permission_denied",
    "permission denied": "permission_denied",
    "unavailable": "unavailable",
    "unimplemented": "unimplemented",
    "aborted": "aborted",
    "data loss": "internal",
    "out-of-range": "invalid_argument",
    "precondition failed": "failed_precondition",
    "resource exhausted": "resource_exhausted",
    "unknown": "unknown",
}
_STATUS_RE = re.compile(
    r"(?:Flight|gRPC) (?:returned (?P<phrase>[a-z -]+?) error|(?P<cancel>cancelled call)"
    r"|RPC failed),? with message: (?P<msg>.*)",
    re.DOTALL,
)
_DEBUG_SUFFIX_RE = re.compile(r"\.? ?(?:gRPC client debug context|Client context):.*", re.DOTALL)

_CLASS_BY_CODE = {
    "invalid_argument": InvalidRequestError,
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
    "unknown": ServerInternalError,
}


def _code_from_type(exc: BaseException) -> str:
    """Fallback when the message has no recognisable status phrase."""
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


def split_status(exc: BaseException) -> "tuple[str, str]":
    """Return ``(code, server_message)`` for an exception raised by pyarrow.flight."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    m = _STATUS_RE.search(text)
    if m is None:
        return _code_from_type(exc), text.strip()
    if m.group("cancel"):
        code = "cancelled"
    elif m.group("phrase"):
        code = _PHRASES.get(m.group("phrase").strip(), "unknown")
    else:
        code = "unknown"
    msg = _DEBUG_SUFFIX_RE.sub("", m.group("msg")).strip()
    # pyarrow may append C++ source locations on separate lines; the first line is the message.
    lines = [ln for ln in msg.splitlines() if ln.strip() and not ln.lstrip().startswith("/")]
    msg = "\n".join(lines).strip() if lines else msg
    return code, msg


def from_arrow_error(exc: BaseException, operation: str = "", uri: str = "") -> FlightSinkError:
    """Convert an exception raised by pyarrow.flight into the matching :class:`FlightSinkError`.

    Args:
        exc: the exception pyarrow raised for a Flight call.
        operation: what was being done, put in front of the message (``"DoPut events"``).
        uri: the server's URI, named in the message when it cannot be reached.
    """
    if isinstance(exc, FlightSinkError):
        return exc
    code, msg = split_status(exc)
    cls = _CLASS_BY_CODE.get(code, ServerInternalError)
    lower = msg.lower()
    if cls is InvalidRequestError and "schema mismatch" in lower:
        cls = SchemaMismatchError
    elif cls is InvalidRequestError and "unknown action" in lower:
        cls = UnsupportedError
    elif cls is NotFoundError and "table not found" in lower:
        cls = TableNotFoundError
    elif cls is FailedPreconditionError and "query_id reused" in lower:
        cls = QueryReusedError
    prefix = f"{operation}: " if operation else ""
    hint = ""
    if cls is ServerUnavailableError and uri:
        hint = f" (is the flight-sink server running at {uri}?)"
    return cls(f"{prefix}{msg} [{code}]{hint}", code=code, server_message=msg, operation=operation)
