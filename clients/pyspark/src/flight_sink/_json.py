"""The JSON text of the client's requests (commands, tickets, action bodies).

One encoder for every request, so that a predicate's exact numbers reach the server as written:
a :class:`decimal.Decimal` (a literal no float spells exactly, see :mod:`flight_sink.filters`)
is written as its digits, which :func:`json.dumps` cannot do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["dumps"]


def dumps(value: Any) -> str:
    """The JSON text of ``value``: dicts, lists, tuples, strings, numbers, bools and None, with
    every :class:`~decimal.Decimal` written as the exact number it holds."""
    if not _has_decimal(value):
        return json.dumps(value)
    return _encode(value)


def _has_decimal(value: Any) -> bool:
    if isinstance(value, Decimal):
        return True
    if isinstance(value, Mapping):
        return any(_has_decimal(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_decimal(v) for v in value)
    return False


def _encode(value: Any) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidArgumentError(f"{value} has no JSON number")
        # str() of a finite Decimal is a JSON number: digits, an optional fraction and exponent.
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_encode(v) for v in value) + "]"
    return json.dumps(value)
