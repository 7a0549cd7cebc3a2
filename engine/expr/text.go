package expr

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseText parses a filter written as text into a predicate, by the grammar of the Python
// client's text filters (clients/pyspark/src/flight_sink/filters.py):
//
//	amount > 50 and country = 'NL'
//	id in (1, 2, 3) or not (name is null)
//	ts between '2024-01-01T00:00:00Z' and '2024-02-01T00:00:00Z'
//
// Comparisons = == != <> < <= > >= between a column and a literal (either side), col [not] in
// (v, ...), col [not] between a and b, col is [not] null, the call forms pyarrow prints
// expressions with (is_null(col), is_valid(col), invert(filter)), and, or, not and parentheses.
// Literals: integers and decimals (kept exact: the predicate's JSON carries their digits),
// 'single' or "double" quoted strings, true and false. Inside a string its quote is written
// twice or escaped, and a backslash starts one of the escapes \\ \' \" \n \r \t \uXXXX or
// \UXXXXXXXX (a Unicode code point, not a surrogate); any other backslash is an error at its
// position. Keywords are case-insensitive; a column is an identifier (letters, digits, _
// and .) or is written in backquotes (`my col`). A text that starts with "{" is the predicate's
// JSON (ParsePredicate). The text has the JSON's bounds: at most MaxPredicateJSONBytes bytes,
// parentheses and "not"s nested at most MaxPredicateDepth deep, at most MaxPredicateNodes
// nodes; the parser stops at the first token past one. Errors wrap ErrInvalidPredicate and name
// the 0-based character (code point) offset of the mistake. Whitespace is ASCII's (space, \t,
// \n, \f, \r) and digits are 0-9. engine/expr/testdata/filters.json holds the grammar's cases,
// which the Python client's tests read too.
func ParseText(text string) (*Predicate, error) {
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		return ParsePredicate([]byte(text))
	}
	if len(text) > MaxPredicateJSONBytes {
		return nil, textError(text, 0, fmt.Sprintf("the filter is %d bytes, over the limit of %d", len(text), MaxPredicateJSONBytes))
	}
	p := &textParser{text: text}
	if err := p.scan(); err != nil {
		return nil, err
	}
	if p.peek().kind == "end" {
		return nil, p.fail("expected a condition")
	}
	tree, err := p.orExpr()
	if p.err != nil { // a token that does not scan ends the filter early: report it, not what follows
		return nil, p.err
	}
	if err != nil {
		return nil, err
	}
	if p.err != nil {
		return nil, p.err
	}
	if p.peek().kind != "end" {
		return nil, p.fail("expected 'and', 'or' or the end of the filter")
	}
	b, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPredicate, err)
	}
	pred, err := ParsePredicate(b)
	if err != nil {
		// A bound of the predicate the text's own do not see: a "not" or a "between" makes more
		// than one node, escapes lengthen the JSON. The whole filter is the mistake.
		return nil, textError(text, 0, strings.TrimPrefix(err.Error(), ErrInvalidPredicate.Error()+": "))
	}
	return pred, nil
}

