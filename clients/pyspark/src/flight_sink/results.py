"""The results of the server's actions as typed, immutable objects.

Each class is the JSON result of one action (``docs/protocol.md``, *DoAction*) with its fields
typed: :meth:`flight_sink.Client.table_stats` returns a :class:`TableStats`, whose
``memwal.shards[0].shard`` is a shard id, and so on. A field the server leaves out (an optional
one, or one an older server does not send) has its default; a field this client does not know
(a newer server's) is kept in :attr:`Result.raw`, the JSON as received. A field of the wrong JSON
type raises :class:`~flight_sink.ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from .errors import ProtocolError

__all__ = [
    "Ack",
    "CleanupResult",
    "CompactResult",
    "ConfigSetting",
    "CreateTableResult",
    "DeleteResult",
    "DropTableResult",
    "EpochSpan",
    "EpochStatus",
    "FlushMemWALResult",
    "FoldMemWALResult",
    "History",
    "HistoryEntry",
    "IcebergStats",
    "IndexOptimizeResult",
    "IndexStats",
    "MemWALStats",
    "OptimizeIndicesResult",
    "PartitionField",
    "PublishIcebergResult",
    "QuarantinedGeneration",
    "Result",
    "SchemaField",
    "ShardStats",
    "StreamWatermark",
    "TableConfig",
    "TableStats",
    "TableVersion",
]

R = TypeVar("R", bound="Result")


class Result:
    """Base of every result (each a frozen dataclass): :meth:`from_json` decodes one from the
    server's JSON, and :attr:`raw` is that JSON as received, fields this client does not know
    included (it takes no part in equality or repr)."""

    @property
    def raw(self) -> dict[str, Any]:
        """The JSON object the result was decoded from (empty for one built in code)."""
        raw: dict[str, Any] = self.__dict__.get("_raw", {})
        return raw

    @classmethod
    def from_json(cls: type[R], obj: Any, *, what: str = "") -> R:
        """Decode ``obj`` (a JSON object) as this result; ProtocolError when it is not one."""
        return _decode_object(cls, obj, what or cls.__name__)


def parse_timestamp(text: str) -> _dt.datetime:
    """An RFC 3339 timestamp as the server writes it (``2026-12-06T07:44:48.123456789Z``) as an
    aware datetime; digits past microseconds are dropped."""
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    date, sep, rest = t.partition("T")
    if sep and "." in rest:
        # Python reads at most 6 fractional digits (3.9/3.10: exactly 3 or 6).
        head, _, tail = rest.partition(".")
        digits = ""
        while tail and tail[0].isdigit():
            digits, tail = digits + tail[0], tail[1:]
        rest = f"{head}.{(digits + '000000')[:6]}{tail}"
    return _dt.datetime.fromisoformat(f"{date}{sep}{rest}")


# -- decoding ---------------------------------------------------------------------------------


def _decode_object(cls: type[R], obj: Any, what: str) -> R:
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"{what}: expected a JSON object, got {obj!r}"[:500])
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in obj or obj[f.name] is None:
            continue
        kwargs[f.name] = _decode_value(hints[f.name], obj[f.name], f"{what}.{f.name}")
    out = cls(**kwargs)
    # Frozen: set the way dataclasses' own __init__ does.
    object.__setattr__(out, "_raw", dict(obj))
    return out


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        module = sys.modules[cls.__module__]
        hints = typing.get_type_hints(cls, vars(module))
        _HINTS[cls] = hints
    return hints


def _decode_value(tp: Any, v: Any, what: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return None if v is None else _decode_value(inner[0], v, what)
    if origin in (list, list):
        if not isinstance(v, list):
            raise ProtocolError(f"{what}: expected a JSON array, got {v!r}"[:500])
        return [_decode_value(args[0], x, f"{what}[{i}]") for i, x in enumerate(v)]
    if origin in (dict, dict):
        if not isinstance(v, Mapping):
            raise ProtocolError(f"{what}: expected a JSON object, got {v!r}"[:500])
        return {str(k): _decode_value(args[1], x, f"{what}[{k!r}]") for k, x in v.items()}
    if isinstance(tp, type) and issubclass(tp, Result):
        return _decode_object(tp, v, what)
    if tp is _dt.datetime:
        if not isinstance(v, str):
            raise ProtocolError(f"{what}: expected an RFC 3339 timestamp, got {v!r}")
        try:
            return parse_timestamp(v)
        except ValueError:
            raise ProtocolError(f"{what}: expected an RFC 3339 timestamp, got {v!r}") from None
    if tp is bool:
        if not isinstance(v, bool):
            raise ProtocolError(f"{what}: expected true or false, got {v!r}")
        return v
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ProtocolError(f"{what}: expected an integer, got {v!r}")
        return v
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ProtocolError(f"{what}: expected a number, got {v!r}")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise ProtocolError(f"{what}: expected a string, got {v!r}")
        return v
    if tp is Any:
        return v
    raise TypeError(f"{what}: no decoding for {tp!r}")  # pragma: no cover - a class's own mistake


# -- writes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """The server's acknowledgement of a write; it is sent only once the write is durable.

    Attributes:
        status: ``"committed"`` (the write is version :attr:`version`), ``"duplicate"`` (the
            epoch was already committed, at :attr:`version`; nothing was written), ``"empty"``
            (an append/update epoch without rows: nothing committed) or ``"staged"`` (one
            partition of a multi-writer epoch; commit :attr:`stage` with
            :meth:`Client.commit_epoch`).
        table: the table.
        query_id: the epoch's query id (None for plain appends).
        epoch_id: the epoch id (None for plain appends).
        version: the table version that holds the write (None when nothing was committed).
        rows: rows written (0 for a duplicate).
        stage: the stage token of a ``staged`` ack.
        route: where the epoch landed: ``"direct"`` (a table version) or ``"memwal"`` (durable
            in the table's MemWAL shards, readable at once; no table version, so
            :attr:`version` is None). None when the server does not say.
        warning: set on a ``duplicate`` whose row count differs from the committed epoch's:
            two queries may share the query id (``docs/protocol.md``, *Exactly once*).
        raw: the acknowledgement JSON as received.
    """

    status: str
    table: str
    query_id: Optional[str] = None
    epoch_id: Optional[int] = None
    version: Optional[int] = None
    rows: int = 0
    stage: Optional[str] = None
    route: Optional[str] = None
    warning: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Any) -> Ack:
        """Build an Ack from the server's JSON."""
        a = _AckJSON.from_json(d, what="acknowledgement")
        if not a.status:
            raise ProtocolError(f"acknowledgement without a status: {d!r}"[:500])
        return cls(
            status=a.status,
            table=a.table,
            query_id=a.query_id,
            epoch_id=a.epoch_id,
            version=a.version or None,
            rows=a.rows,
            stage=a.stage,
            route=a.route,
            warning=a.warning,
            raw=a.raw,
        )

    @property
    def landed(self) -> bool:
        """True when the epoch's data is (now or already) in the table, or there was none."""
        return self.status in ("committed", "duplicate", "empty")


