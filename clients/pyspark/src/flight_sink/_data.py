"""Arrow data helpers: normalising schemas and replayable batch sources for retried DoPuts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Optional, Union

import pyarrow as pa

from .errors import ClientError, InvalidArgumentError

__all__ = ["ArrowData", "BatchSource", "arrow_type_name", "is_materialized", "normalize_batch", "normalize_schema", "to_arrow"]

#: What the write methods accept as data: Arrow data, or a pandas or Polars DataFrame (or any
#: object exporting an Arrow stream, ``__arrow_c_stream__``), converted by :func:`to_arrow`.
ArrowData = Union[pa.Table, pa.RecordBatch, pa.RecordBatchReader, Iterable[pa.RecordBatch], Any]

_ACCEPTED = (
    "a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of RecordBatch, or a pandas "
    "or Polars DataFrame"
)


def _is_view(t: pa.DataType, check: str) -> bool:
    """pyarrow's view-type check, False on a pyarrow without view types."""
    fn = getattr(pa.types, check, None)
    return bool(fn(t)) if fn is not None else False


def _regular_type(t: pa.DataType) -> pa.DataType:
    """The 32-bit-offset type of a large or view string/binary type (others unchanged)."""
    if pa.types.is_large_string(t) or _is_view(t, "is_string_view"):
        return pa.string()
    if pa.types.is_large_binary(t) or _is_view(t, "is_binary_view"):
        return pa.binary()
    return t


def _from_polars(table: pa.Table) -> pa.Table:
    """A Polars export with the string and binary types pandas and Spark write.

    Polars has one string type, exported as ``large_string`` or ``string_view``; the same
    column from pandas or Spark is ``string``. Writing the regular type keeps a table that
    several writers share in one schema.
    """
    schema = pa.schema(
        [f.with_type(_regular_type(f.type)) for f in table.schema], metadata=table.schema.metadata
    )
    return table if schema.equals(table.schema) else table.cast(schema)


def to_arrow(data: Any) -> Any:
    """``data`` as Arrow: a pandas DataFrame becomes a Table (without its index unless it is
    named), a Polars DataFrame its ``to_arrow()`` with ``string``/``binary`` columns (not the
    large or view types Polars exports), a Polars LazyFrame is collected first, an object
    exporting ``__arrow_c_stream__`` a RecordBatchReader; Arrow data is returned unchanged.

    Raises:
        TypeError: a string, bytes or mapping, which iterate as something other than batches.
    """
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return data
    module = type(data).__module__.split(".")[0]
    name = type(data).__name__
    if module == "pandas" and name == "DataFrame":
        index_named = any(n is not None for n in data.index.names)
        return pa.Table.from_pandas(data, preserve_index=index_named)
    if module == "polars" and name == "DataFrame":
        return _from_polars(data.to_arrow())
    if module == "polars" and name == "LazyFrame":
        return _from_polars(data.collect().to_arrow())
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if isinstance(data, (str, bytes, Mapping)) or (module == "pandas" and name == "Series"):
        raise TypeError(f"data must be {_ACCEPTED}, got {module}.{name}")
    return data


