"""The text-filter grammar's hostile edges: escapes, exact numbers and the predicate bounds
(the Go parser, engine/expr, agrees: TestTextFiltersAgreeWithPython)."""

from __future__ import annotations

import tracemalloc

import pytest

from flight_sink.filters import MAX_FILTER_DEPTH, MAX_FILTER_NODES, FilterSyntaxError, parse_filter


@pytest.mark.parametrize(
    "text, value",
    [
        (r"s = 'a\nb'", "a\nb"),
        (r"s = 'a\tb\rc'", "a\tb\rc"),
        (r"s = '\\'", "\\"),
        (r"s = '\\n'", "\\n"),
        (r"s = '\''", "'"),
        ("s = 'O''Brien'", "O'Brien"),
        (r's = "say \"hi\""', 'say "hi"'),
        (r"s = '\u00e9t\u00C9'", "étÉ"),
        (r"s = '\U0001F600'", "\U0001F600"),
    ],
)
def test_string_escapes(text: str, value: str) -> None:
    assert parse_filter(text)["value"] == value


@pytest.mark.parametrize(
    "text, position",
    [
        (r"s = 'a\qb'", 6),
        (r"s = '\x41'", 5),
        (r"s = 'ab\0'", 7),
        (r"s = '\u12'", 5),
        (r"s = '\u12G4'", 5),
        (r"s = '\uD800'", 5),
        (r"s = '\U00110000'", 5),
        (r"s = 'x' or s = " + '"\\a"', 16),
    ],
)
def test_unknown_escapes_are_errors(text: str, position: int) -> None:
    with pytest.raises(FilterSyntaxError) as e:
        parse_filter(text)
    assert e.value.position == position, str(e.value)


@pytest.mark.parametrize(
    "text, value",
    [
        ("id = 9007199254740993.0", 9007199254740993),
        ("id = 9.007199254740993e15", 9007199254740993),
        ("id = -9223372036854775809", -9223372036854775809),
        ("id = 007", 7),
        ("id = 1.", 1),
        ("id = 0.5", 0.5),
        ("id = 0.1", 0.1),
        ("id = -1.25e-3", -0.00125),
    ],
)
def test_numbers_are_exact(text: str, value: object) -> None:
    got = parse_filter(text)["value"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "text", ["id = 9007199254740992.5", "id = 1.2500000000000000001", "id = 1e400", "id = " + "9" * 5000]
)
def test_numbers_no_float_can_carry_are_refused(text: str) -> None:
    with pytest.raises(FilterSyntaxError) as e:
        parse_filter(text)
    assert e.value.position == 5


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
