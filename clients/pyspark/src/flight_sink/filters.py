r"""Filters for :meth:`flight_sink.Client.read`: text and pyarrow expressions to the predicate JSON.

The server takes a predicate as JSON (``docs/protocol.md``, *DoAction*: ``{"op": "=", "column":
"id", "value": 3}``, ``{"op": "in", ...}``, ``{"op": "and", "args": [...]}``, ...).
:func:`to_predicate` builds that JSON, on the client, from

- a SQL-like text: ``"amount > 50 and country = 'NL'"``. Comparisons ``= == != <> < <= > >=``
  between a column and a literal (either side), ``col [not] in (v, ...)``, ``col between a and
  b``, ``col is [not] null``, ``and``, ``or``, ``not`` and parentheses. Literals: integers,
  decimals, ``'single'`` or ``"double"`` quoted strings, ``true``/``false``. Inside a string its
  quote is written twice or escaped, and a backslash starts one of the escapes ``\\ \' \" \n
  \r \t \uXXXX \UXXXXXXXX`` (a code point, not a surrogate); any other backslash is an error at
  its position. A number keeps its exact value: a whole number (``9007199254740993.0``,
  ``1e3``) is the exact integer, a fraction a float whose shortest text is exactly the literal
  (``0.1``, ``1.25``), and a number no float spells exactly (``9007199254740992.5``,
  ``1.2500000000000000001``, ``1e400``) a :class:`decimal.Decimal`, which the client's requests
  write as its digits: the server compares the literal's value, never a rounding of it.
  Whitespace is ASCII's (space, tab, newline, form feed, carriage return) and digits are ``0-9``.
  Keywords are case-insensitive; a column name is an identifier (letters, digits, ``_``, ``.``)
  or is written in backquotes (`` `my col` ``). The text has the server's bounds on a predicate:
  at most 1 MiB (UTF-8), parentheses, ``not`` and ``invert`` nested at most 100 deep, at most
  10,000 nodes (each ``in`` value one);
- a ``pyarrow.compute.Expression`` built from ``pc.field(...)``, scalars, comparisons, ``&``,
  ``|``, ``~``, ``is_null()``, ``is_valid()`` and ``isin()``;
- a dict (the JSON itself) or a JSON string starting with ``{``, passed through.

A text that does not parse raises :class:`FilterSyntaxError` (a
:class:`~flight_sink.InvalidRequestError`, so a ``FlightSinkError`` and a ``ValueError``) that
names the position (0-based character offset) of the mistake and shows it. The grammar's cases,
text to predicate JSON or to the position of the mistake, are in
``engine/expr/testdata/filters.json``, which the server's parser (``engine/expr``) is tested
against too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Optional, Union

from ._json import dumps
from .errors import FilterSyntaxError

__all__ = [
    "MAX_FILTER_BYTES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_NODES",
    "FilterSpec",
    "FilterSyntaxError",
    "Number",
    "Predicate",
    "parse_filter",
    "to_predicate",
]

#: The predicate JSON as a dict (``docs/protocol.md``, *DoAction*, ``delete``'s ``where``).
Predicate = dict[str, Any]

#: A literal number of a predicate: exact, see :func:`parse_filter`.
Number = Union[int, float, Decimal]

# A whole number with more digits than this stays a Decimal: int() of 1e1000000000 would build
# a billion digits.
_MAX_INT_DIGITS = 308

_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "between", "true", "false"}

# The bounds of a predicate (the server's MaxPredicateJSONBytes, MaxPredicateDepth and
# MaxPredicateNodes), which the text is held to as the server holds the JSON.
MAX_FILTER_BYTES = 1 << 20
MAX_FILTER_DEPTH = 100
MAX_FILTER_NODES = 10_000

_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_HELP = "use \\\\ \\' \\\" \\n \\r \\t \\uXXXX \\UXXXXXXXX"
_HEX = re.compile(r"[0-9A-Fa-f]*")

_TOKEN = re.compile(
    r"""
    (?P<ws>[\t\n\f\r\ ]+)
  | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\[\s\S]|'')*'|"(?:[^"\\]|\\[\s\S]|"")*")
  | (?P<quoted>`[^`]+`)
  | (?P<op><=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),])
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    """,
    re.VERBOSE | re.ASCII,
)


class _Tok:
    __slots__ = ("kind", "pos", "value")

    def __init__(self, kind: str, value: str, pos: int) -> None:
        self.kind, self.value, self.pos = kind, value, pos

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.lower() in words


def _unquote(tok: _Tok, text: str) -> str:
    """The value of string token tok: doubled quotes and escapes resolved; an unknown escape, a
    malformed \\u or \\U, or a surrogate raises at the backslash."""
    q, body = tok.value[0], tok.value[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == q:  # doubled: the tokenizer takes a quote inside only as a pair
            out.append(q)
            i += 2
            continue
        if c != "\\":
            out.append(c)
            i += 1
            continue
        at = tok.pos + 1 + i
        if i + 1 == len(body):
            raise FilterSyntaxError("a backslash at the end of a string", text, at)
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "uU":
            n = 4 if e == "u" else 8
            digits = body[i + 2 : i + 2 + n]
            if len(digits) != n or not _HEX.fullmatch(digits):
                raise FilterSyntaxError(f"\\{e} needs {n} hex digits", text, at)
            cp = int(digits, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                raise FilterSyntaxError(
                    f"\\{e}{digits} is not a Unicode character (a surrogate or past U+10FFFF)", text, at
                )
            out.append(chr(cp))
            i += 2 + n
        else:
            raise FilterSyntaxError(f"unknown escape \\{e} in a string ({_ESCAPE_HELP})", text, at)
    return "".join(out)


def _number(tok: _Tok) -> Number:
    """The value of a number token, exactly: a whole number as the int, a fraction as the float
    whose shortest text is its exact value, any other number (more digits than a float64 keeps,
    or past its range) as the Decimal, which :func:`flight_sink._json.dumps` writes as its
    digits."""
    d = Decimal(tok.value)
    if d.is_zero():
        return 0
    if d.adjusted() <= _MAX_INT_DIGITS and d == d.to_integral_value():
        return int(d)
    f = float(d)
    if math.isfinite(f) and Decimal(repr(f)) == d:
        return f
    return d


class _Parser:
    """Reads tokens as it needs them, so a text past a bound costs only the text up to the token
    that passes it."""

    def __init__(self, text: str) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_FILTER_BYTES:
            raise FilterSyntaxError(f"the filter is {size} bytes, over the limit of {MAX_FILTER_BYTES}", text, 0)
        self.text = text
        self.pos = 0
        self.toks: list[_Tok] = []
        self.i = 0
        self.depth = 0
        self.nodes = 0
        self._scan()

    def _scan(self) -> None:
        while self.pos < len(self.text):
            m = _TOKEN.match(self.text, self.pos)
            if m is None:
                raise FilterSyntaxError(f"unexpected character {self.text[self.pos]!r}", self.text, self.pos)
            start, self.pos = self.pos, m.end()
            kind = m.lastgroup or ""
            if kind != "ws":
                self.toks.append(_Tok(kind, m.group(), start))
                return
        self.toks.append(_Tok("end", "", len(self.text)))

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        if self.i == len(self.toks) and t.kind != "end":
            self._scan()
        return t

    def enter(self) -> None:
        """Open one level of nesting (a parenthesis, 'not' or 'invert') at the next token."""
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            raise FilterSyntaxError(
                f"filter nested deeper than {MAX_FILTER_DEPTH} levels (parentheses and 'not's)",
                self.text,
                self.peek().pos,
            )

    def node(self, n: int = 1) -> None:
        """Count n predicate nodes made at the token just read."""
        self.nodes += n
        if self.nodes > MAX_FILTER_NODES:
            raise FilterSyntaxError(
                f"filter has more than {MAX_FILTER_NODES} nodes (each 'in' value counts as one)",
                self.text,
                self.toks[self.i - 1].pos,
            )

    def fail(self, message: str, tok: Optional[_Tok] = None) -> FilterSyntaxError:
        tok = tok or self.peek()
        found = "the end of the filter" if tok.kind == "end" else repr(tok.value)
        return FilterSyntaxError(f"{message}, found {found}", self.text, tok.pos)

    def expect_punct(self, p: str) -> None:
        t = self.peek()
        if t.kind != "punct" or t.value != p:
            raise self.fail(f"expected {p!r}")
        self.next()

    def parse(self) -> Predicate:
        if self.peek().kind == "end":
            raise self.fail("expected a condition")
        p = self.or_expr()
        if self.peek().kind != "end":
            raise self.fail("expected 'and', 'or' or the end of the filter")
        return p

    def or_expr(self) -> Predicate:
        args = [self.and_expr()]
        while self.peek().is_word("or"):
            self.next()
            if len(args) == 1:
                self.node()
            args.append(self.and_expr())
        return args[0] if len(args) == 1 else {"op": "or", "args": args}

    def and_expr(self) -> Predicate:
        args = [self.not_expr()]
        while self.peek().is_word("and"):
            self.next()
            if len(args) == 1:
                self.node()
            args.append(self.not_expr())
        return args[0] if len(args) == 1 else {"op": "and", "args": args}

    def not_expr(self) -> Predicate:
        if self.peek().is_word("not"):
            self.next()
            self.enter()
            self.node()
            p = self.not_expr()
            self.depth -= 1
            return {"op": "not", "args": [p]}
        return self.primary()

    def primary(self) -> Predicate:
        t = self.peek()
        if t.kind == "punct" and t.value == "(":
            self.next()
            self.enter()
            p = self.or_expr()
            self.depth -= 1
            self.expect_punct(")")
            return p
        if t.kind == "word" and t.value.lower() in ("is_null", "is_valid", "invert"):
            return self.function()
        self.node()  # the comparison, 'in', 'is null' or 'between' this reads
        if self.is_literal(t):
            # literal op column
            value = self.literal()
            op_tok = self.peek()
            if op_tok.kind != "op":
                raise self.fail("expected a comparison (=, !=, <, <=, >, >=) after a literal")
            self.next()
            column = self.column("expected a column name after a literal and a comparison")
            return {"op": _FLIPPED[_COMPARISONS[op_tok.value]], "column": column, "value": value}
        column = self.column("expected a column name, 'not' or '('")
        t = self.peek()
        if t.kind == "op":
            self.next()
            if self.peek().is_word("null"):
                raise self.fail("a comparison with null is never true; write 'is null' or 'is not null'")
            value = self.literal()
            return {"op": _COMPARISONS[t.value], "column": column, "value": value}
        if t.is_word("is"):
            self.next()
            negate = False
            if self.peek().is_word("not"):
                self.next()
                negate = True
            if not self.peek().is_word("null"):
                raise self.fail("expected 'null' after 'is'")
            self.next()
            return {"op": "is_not_null" if negate else "is_null", "column": column}
        negate = False
        if t.is_word("not"):
            self.next()
            negate = True
            t = self.peek()
            if not t.is_word("in", "between"):
                raise self.fail("expected 'in' or 'between' after 'not'")
        if t.is_word("in"):
            self.next()
            self.expect_punct("(")
            values = [self.literal()]
            self.node()
            while self.peek().kind == "punct" and self.peek().value == ",":
                self.next()
                values.append(self.literal())
                self.node()
            self.expect_punct(")")
            in_p: Predicate = {"op": "in", "column": column, "values": values}
            return {"op": "not", "args": [in_p]} if negate else in_p
        if t.is_word("between"):
            self.next()
            lo = self.literal()
            if not self.peek().is_word("and"):
                raise self.fail("expected 'and' in 'between ... and ...'")
            self.next()
            hi = self.literal()
            p = {"op": "and", "args": [
                {"op": ">=", "column": column, "value": lo},
                {"op": "<=", "column": column, "value": hi},
            ]}
            return {"op": "not", "args": [p]} if negate else p
        raise self.fail(f"expected a comparison, 'in', 'between' or 'is' after column {column!r}")

    def function(self) -> Predicate:
        # The call forms pyarrow prints expressions with: is_null(c), is_valid(c), invert(p).
        name = self.next().value.lower()
        self.expect_punct("(")
        self.node()
        if name == "invert":
            self.enter()
            p = self.or_expr()
            self.depth -= 1
            self.expect_punct(")")
            return {"op": "not", "args": [p]}
        column = self.column("expected a column name")
        self.expect_punct(")")
        return {"op": "is_null" if name == "is_null" else "is_not_null", "column": column}

    def column(self, message: str) -> str:
        t = self.peek()
        if t.kind == "quoted":
            self.next()
            return t.value[1:-1]
        if t.kind == "word" and t.value.lower() not in _KEYWORDS:
            self.next()
            return t.value
        raise self.fail(message)

    @staticmethod
    def is_literal(t: _Tok) -> bool:
        return t.kind in ("num", "str") or t.is_word("true", "false")

    def literal(self) -> Any:
        t = self.peek()
        if t.kind == "num":
            self.next()
            return _number(t)
        if t.kind == "str":
            self.next()
            return _unquote(t, self.text)
        if t.is_word("true", "false"):
            self.next()
            return t.value.lower() == "true"
        raise self.fail("expected a literal (a number, a quoted string, true or false)")


def parse_filter(text: str) -> Predicate:
    """Parse a filter text (the module's grammar) into the server's predicate JSON."""
    p = _Parser(text).parse()
    # The bounds of the predicate the text's own do not see (a 'not' or a 'between' makes more
    # than one node, escapes lengthen the JSON), as the server checks them: the whole filter is
    # the mistake.
    problem = _shape_problem(p)
    if problem is None:
        size = len(dumps(p).encode("utf-8", "surrogatepass"))
        if size > MAX_FILTER_BYTES:
            problem = f"the predicate's JSON is {size} bytes, over the limit of {MAX_FILTER_BYTES}"
    if problem is not None:
        raise FilterSyntaxError(problem, text, 0)
    return p


def _shape_problem(p: Predicate) -> Optional[str]:
    """What puts ``p`` past the server's depth or node bound (a leaf at the top is depth 1,
    each "and", "or" and "not" a level; each "in" value a node), or None."""
    nodes = 0
    stack: list[tuple[Predicate, int]] = [(p, 1)]
    while stack:
        q, depth = stack.pop()
        if depth > MAX_FILTER_DEPTH:
            return (
                f"the predicate is nested deeper than {MAX_FILTER_DEPTH} levels; write a chain of "
                '"and"/"or" as one node with many arguments'
            )
        nodes += 1 + len(q.get("values") or ())
        if nodes > MAX_FILTER_NODES:
            return f'the predicate has more than {MAX_FILTER_NODES} nodes (each "in" value counts as one)'
        stack.extend((a, depth + 1) for a in q.get("args") or ())
    return None


_NEWLINE = re.compile(r"\n *")
_IS_IN = re.compile(
    r"is_in\(([A-Za-z_][\w.]*), \{value_set=[^:\[]+:\[(.*?)\], null_matching_behavior=MATCH\}\)", re.S
)


def _from_expression(expr: Any) -> Predicate:
    """The predicate of a ``pyarrow.compute.Expression``, through the text pyarrow prints."""
    text = str(expr)
    # is_in prints its value set as an options block: is_in(c, {value_set=int64:[1, 2], ...}).
    text = _IS_IN.sub(lambda m: f"({m.group(1)} in ({_NEWLINE.sub('', m.group(2))}))", text)
    # is_null prints its option: is_null(c, {nan_is_null=false}); true (NaN counts as null) has
    # no predicate form.
    text = text.replace(", {nan_is_null=false})", ")")
    try:
        return parse_filter(text)
    except FilterSyntaxError as e:
        raise FilterSyntaxError(
            f"pyarrow expression {text!r} has no predicate form (use comparisons of a field with a "
            "number, string or bool literal, &, |, ~, is_null, is_valid, isin); "
            + str(e).split(" at position")[0].removeprefix("filter: "),
            text,
            e.position,
        ) from None


#: What a ``filter`` argument takes: a text, a pyarrow expression, or the predicate JSON (a dict,
#: or its text starting with ``{``).
FilterSpec = Union[str, Mapping[str, Any], Any]


def _json_number(text: str) -> Number:
    """A JSON number with a fraction or an exponent, exactly (as :func:`parse_filter` reads it)."""
    return _number(_Tok("num", text, 0))


def to_predicate(filter: FilterSpec) -> Predicate:
    """The predicate JSON of a filter given as text, a pyarrow expression or the JSON itself.

    Raises:
        FilterSyntaxError: a text that does not parse (naming the position), or an expression
            outside what the predicate form can say.
        TypeError: anything else.
    """
    if isinstance(filter, Mapping):
        return dict(filter)
    if isinstance(filter, str):
        if filter.lstrip().startswith("{"):
            try:
                return dict(json.loads(filter, parse_float=_json_number))
            except json.JSONDecodeError as e:
                raise FilterSyntaxError(f"invalid predicate JSON ({e.msg})", filter, e.pos) from None
        return parse_filter(filter)
    try:
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - pyarrow always has compute
        pc = None
    if pc is not None and isinstance(filter, pc.Expression):
        return _from_expression(filter)
    raise TypeError(
        "filter must be a text such as \"amount > 50 and country = 'NL'\", a "
        f"pyarrow.compute.Expression or the predicate JSON as a dict, got {type(filter).__name__}"
    )