@dataclass(frozen=True)
class EpochStatus:
    """Whether an epoch of a query is committed (``epoch_status``), and where.

    Attributes:
        committed: the table (or its MemWAL shards) holds the epoch.
        version: the table version that committed it; None when it is not committed, or while
            only the table's MemWAL shards hold it (``route == "memwal"``).
        route: ``"memwal"`` while the MemWAL shards hold the epoch, else None.
    """

    committed: bool
    version: Optional[int] = None
    route: Optional[str] = None

    @classmethod
    def from_json(cls, d: Any) -> EpochStatus:
        """Build an EpochStatus from the server's JSON."""
        st = _EpochStatusJSON.from_json(d, what="epoch_status")
        return cls(st.committed, st.version or None, st.route or None)


@dataclass(frozen=True)
class _EpochStatusJSON(Result):
    committed: bool = False
    version: int = 0
    route: str = ""




@dataclass(frozen=True)
class _AckJSON(Result):
    status: str = ""
    table: str = ""
    query_id: Optional[str] = None
    epoch_id: Optional[int] = None
    version: int = 0
    rows: int = 0
    stage: Optional[str] = None
    route: Optional[str] = None
    warning: Optional[str] = None


# -- schemas ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaField(Result):
    """A column of a table schema (or a nested field: ``fields``) with its stable field id."""

    id: int = 0
    name: str = ""
    type: str = ""
    nullable: bool = True
    fields: list[SchemaField] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionField(Result):
    """One field of a table's partition spec: a source column and its transform (``identity``,
    ``year``, ``month``, ``day``, ``hour``, ``bucket[N]``, ``truncate[W]``)."""

    column: str = ""
    transform: str = "identity"