var (
	textToken = regexp.MustCompile("^(?:" +
		`(?P<ws>\s+)` +
		`|(?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)` +
		`|(?P<str>'(?:[^'\\]|\\(?s:.)|'')*'|"(?:[^"\\]|\\(?s:.)|"")*")` +
		"|(?P<quoted>`[^`]+`)" +
		`|(?P<op><=|>=|<>|!=|==|=|<|>)` +
		`|(?P<punct>[(),])` +
		`|(?P<word>[A-Za-z_][A-Za-z0-9_.]*)` +
		")")
	textComparisons = map[string]string{"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
	textFlipped     = map[string]string{"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
	textKeywords    = map[string]bool{"and": true, "or": true, "not": true, "in": true, "is": true, "null": true, "between": true, "true": true, "false": true}
)

type textTok struct {
	kind, value string
	pos         int
}

func (t textTok) isWord(words ...string) bool {
	if t.kind != "word" {
		return false
	}
	for _, w := range words {
		if strings.EqualFold(t.value, w) {
			return true
		}
	}
	return false
}

// scan reads the token after the last one read (none after "end"). Tokens are read as the
// parser asks for them, so a filter past a bound costs the text up to the token that passes it.
func (p *textParser) scan() error {
	if n := len(p.toks); n > 0 && p.toks[n-1].kind == "end" {
		return nil
	}
	names := textToken.SubexpNames()
	for p.pos < len(p.text) {
		m := textToken.FindStringSubmatchIndex(p.text[p.pos:])
		if m == nil {
			r, _ := utf8.DecodeRuneInString(p.text[p.pos:])
			return textError(p.text, p.pos, fmt.Sprintf("unexpected character %q", r))
		}
		start := p.pos
		p.pos += m[1]
		for i := 1; i < len(names); i++ {
			if m[2*i] >= 0 {
				if names[i] != "ws" {
					p.toks = append(p.toks, textTok{kind: names[i], value: p.text[start+m[2*i] : start+m[2*i+1]], pos: start})
					return nil
				}
				break
			}
		}
	}
	p.toks = append(p.toks, textTok{kind: "end", pos: len(p.text)})
	return nil
}

// textError is the error for a mistake at byte offset pos of text. It names the position in
// characters (Unicode code points), as the Python client does and as the caret under the text
// needs.
func textError(text string, pos int, msg string) error {
	at := utf8.RuneCountInString(text[:pos])
	return fmt.Errorf("%w: filter: %s at position %d:\n  %s\n  %s^", ErrInvalidPredicate, msg, at, text, strings.Repeat(" ", at))
}

type textParser struct {
	text string
	toks []textTok // read so far; toks[i] is the next
	i    int
	pos  int // the byte offset scan reads from
	err  error
	// depth counts the open parentheses and "not"s around the token being read; nodes the
	// predicate nodes made so far (each "in" value one).
	depth, nodes int
}

type node = map[string]any

func (p *textParser) peek() textTok { return p.toks[p.i] }

// next consumes the next token and reads the one after it; a scan error ends the filter there
// and is reported by ParseText.
func (p *textParser) next() textTok {
	t := p.toks[p.i]
	p.i++
	if p.i == len(p.toks) {
		if err := p.scan(); err != nil {
			p.err = err
			p.toks = append(p.toks, textTok{kind: "end", pos: p.pos})
		}
	}
	return t
}

// enter opens one level of nesting (a parenthesis or a "not") at the next token.
func (p *textParser) enter() error {
	p.depth++
	if p.depth > MaxPredicateDepth {
		return textError(p.text, p.peek().pos, fmt.Sprintf("filter nested deeper than %d levels (parentheses and 'not's)", MaxPredicateDepth))
	}
	return nil
}

// node counts n predicate nodes made at the token just read.
func (p *textParser) node(n int) error {
	p.nodes += n
	if p.nodes > MaxPredicateNodes {
		return textError(p.text, p.toks[p.i-1].pos, fmt.Sprintf("filter has more than %d nodes (each 'in' value counts as one)", MaxPredicateNodes))
	}
	return nil
}

func (p *textParser) fail(msg string) error {
	t := p.peek()
	found := fmt.Sprintf("%q", t.value)
	if t.kind == "end" {
		found = "the end of the filter"
	}
	return textError(p.text, t.pos, msg+", found "+found)
}

func (p *textParser) expectPunct(s string) error {
	if t := p.peek(); t.kind != "punct" || t.value != s {
		return p.fail(fmt.Sprintf("expected %q", s))
	}
	p.next()
	return nil
}

func (p *textParser) orExpr() (node, error)  { return p.chain("or", p.andExpr) }
func (p *textParser) andExpr() (node, error) { return p.chain("and", p.notExpr) }

func (p *textParser) chain(op string, sub func() (node, error)) (node, error) {
	first, err := sub()
	if err != nil {
		return nil, err
	}
	args := []any{first}
	for p.peek().isWord(op) {
		p.next()
		if len(args) == 1 {
			if err := p.node(1); err != nil { // the "and"/"or" node
				return nil, err
			}
		}
		n, err := sub()
		if err != nil {
			return nil, err
		}
		args = append(args, n)
	}
	if len(args) == 1 {
		return first, nil
	}
	return node{"op": op, "args": args}, nil
}

func (p *textParser) notExpr() (node, error) {
	if p.peek().isWord("not") {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		if err := p.node(1); err != nil {
			return nil, err
		}
		n, err := p.notExpr()
		if err != nil {
			return nil, err
		}
		p.depth--
		return node{"op": "not", "args": []any{n}}, nil
	}
	return p.primary()
}

func isTextLiteral(t textTok) bool {
	return t.kind == "num" || t.kind == "str" || t.isWord("true", "false")
}

func (p *textParser) primary() (node, error) {
	t := p.peek()
	if t.kind == "punct" && t.value == "(" {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		n, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		p.depth--
		return n, p.expectPunct(")")
	}
	if t.isWord("is_null", "is_valid", "invert") {
		return p.function()
	}
	if err := p.node(1); err != nil { // the comparison, "in", "is null" or "between" this reads
		return nil, err
	}
	if isTextLiteral(t) { // literal op column
		v, _ := p.literal()
		op := p.peek()
		if op.kind != "op" {
			return nil, p.fail("expected a comparison (=, !=, <, <=, >, >=) after a literal")
		}
		p.next()
		col, err := p.column("expected a column name after a literal and a comparison")
		if err != nil {
			return nil, err
		}
		return node{"op": textFlipped[textComparisons[op.value]], "column": col, "value": v}, nil
	}
	col, err := p.column("expected a column name, 'not' or '('")
	if err != nil {
		return nil, err
	}
	t = p.peek()
	switch {
	case t.kind == "op":
		p.next()
		if p.peek().isWord("null") {
			return nil, p.fail("a comparison with null is never true; write 'is null' or 'is not null'")
		}
		v, err := p.literal()
		if err != nil {
			return nil, err
		}
		return node{"op": textComparisons[t.value], "column": col, "value": v}, nil
	case t.isWord("is"):
		p.next()
		op := "is_null"
		if p.peek().isWord("not") {
			p.next()
			op = "is_not_null"
		}
		if !p.peek().isWord("null") {
			return nil, p.fail("expected 'null' after 'is'")
		}
		p.next()
		return node{"op": op, "column": col}, nil
	}
	negate := false
	if t.isWord("not") {
		p.next()
		negate = true
		if t = p.peek(); !t.isWord("in", "between") {
			return nil, p.fail("expected 'in' or 'between' after 'not'")
		}
	}
	var n node
	switch {
	case t.isWord("in"):
		p.next()
		if err := p.expectPunct("("); err != nil {
			return nil, err
		}
		var values []any
		for {
			v, err := p.literal()
			if err != nil {
				return nil, err
			}
			values = append(values, v)
			if err := p.node(1); err != nil {
				return nil, err
			}
			if t := p.peek(); t.kind != "punct" || t.value != "," {
				break
			}
			p.next()
		}
		if err := p.expectPunct(")"); err != nil {
			return nil, err
		}
		n = node{"op": "in", "column": col, "values": values}
	case t.isWord("between"):
		p.next()
		lo, err := p.literal()
		if err != nil {
			return nil, err
		}
		if !p.peek().isWord("and") {
			return nil, p.fail("expected 'and' in 'between ... and ...'")
		}
		p.next()
		hi, err := p.literal()
		if err != nil {
			return nil, err
		}
		n = node{"op": "and", "args": []any{node{"op": ">=", "column": col, "value": lo}, node{"op": "<=", "column": col, "value": hi}}}
	default:
		return nil, p.fail(fmt.Sprintf("expected a comparison, 'in', 'between' or 'is' after column %q", col))
	}
	if negate {
		return node{"op": "not", "args": []any{n}}, nil
	}
	return n, nil
}

// function reads the call forms pyarrow prints expressions with: is_null(c), is_valid(c) and
// invert(p).
func (p *textParser) function() (node, error) {
	name := strings.ToLower(p.next().value)
	if err := p.expectPunct("("); err != nil {
		return nil, err
	}
	if err := p.node(1); err != nil {
		return nil, err
	}
	if name == "invert" {
		if err := p.enter(); err != nil {
			return nil, err
		}
		n, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		p.depth--
		if err := p.expectPunct(")"); err != nil {
			return nil, err
		}
		return node{"op": "not", "args": []any{n}}, nil
	}
	col, err := p.column("expected a column name")
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct(")"); err != nil {
		return nil, err
	}
	if name == "is_null" {
		return node{"op": "is_null", "column": col}, nil
	}
	return node{"op": "is_not_null", "column": col}, nil
}

func (p *textParser) column(msg string) (string, error) {
	t := p.peek()
	switch {
	case t.kind == "quoted":
		p.next()
		return t.value[1 : len(t.value)-1], nil
	case t.kind == "word" && !textKeywords[strings.ToLower(t.value)]:
		p.next()
		return t.value, nil
	}
	return "", p.fail(msg)
}

func (p *textParser) literal() (any, error) {
	t := p.peek()
	switch {
	case t.kind == "num":
		p.next()
		return textNumber(t.value), nil
	case t.kind == "str":
		p.next()
		return p.unquote(t)
	case t.isWord("true", "false"):
		p.next()
		return strings.EqualFold(t.value, "true"), nil
	}
	return nil, p.fail("expected a literal (a number, a quoted string, true or false)")
}

// textNumber is a number token as the JSON number of the same exact value: a leading "+" and
// leading zeros dropped, a bare "." completed ("1." is 1.0, ".5" is 0.5), the digits kept.
func textNumber(tok string) json.Number {
	sign := ""
	switch tok[0] {
	case '-':
		sign, tok = "-", tok[1:]
	case '+':
		tok = tok[1:]
	}
	mant, exp := tok, ""
	if i := strings.IndexAny(tok, "eE"); i >= 0 {
		mant, exp = tok[:i], tok[i:]
	}
	intPart, frac, dot := strings.Cut(mant, ".")
	if intPart = strings.TrimLeft(intPart, "0"); intPart == "" {
		intPart = "0"
	}
	if dot {
		if frac == "" {
			frac = "0"
		}
		intPart += "." + frac
	}
	return json.Number(sign + intPart + exp)
}

// unquote returns the value of string token t: its doubled quotes and escapes resolved. An
// unknown escape, a malformed \u or \U, or a surrogate is an error at the backslash.
func (p *textParser) unquote(t textTok) (string, error) {
	q, body := t.value[0], t.value[1:len(t.value)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == q: // doubled: the tokenizer takes a quote inside only as a pair
			b.WriteByte(q)
			i++
			continue
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		at := t.pos + 1 + i // the backslash, in the filter text
		if i+1 == len(body) {
			return "", textError(p.text, at, "a backslash at the end of a string")
		}
		i++
		switch e := body[i]; e {
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u', 'U':
			n := 4
			if e == 'U' {
				n = 8
			}
			hex := body[i+1 : min(i+1+n, len(body))]
			r, err := strconv.ParseUint(hex, 16, 32)
			if len(hex) != n || err != nil {
				return "", textError(p.text, at, fmt.Sprintf("\\%c needs %d hex digits", e, n))
			}
			if !utf8.ValidRune(rune(r)) {
				return "", textError(p.text, at, fmt.Sprintf("\\%c%s is not a Unicode character (a surrogate or past U+10FFFF)", e, hex))
			}
			b.WriteRune(rune(r))
			i += n
		default:
			r, _ := utf8.DecodeRuneInString(body[i:])
			return "", textError(p.text, at, fmt.Sprintf("unknown escape \\%c in a string (use \\\\ \\' \\\" \\n \\r \\t \\uXXXX \\UXXXXXXXX)", r))
		}
	}
	return b.String(), nil
}