def _utc_type(t: pa.DataType) -> Optional[pa.DataType]:
    """The UTC version of a zoned timestamp type, or None if t needs no change."""
    if pa.types.is_timestamp(t) and t.tz is not None and t.tz != "UTC":
        return pa.timestamp(t.unit, tz="UTC")
    return None


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with every zoned timestamp column labelled ``UTC``.

    Arrow stores zoned timestamps as UTC instants; the zone is only a label. Spark labels them
    with the session time zone, which may differ between runs of one query, while the server
    compares column types exactly. Relabelling as UTC (a metadata-only cast) keeps the table's
    schema stable. Nested types are left unchanged.
    """
    fields = []
    changed = False
    for f in schema:
        nt = _utc_type(f.type)
        if nt is not None:
            f = f.with_type(nt)
            changed = True
        fields.append(f)
    if not changed:
        return schema
    return pa.schema(fields, metadata=schema.metadata)


def normalize_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Cast ``batch`` to the normalised ``schema`` (a no-op unless time zones were relabelled)."""
    if batch.schema.equals(schema):
        return batch
    cols = [
        col if col.type.equals(f.type) else col.cast(f.type)
        for col, f in zip(batch.columns, schema)
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def is_materialized(data: object) -> bool:
    """True for data that is fully in memory (a Table, a RecordBatch or a list/tuple of them)."""
    return isinstance(data, (pa.Table, pa.RecordBatch, list, tuple))


class BatchSource:
    """Record batches for one DoPut that can be sent again when a call is retried.

    Materialised data (a Table, a RecordBatch, a list of batches) is simply iterated again.
    A stream (a RecordBatchReader or any iterator of batches) is recorded while it is sent, up
    to ``max_buffer_bytes``; a retry replays the recording and then continues with the rest of
    the stream. Past the cap the recording is dropped and :attr:`replayable` turns False, so
    the caller raises instead of retrying with incomplete data.

    Args:
        data: the batches.
        schema: the schema, needed for an iterator that may yield no batch at all (otherwise
            taken from the data). Zoned timestamps are relabelled UTC (:func:`normalize_schema`).
        max_buffer_bytes: the recording cap for streams.
    """

    def __init__(
        self,
        data: ArrowData,
        schema: Optional[pa.Schema] = None,
        max_buffer_bytes: int = 256 << 20,
    ) -> None:
        self._materialized: Optional[list[pa.RecordBatch]] = None
        self._stream: Optional[Iterator[pa.RecordBatch]] = None
        self._recorded: list[pa.RecordBatch] = []
        self._recorded_bytes = 0
        self._max = max_buffer_bytes
        self._exhausted = False
        self.replayable = True
        self.rows_sent = 0
        data = to_arrow(data)
        if isinstance(data, pa.Table):
            src_schema = data.schema
            self._materialized = data.to_batches()
        elif isinstance(data, pa.RecordBatch):
            src_schema = data.schema
            self._materialized = [data]
        elif isinstance(data, pa.RecordBatchReader):
            src_schema = data.schema
            self._stream = iter(data)
        elif isinstance(data, (list, tuple)):
            batches = list(data)
            for b in batches:
                if not isinstance(b, pa.RecordBatch):
                    raise TypeError(
                        f"data must be {_ACCEPTED}; a list or tuple must hold RecordBatch items, "
                        f"got a {type(b).__name__} item"
                    )
            if schema is None and not batches:
                raise InvalidArgumentError("an empty list of batches needs schema=")
            src_schema = schema if schema is not None else batches[0].schema
            self._materialized = batches
        elif isinstance(data, Iterable):
            it = iter(data)
            if schema is None:
                first = next(it, None)
                if first is None:
                    raise InvalidArgumentError("an empty iterator of batches needs schema=")
                if not isinstance(first, pa.RecordBatch):
                    raise TypeError(
                        f"data must be {_ACCEPTED}; an iterable must yield RecordBatch items, "
                        f"got a {type(first).__name__} item"
                    )
                src_schema = first.schema
                self._recorded.append(first)
                self._recorded_bytes += first.nbytes
            else:
                src_schema = schema
            self._stream = it
        else:
            raise TypeError(f"data must be {_ACCEPTED}, got {type(data).__name__}")
        if schema is not None and not schema.equals(src_schema):
            raise InvalidArgumentError(f"schema= does not match the data's schema:\n{schema}\nvs\n{src_schema}")
        self.schema = normalize_schema(src_schema)
        if self._materialized is not None:
            # Cast everything before any DoPut starts: nothing but the network can then fail
            # in the middle of a stream.
            self._materialized = [normalize_batch(b, self.schema) for b in self._materialized]

    def total_rows(self) -> int:
        """Rows of materialised data (the count a DoPut command announces)."""
        assert self._materialized is not None, "only materialised data has a known row count"
        return sum(b.num_rows for b in self._materialized)

    @property
    def materialized(self) -> bool:
        """True when every batch is in memory (nothing can fail while the data is produced)."""
        return self._materialized is not None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Iterate the batches from the start (replaying what a previous attempt sent)."""
        self.rows_sent = 0
        if self._materialized is not None:
            for b in self._materialized:
                self.rows_sent += b.num_rows
                yield b
            return
        if not self.replayable:
            raise ClientError("stream was larger than the retry buffer and cannot be replayed")
        for b in list(self._recorded):
            self.rows_sent += b.num_rows
            yield normalize_batch(b, self.schema)
        if self._exhausted:
            return
        assert self._stream is not None
        for b in self._stream:
            if not isinstance(b, pa.RecordBatch):
                raise TypeError(
                    f"data must be {_ACCEPTED}; an iterable must yield RecordBatch items, "
                    f"got a {type(b).__name__} item"
                )
            if self.replayable:
                self._recorded_bytes += b.nbytes
                if self._recorded_bytes > self._max:
                    self.replayable = False
                    self._recorded = []
                else:
                    self._recorded.append(b)
            self.rows_sent += b.num_rows
            yield normalize_batch(b, self.schema)
        self._exhausted = True


def arrow_type_name(t: pa.DataType) -> str:
    """The type name ``create_table`` expects for an Arrow type (``docs/protocol.md``)."""
    if pa.types.is_date32(t):
        return "date32"
    if pa.types.is_date64(t):
        return "date64"
    if pa.types.is_float16(t):
        return "float16"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    return str(t)
