"""Direct reads: one GetFlightInfo endpoint's Parquet file read with pyarrow.

A GetFlightInfo whose descriptor command says ``"direct": true`` gives each base fragment the
client can read by itself an endpoint with the file's location (``file://`` or a presigned
``http(s)://`` URL) and, as ``app_metadata``, what to apply to the file to get exactly the rows and
schema of the endpoint's DoGet (``docs/protocol.md``, *Direct reads*). :func:`read_endpoint`
applies it, and raises :class:`DirectReadError` on whatever it cannot reproduce, so that the caller
reads the endpoint's ticket instead.
"""

from __future__ import annotations

import datetime as _dt
import json
import urllib.parse
import urllib.request
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from .errors import ClientError

__all__ = ["HTTP_TIMEOUT", "DirectReadError", "elsewhere", "location_of", "read_endpoint"]

#: Seconds a presigned location's download may take before the endpoint falls back to DoGet.
HTTP_TIMEOUT = 60.0


class DirectReadError(ClientError):
    """An endpoint's file cannot be read as its DoGet would return it; read the ticket instead."""


def location_of(endpoint: Any) -> Optional[str]:
    """The direct location of a FlightEndpoint, or None when it is DoGet-only."""
    if not endpoint.locations or not endpoint.app_metadata:
        return None
    uri = endpoint.locations[0].uri
    return uri.decode() if isinstance(uri, bytes) else str(uri)


def elsewhere(endpoints: Any) -> bool:
    """Whether the first ``file://`` location among ``endpoints`` is on another machine: its
    directory does not exist here (a file compaction removed leaves its directory)."""
    import os

    for ep in endpoints:
        uri = location_of(ep)
        if uri is None:
            continue
        u = urllib.parse.urlsplit(uri)
        return u.scheme == "file" and not os.path.isdir(os.path.dirname(urllib.parse.unquote(u.path)))
    return False


def read_endpoint(endpoint: Any, schema: pa.Schema) -> pa.Table:
    """Read a direct endpoint's file and return what its DoGet returns, as ``schema``."""
    uri = location_of(endpoint)
    if uri is None:
        raise DirectReadError("the endpoint has no location")
    try:
        meta: dict[str, Any] = json.loads(endpoint.app_metadata)
    except ValueError as e:
        raise DirectReadError(f"app_metadata is not JSON: {e}") from e
    if meta.get("format") != "parquet":
        raise DirectReadError(f"format {meta.get('format')!r} is not parquet")
    expires = meta.get("expires")
    if expires and _dt.datetime.fromisoformat(expires.replace("Z", "+00:00")) <= _dt.datetime.now(_dt.timezone.utc):
        raise DirectReadError(f"the location expired at {expires}")
    try:
        # Memory-mapped: no copy of the file's bytes into the process (data files are immutable,
        # and a file unlinked while mapped stays readable).
        pf = pq.ParquetFile(_open(uri), memory_map=True)
        return _conform(pf, meta, schema)
    except DirectReadError:
        raise
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError) as e:
        raise DirectReadError(f"{uri}: {e}") from e


def _open(uri: str) -> Any:
    u = urllib.parse.urlsplit(uri)
    if u.scheme == "file":
        return urllib.parse.unquote(u.path)
    if u.scheme in ("http", "https"):
        with urllib.request.urlopen(uri, timeout=HTTP_TIMEOUT) as resp:
            return pa.BufferReader(resp.read())
    raise DirectReadError(f"location scheme {u.scheme!r} is not file, http or https")


def _conform(pf: pq.ParquetFile, meta: dict[str, Any], schema: pa.Schema) -> pa.Table:
    positions: list[int] = meta["columns"]
    if len(positions) != len(schema):
        raise DirectReadError(f"{len(positions)} column positions for a schema of {len(schema)} fields")
    # A file holds the columns its write carried, found by name (a write may omit nullable
    # columns, and files written before a column was added lack it): the server reads them so.
    file_names = set(pf.schema_arrow.names)
    names = [f.name for f in schema if f.name in file_names]
    if names:
        tbl = pf.read(columns=names, use_threads=True)
    else:
        tbl = pa.table({"_": pa.nulls(pf.metadata.num_rows, pa.null())})
    if tbl.num_rows != meta["file_rows"]:
        raise DirectReadError(f"the file has {tbl.num_rows} rows, the endpoint says {meta['file_rows']}")
    deleted = meta.get("deleted") or []
    if deleted:
        tbl = tbl.filter(_live_mask(tbl.num_rows, deleted))
    if tbl.num_rows != meta["rows"]:
        raise DirectReadError(f"{tbl.num_rows} live rows, the endpoint says {meta['rows']}")
    cols = []
    for field in schema:
        if field.name not in file_names:
            if not field.nullable:
                raise DirectReadError(f"column {field.name!r} is missing from the file and not nullable")
            cols.append(pa.nulls(tbl.num_rows, field.type))
            continue
        col = tbl.column(field.name)
        if not col.type.equals(field.type):
            if not _widens(col.type, field.type):
                raise DirectReadError(f"column {field.name!r} is {col.type} in the file, {field.type} in the table")
            col = col.cast(field.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


def _live_mask(rows: int, deleted: list[list[int]]) -> pa.Array:
    """A boolean array of ``rows`` that is false at the deleted runs ``[start, end)``."""
    import numpy as np

    mask = np.ones(rows, dtype=bool)
    for start, end in deleted:
        mask[start:end] = False
    return pa.array(mask)


def _widens(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether ``want`` is a lossless promotion of ``have`` the table allows (docs/protocol.md,
    Schema evolution): a wider integer of the same signedness, float32 to float64, a decimal128
    of higher precision at the same scale."""
    if pat.is_signed_integer(have) and pat.is_signed_integer(want):
        return bool(want.bit_width > have.bit_width)
    if pat.is_unsigned_integer(have) and pat.is_unsigned_integer(want):
        return bool(want.bit_width > have.bit_width)
    if pat.is_float32(have) and pat.is_float64(want):
        return True
    if pat.is_decimal128(have) and pat.is_decimal128(want):
        return bool(want.scale == have.scale and want.precision > have.precision)
    return False