@dataclass(frozen=True)
class CreateTableResult(Result):
    """``create_table``: the table, its first version and its schema as stored."""

    table: str = ""
    version: int = 0
    schema: list[SchemaField] = field(default_factory=list)
    schema_id: int = 0
    last_field_id: int = 0
    partition_by: list[PartitionField] = field(default_factory=list)


# -- history ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryEntry(Result):
    """One version of a table's history (``history``).

    ``operation`` is ``Create``, ``Append``, ``Overwrite``, ``Delete``, ``Upsert``, ``Rewrite``,
    ...; ``properties`` carry an epoch commit's ``flight_sink.streaming.query_id`` and
    ``flight_sink.streaming.epoch_id``. A version cleanup removed has ``missing`` set and no
    other field.
    """

    version: int = 0
    timestamp: Optional[_dt.datetime] = None
    operation: str = ""
    read_version: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    transaction_file: str = ""
    missing: bool = False


# -- table statistics -------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamWatermark(Result):
    """A streaming query's last committed epoch (``TableStats.streams``)."""

    epoch: int = 0
    #: The base version that committed it; 0 while only MemWAL shards hold it.
    version: int = 0
    #: Its commit (or MemWAL flush) time; None while the epoch is only in a WAL.
    timestamp: Optional[_dt.datetime] = None
    in_memwal: bool = False


@dataclass(frozen=True)
class IndexStats(Result):
    """An index of a table (``TableStats.indices``)."""

    name: str = ""
    columns: list[str] = field(default_factory=list)
    segments: int = 0
    unindexed_fragments: int = 0


@dataclass(frozen=True)
class EpochSpan(Result):
    """The lowest and highest epoch of one query in a MemWAL generation."""

    query_id: str = ""
    first: int = 0
    last: int = 0


@dataclass(frozen=True)
class QuarantinedGeneration(Result):
    """A MemWAL generation a fold set aside: acknowledged rows the table does not hold."""

    generation: int = 0
    rows: int = 0
    dir: str = ""
    epochs: list[EpochSpan] = field(default_factory=list)
    error: str = ""
    quarantined_at_nanos: int = 0


@dataclass(frozen=True)
class ShardStats(Result):
    """One MemWAL shard of a table (``MemWALStats.shards``); ``shard`` is the id that
    :meth:`~flight_sink.Client.flush_memwal` and :meth:`~flight_sink.Client.fold_memwal_shard`
    take."""

    shard: str = ""
    writer_epoch: int = 0
    manifest_version: int = 0
    generations: int = 0
    generation_rows: int = 0
    memtable_rows: int = 0
    sealed_memtables: int = 0
    unflushed_bytes: int = 0
    next_wal_position: int = 0
    replay_after_wal_entry_position: int = 0
    next_generation: int = 0
    failed: str = ""
    quarantined: list[QuarantinedGeneration] = field(default_factory=list)


@dataclass(frozen=True)
class MemWALStats(Result):
    """A table's MemWAL shards (``TableStats.memwal``)."""

    shards: list[ShardStats] = field(default_factory=list)
    #: Each shard's highest generation folded into the table.
    merged_generations: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IcebergStats(Result):
    """How far a table's Iceberg metadata lags (``TableStats.iceberg``)."""

    enabled: bool = False
    iceberg_version: int = 0
    lag_versions: int = 0
    lag_seconds: float = 0.0
    metadata_file: str = ""
    snapshots: int = 0
    missing_rows: int = 0
    missing_seconds: float = 0.0


