package expr

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ParseText parses a filter written as text into a predicate, by the grammar of the Python
// client's text filters (clients/pyspark/src/flight_sink/filters.py):
//
//	amount > 50 and country = 'NL'
//	id in (1, 2, 3) or not (name is null)
//	ts between '2024-01-01T00:00:00Z' and '2024-02-01T00:00:00Z'
//
// Comparisons = == != <> < <= > >= between a column and a literal (either side), col [not] in
// (v, ...), col [not] between a and b, col is [not] null, and, or, not and parentheses.
// Literals: integers, decimals, 'single' or "double" quoted strings (a quote is escaped by
// doubling it or with a backslash), true and false. Keywords are case-insensitive; a column is an
// identifier (letters, digits, _ and .) or is written in backquotes (`my col`). A text that
// starts with "{" is the predicate's JSON (ParsePredicate). Errors wrap ErrInvalidPredicate and
// name the 0-based character offset of the mistake.
func ParseText(text string) (*Predicate, error) {
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		return ParsePredicate([]byte(text))
	}
	toks, err := textTokens(text)
	if err != nil {
		return nil, err
	}
	p := &textParser{text: text, toks: toks}
	if p.peek().kind == "end" {
		return nil, p.fail("expected a condition")
	}
	tree, err := p.orExpr()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != "end" {
		return nil, p.fail("expected 'and', 'or' or the end of the filter")
	}
	b, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPredicate, err)
	}
	return ParsePredicate(b)
}

var (
	textToken = regexp.MustCompile("^(?:" +
		`(?P<ws>\s+)` +
		`|(?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)` +
		`|(?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")` +
		"|(?P<quoted>`[^`]+`)" +
		`|(?P<op><=|>=|<>|!=|==|=|<|>)` +
		`|(?P<punct>[(),])` +
		`|(?P<word>[A-Za-z_][A-Za-z0-9_.]*)` +
		")")
	textComparisons = map[string]string{"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
	textFlipped     = map[string]string{"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
	textKeywords    = map[string]bool{"and": true, "or": true, "not": true, "in": true, "is": true, "null": true, "between": true, "true": true, "false": true}
	textEscape      = regexp.MustCompile(`\\(.)`)
	textInteger     = regexp.MustCompile(`^[-+]?\d+$`)
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

func textTokens(text string) ([]textTok, error) {
	var out []textTok
	names := textToken.SubexpNames()
	for pos := 0; pos < len(text); {
		m := textToken.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			return nil, textError(text, pos, fmt.Sprintf("unexpected character %q", text[pos]))
		}
		for i := 1; i < len(names); i++ {
			if m[2*i] >= 0 {
				if names[i] != "ws" {
					out = append(out, textTok{kind: names[i], value: text[pos+m[2*i] : pos+m[2*i+1]], pos: pos})
				}
				break
			}
		}
		pos += m[1]
	}
	return append(out, textTok{kind: "end", pos: len(text)}), nil
}

func textError(text string, pos int, msg string) error {
	return fmt.Errorf("%w: filter: %s at position %d:\n  %s\n  %s^", ErrInvalidPredicate, msg, pos, text, strings.Repeat(" ", pos))
}

type textParser struct {
	text string
	toks []textTok
	i    int
}

type node = map[string]any

func (p *textParser) peek() textTok { return p.toks[p.i] }
func (p *textParser) next() textTok { t := p.toks[p.i]; p.i++; return t }

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
		n, err := p.notExpr()
		if err != nil {
			return nil, err
		}
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
		n, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		return n, p.expectPunct(")")
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
		if textInteger.MatchString(t.value) {
			return json.Number(strings.TrimPrefix(t.value, "+")), nil
		}
		f, err := strconv.ParseFloat(t.value, 64)
		if err != nil {
			return nil, textError(p.text, t.pos, fmt.Sprintf("number %s: %v", t.value, err))
		}
		return f, nil
	case t.kind == "str":
		p.next()
		q := t.value[:1]
		body := strings.ReplaceAll(t.value[1:len(t.value)-1], q+q, q)
		return textEscape.ReplaceAllString(body, "$1"), nil
	case t.isWord("true", "false"):
		p.next()
		return strings.EqualFold(t.value, "true"), nil
	}
	return nil, p.fail("expected a literal (a number, a quoted string, true or false)")
}
