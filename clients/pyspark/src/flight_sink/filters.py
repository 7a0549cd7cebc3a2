"""Filters for :meth:`flight_sink.Client.read`: text and pyarrow expressions to the predicate JSON.

The server takes a predicate as JSON (``docs/protocol.md``, *DoAction*: ``{"op": "=", "column":
"id", "value": 3}``, ``{"op": "in", ...}``, ``{"op": "and", "args": [...]}``, ...).
:func:`to_predicate` builds that JSON, on the client, from

- a SQL-like text: ``"amount > 50 and country = 'NL'"``. Comparisons ``= == != <> < <= > >=``
  between a column and a literal (either side), ``col [not] in (v, ...)``, ``col between a and
  b``, ``col is [not] null``, ``and``, ``or``, ``not`` and parentheses. Literals: integers,
  decimals, ``'single'`` or ``"double"`` quoted strings (a quote is escaped by doubling it or
  with a backslash), ``true``/``false``. Keywords are case-insensitive; a column name is an
  identifier (letters, digits, ``_``, ``.``) or is written in backquotes (`` `my col` ``);
- a ``pyarrow.compute.Expression`` built from ``pc.field(...)``, scalars, comparisons, ``&``,
  ``|``, ``~``, ``is_null()``, ``is_valid()`` and ``isin()``;
- a dict (the JSON itself) or a JSON string starting with ``{``, passed through.

A text that does not parse raises :class:`FilterSyntaxError`, a ``ValueError`` that names the
position (0-based character offset) of the mistake and shows it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = ["FilterSyntaxError", "to_predicate", "parse_filter"]

Predicate = Dict[str, Any]

_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "between", "true", "false"}

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<quoted>`[^`]+`)
  | (?P<op><=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),])
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    """,
    re.VERBOSE,
)


class FilterSyntaxError(ValueError):
    """A filter text that does not parse, or an expression with no predicate form.

    Attributes:
        text: the filter text.
        position: the 0-based character offset of the mistake.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        self.text = text
        self.position = position
        caret = " " * position + "^"
        super().__init__(f"filter: {message} at position {position}:\n  {text}\n  {caret}")


class _Tok:
    __slots__ = ("kind", "value", "pos")

    def __init__(self, kind: str, value: str, pos: int) -> None:
        self.kind, self.value, self.pos = kind, value, pos

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.lower() in words


def _tokens(text: str) -> List[_Tok]:
    out: List[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterSyntaxError(f"unexpected character {text[pos]!r}", text, pos)
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    out.append(_Tok("end", "", len(text)))
    return out


def _unquote(s: str) -> str:
    q = s[0]
    body = s[1:-1].replace(q + q, q)
    return re.sub(r"\\(.)", r"\1", body)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

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
            args.append(self.and_expr())
        return args[0] if len(args) == 1 else {"op": "or", "args": args}

    def and_expr(self) -> Predicate:
        args = [self.not_expr()]
        while self.peek().is_word("and"):
            self.next()
            args.append(self.not_expr())
        return args[0] if len(args) == 1 else {"op": "and", "args": args}

    def not_expr(self) -> Predicate:
        if self.peek().is_word("not"):
            self.next()
            return {"op": "not", "args": [self.not_expr()]}
        return self.primary()

    def primary(self) -> Predicate:
        t = self.peek()
        if t.kind == "punct" and t.value == "(":
            self.next()
            p = self.or_expr()
            self.expect_punct(")")
            return p
        if t.kind == "word" and t.value.lower() in ("is_null", "is_valid", "invert"):
            return self.function()
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
            while self.peek().kind == "punct" and self.peek().value == ",":
                self.next()
                values.append(self.literal())
            self.expect_punct(")")
            p: Predicate = {"op": "in", "column": column, "values": values}
            return {"op": "not", "args": [p]} if negate else p
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
        if name == "invert":
            p = self.or_expr()
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
            if re.fullmatch(r"[-+]?\d+", t.value):
                return int(t.value)
            return float(t.value)
        if t.kind == "str":
            self.next()
            return _unquote(t.value)
        if t.is_word("true", "false"):
            self.next()
            return t.value.lower() == "true"
        raise self.fail("expected a literal (a number, a quoted string, true or false)")


def parse_filter(text: str) -> Predicate:
    """Parse a filter text (the module's grammar) into the server's predicate JSON."""
    return _Parser(text).parse()


_NEWLINE = re.compile(r"\n *")
_IS_IN = re.compile(
    r"is_in\(([A-Za-z_][\w.]*), \{value_set=[^:\[]+:\[(.*?)\], null_matching_behavior=MATCH\}\)", re.S
)


def _from_expression(expr: Any) -> Predicate:
    """The predicate of a ``pyarrow.compute.Expression``, through the text pyarrow prints."""
    text = str(expr)
    # is_in prints its value set as an options block: is_in(c, {value_set=int64:[1, 2], ...}).
    text = _IS_IN.sub(lambda m: "(%s in (%s))" % (m.group(1), _NEWLINE.sub("", m.group(2))), text)
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


FilterSpec = Union[str, Mapping[str, Any], Any]


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
                return dict(json.loads(filter))
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
