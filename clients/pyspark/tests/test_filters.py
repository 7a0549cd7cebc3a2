"""The text-filter grammar: the cases shared with the server's parser
(engine/expr/testdata/filters.json, which engine/expr's TestTextFilterCorpus reads too), the
Python form of exact numbers, and the bounds' cost."""

from __future__ import annotations

import json
import tracemalloc
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flight_sink import FlightSinkError, InvalidRequestError
from flight_sink._json import dumps
from flight_sink.filters import MAX_FILTER_DEPTH, MAX_FILTER_NODES, FilterSyntaxError, parse_filter, to_predicate

CORPUS = Path(__file__).resolve().parents[3] / "engine" / "expr" / "testdata" / "filters.json"


def _cases() -> List[Dict[str, Any]]:
    # Numbers as Decimals: the corpus holds some no float or int() (past 4,300 digits) reads.
    doc = json.loads(CORPUS.read_text(encoding="utf-8"), parse_float=Decimal, parse_int=Decimal)
    cases: List[Dict[str, Any]] = doc["cases"]
    assert len(cases) >= 50
    return cases


def _text(case: Dict[str, Any]) -> str:
    if "text" in case:
        return str(case["text"])
    return "".join(str(piece) * int(count) for piece, count in case["text_parts"])


def _exact(v: Any) -> Any:
    """v with every number as the exact value its JSON text spells (a Fraction; a float's is
    its shortest text, which is what the client sends) and bools kept apart from numbers."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, float):
        return ("number", Fraction(Decimal(repr(v))))
    if isinstance(v, (int, Decimal)):
        return ("number", Fraction(v))
    if isinstance(v, dict):
        return {k: _exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_exact(x) for x in v]
    raise TypeError(f"{v!r} is not JSON")


def _case_id(case: Dict[str, Any]) -> str:
    text = _text(case)
    return text if len(text) <= 40 else text[:40] + "..."


@pytest.mark.parametrize("case", _cases(), ids=_case_id)
def test_corpus(case: Dict[str, Any]) -> None:
    text = _text(case)
    if "error_at" in case:
        with pytest.raises(FilterSyntaxError) as e:
            to_predicate(text)
        assert e.value.position == case["error_at"], str(e.value)[:300]
        assert case.get("error", "") in str(e.value)
        return
    got = to_predicate(text)
    assert _exact(got) == _exact(case["predicate"])
    # What the client sends is the same predicate, its numbers spelt exactly.
    assert _exact(json.loads(dumps(got), parse_float=Decimal, parse_int=Decimal)) == _exact(case["predicate"])


@pytest.mark.parametrize(
    "text, value",
    [
        ("id = 9007199254740993.0", 9007199254740993),
        ("id = -9223372036854775809", -9223372036854775809),
        ("id = 1.", 1),
        ("id = 0.1", 0.1),
        ("id = -1.25e-3", -0.00125),
        ("id = 9007199254740992.5", Decimal("9007199254740992.5")),
        ("id = 1.2500000000000000001", Decimal("1.2500000000000000001")),
        ("id = 1e400", Decimal("1e400")),
    ],
)
def test_number_types(text: str, value: object) -> None:
    # A whole number is an int, a fraction a float when one spells it exactly, else a Decimal.
    got = parse_filter(text)["value"]
    assert got == value and type(got) is type(value)


def test_predicate_json_text_keeps_exact_numbers() -> None:
    p = to_predicate('{"op": "=", "column": "d", "value": 1.2500000000000000001}')
    assert p["value"] == Decimal("1.2500000000000000001")
    assert dumps(p) == '{"op": "=", "column": "d", "value": 1.2500000000000000001}'


def test_filter_errors_are_flight_sink_errors() -> None:
    with pytest.raises(FlightSinkError) as e:
        to_predicate("id = ")
    assert isinstance(e.value, InvalidRequestError) and isinstance(e.value, ValueError)
    assert e.value.code == "client" and e.value.reason is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("(" * 60_000 + "id = 1" + ")" * 60_000, f"nested deeper than {MAX_FILTER_DEPTH}"),
        ("not " * 60_000 + "id = 1", f"nested deeper than {MAX_FILTER_DEPTH}"),
        ("invert(" * 60_000 + "id = 1" + ")" * 60_000, f"nested deeper than {MAX_FILTER_DEPTH}"),
        ("id = 0" + " or id = 1" * MAX_FILTER_NODES, f"more than {MAX_FILTER_NODES} nodes"),
        ("id = '" + "x" * (1 << 20) + "'", "over the limit"),
    ],
)
def test_bounds(text: str, message: str) -> None:
    # A text past a bound is refused after reading up to the token that passes it: the parse
    # allocates a bounded amount besides the text itself (and the error's echo of it).
    tracemalloc.start()
    try:
        with pytest.raises(FilterSyntaxError, match=message):
            parse_filter(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(text) + (16 << 20), peak


def test_bounds_are_inclusive() -> None:
    text = "(" * MAX_FILTER_DEPTH + "id = 1" + ")" * MAX_FILTER_DEPTH
    assert parse_filter(text) == {"op": "=", "column": "id", "value": 1}