@dataclass(frozen=True)
class TableStats(Result):
    """``table_stats``: what a read of the table returns now and how it is stored.

    ``rows`` = ``base_rows`` (the version's live rows less those MemWAL rows supersede) +
    ``memwal_rows`` (acknowledged rows in MemWAL shards not folded yet). ``streams`` maps each
    streaming query to its watermark; ``memwal`` is None for a table without shards, ``iceberg``
    None when its Iceberg state cannot be read.
    """

    format_version: int = 0
    table: str = ""
    version: int = 0
    rows: int = 0
    base_rows: int = 0
    memwal_rows: int = 0
    fragments: int = 0
    data_bytes: int = 0
    primary_key: list[str] = field(default_factory=list)
    streams: dict[str, StreamWatermark] = field(default_factory=dict)
    indices: list[IndexStats] = field(default_factory=list)
    memwal: Optional[MemWALStats] = None
    iceberg: Optional[IcebergStats] = None
    schema: list[SchemaField] = field(default_factory=list)
    schema_id: int = 0
    last_field_id: int = 0
    partition_by: list[PartitionField] = field(default_factory=list)


# -- maintenance ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanupResult(Result):
    """``cleanup``: what was removed (or, in a dry run, would be)."""

    versions_removed: list[int] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    stages_expired: int = 0
    data_files_removed: int = 0
    deletion_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    bytes_removed: int = 0
    dry_run: bool = False


@dataclass(frozen=True)
class CompactResult(Result):
    """``compact``: the rewrite; ``version`` is None when there was nothing to compact."""

    read_version: int = 0
    version: Optional[int] = None
    groups: int = 0
    fragments_removed: int = 0
    fragments_added: int = 0
    rows_rewritten: int = 0
    deleted_rows_dropped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    duration_ns: int = 0


@dataclass(frozen=True)
class DeleteResult(Result):
    """``delete``: the version the delete committed (``committed`` false when no row matched)."""

    version: int = 0
    committed: bool = False
    rows_deleted: int = 0


@dataclass(frozen=True)
class TableVersion(Result):
    """A table and the version an action committed (``create_index``)."""

    table: str = ""
    version: int = 0


@dataclass(frozen=True)
class IndexOptimizeResult(Result):
    """What ``optimize_indices`` did to one index (``version`` None: it needed nothing)."""

    name: str = ""
    version: Optional[int] = None
    fragments_indexed: int = 0
    segments_merged: int = 0
    entries_written: int = 0
    segments_after: int = 0
    unindexed_fragments_after: int = 0


@dataclass(frozen=True)
class OptimizeIndicesResult(Result):
    """``optimize_indices``: each index's work."""

    read_version: int = 0
    indices: list[IndexOptimizeResult] = field(default_factory=list)
    duration_ns: int = 0


@dataclass(frozen=True)
class FlushMemWALResult(Result):
    """``flush_memwal``: the shards flushed."""

    shards_flushed: int = 0


@dataclass(frozen=True)
class FoldMemWALResult(Result):
    """``fold_memwal_shard``: the generations folded into the base table."""

    generations_reclaimed: int = 0


@dataclass(frozen=True)
class DropTableResult(Result):
    """``drop_table``: the table's newest version when it was dropped."""

    table: str = ""
    version: int = 0


@dataclass(frozen=True)
class PublishIcebergResult(Result):
    """``publish_iceberg``: the Iceberg metadata brought from ``from_version`` to
    ``iceberg_version`` (the table's newest), with the snapshots it added."""

    from_version: int = 0
    iceberg_version: int = 0
    snapshots_added: int = 0
    metadata_file: str = ""


# -- whole answers the client unwraps ------------------------------------------------------


@dataclass(frozen=True)
class History(Result):
    """``history``'s whole answer; :meth:`~flight_sink.Client.history` returns its versions."""

    format_version: int = 0
    table: str = ""
    latest_version: int = 0
    versions: list[HistoryEntry] = field(default_factory=list)


@dataclass(frozen=True)
class ConfigSetting(Result):
    """One maintenance setting: its value, stored or the default (``stored`` false)."""

    key: str = ""
    value: str = ""
    stored: bool = False


@dataclass(frozen=True)
class TableConfig(Result):
    """``get_table_config``'s and ``set_table_config``'s answer; the client returns its
    :meth:`values`."""

    table: str = ""
    version: int = 0
    settings: list[ConfigSetting] = field(default_factory=list)

    def values(self) -> dict[str, str]:
        """The settings as ``{key: value}``."""
        return {s.key: s.value for s in self.settings}
