package expr

import (
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestParseText: the text grammar gives the predicate JSON the Python client's text filters give
// (the same cases as clients/pyspark/tests), and a mistake names its position.
func TestParseText(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"id = 3", `{"op":"=","column":"id","value":3}`},
		{"id == 3", `{"op":"=","column":"id","value":3}`},
		{"3 < id", `{"op":">","column":"id","value":3}`},
		{"amount >= 1.5 and country <> 'N''L'", `{"op":"and","args":[{"op":">=","column":"amount","value":1.5},{"op":"!=","column":"country","value":"N'L"}]}`},
		{"a = 1 or b = 2 and c = 3", `{"op":"or","args":[{"op":"=","column":"a","value":1},{"op":"and","args":[{"op":"=","column":"b","value":2},{"op":"=","column":"c","value":3}]}]}`},
		{"not (x is null)", `{"op":"not","args":[{"op":"is_null","column":"x"}]}`},
		{"x IS NOT NULL", `{"op":"is_not_null","column":"x"}`},
		{"id not in (1, -2, +3)", `{"op":"not","args":[{"op":"in","column":"id","values":[1,-2,3]}]}`},
		{"`my col` between 1 and 9", `{"op":"and","args":[{"op":">=","column":"my col","value":1},{"op":"<=","column":"my col","value":9}]}`},
		{`flag = true and name = "a\"b"`, `{"op":"and","args":[{"op":"=","column":"flag","value":true},{"op":"=","column":"name","value":"a\"b"}]}`},
		{`{"op": "=", "column": "id", "value": 3}`, `{"op":"=","column":"id","value":3}`},
	} {
		p, err := ParseText(tc.text)
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(p)
		if got := strings.TrimSpace(b.String()); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.text, got, tc.want)
		}
	}
	for _, tc := range []struct {
		text string
		pos  int
	}{
		{"", 0},
		{"id =", 4},
		{"id = null", 5},
		{"id in (1, 2", 11},
		{"id ~ 3", 3},
		{"and = 1", 0},
		{"id = 1 id", 7},
	} {
		_, err := ParseText(tc.text)
		if !errors.Is(err, ErrInvalidPredicate) || !strings.Contains(err.Error(), "at position "+strconv.Itoa(tc.pos)+":") {
			t.Errorf("%q: %v, want ErrInvalidPredicate at position %d", tc.text, err, tc.pos)
		}
	}
}

// TestParseTextEscapes: a string's escapes are the documented set, and any other backslash is an
// error at its position, never dropped.
func TestParseTextEscapes(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{`s = 'a\nb'`, "a\nb"},
		{`s = 'a\tb\rc'`, "a\tb\rc"},
		{`s = '\\'`, `\`},
		{`s = '\\n'`, `\n`},
		{`s = '\''`, `'`},
		{`s = 'O''Brien'`, `O'Brien`},
		{`s = "say \"hi\""`, `say "hi"`},
		{`s = "a""b"`, `a"b`},
		{`s = '\u00e9t\u00C9'`, "étÉ"},
		{`s = '\U0001F600'`, "\U0001F600"},
		{`s = 'é\''`, "é'"},
	} {
		p, err := ParseText(tc.text)
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		if p.Value != tc.want {
			t.Errorf("%s: value %q, want %q", tc.text, p.Value, tc.want)
		}
	}
	for _, tc := range []struct {
		text string
		pos  int
	}{
		{`s = 'a\qb'`, 6},
		{`s = '\x41'`, 5},
		{`s = 'ab\0'`, 7},
		{`s = '\u12'`, 5},
		{`s = '\u12G4'`, 5},
		{`s = '\uD800'`, 5},
		{`s = '\U00110000'`, 5},
		{`s = 'x' or s = "\a"`, 16},
	} {
		_, err := ParseText(tc.text)
		if !errors.Is(err, ErrInvalidPredicate) || !strings.Contains(err.Error(), "at position "+strconv.Itoa(tc.pos)+":") {
			t.Errorf("%s: %v, want ErrInvalidPredicate at position %d", tc.text, err, tc.pos)
		}
	}
}

// TestParseTextNumbers: a number keeps its exact value on its way to the predicate's JSON, so an
// integer column compares it exactly and refuses one out of its range, as the JSON form does.
func TestParseTextNumbers(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"id = 9007199254740993.0", `9007199254740993.0`},
		{"id = 007", `7`},
		{"id = +3", `3`},
		{"id = -0", `-0`},
		{"id = 1.", `1.0`},
		{"id = -.5e3", `-0.5e3`},
		{"id = 123456789012345678901234567890", `123456789012345678901234567890`},
	} {
		p, err := ParseText(tc.text)
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		if got := p.Value.(json.Number); string(got) != tc.want {
			t.Errorf("%s: value %s, want %s", tc.text, got, tc.want)
		}
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	p, err := ParseText("id = 9007199254740993.0")
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := p.bind(schema); err != nil || ev.(*compareEval).lit.i != 1<<53+1 {
		t.Fatalf("id = 9007199254740993.0 bound to %+v, %v; want 2^53+1", ev, err)
	}
	for _, text := range []string{"id = -9223372036854775809", "id = 9223372036854775808", "id in (1, -9223372036854775809)"} {
		p, err := ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(schema); !errors.Is(err, ErrInvalidPredicate) {
			t.Errorf("%s: %v, want it refused", text, err)
		}
	}
}

// TestParseTextBounds: the text form has the JSON form's bounds (size, depth, nodes), and a filter
// past one costs the parser a bounded amount of memory, however long it is.
func TestParseTextBounds(t *testing.T) {
	const n = 60_000 // 120 KB of parentheses
	deep := strings.Repeat("(", n) + "id = 1" + strings.Repeat(")", n)
	nots := strings.Repeat("not ", n) + "id = 1"
	wide := "id = 0" + strings.Repeat(" or id = 1", MaxPredicateNodes)
	for _, tc := range []struct {
		name, text, want string
		ceiling          uint64 // bytes the parse may allocate besides the error's echo of the text
	}{
		{"parentheses", deep, "nested deeper than 100", 1 << 20},
		{"nots", nots, "nested deeper than 100", 1 << 20},
		{"nodes", wide, "more than 10000 nodes", 64 << 20}, // the 10,000 nodes it builds
		{"size", "id = '" + strings.Repeat("x", MaxPredicateJSONBytes) + "'", "over the limit", 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ParseText(tc.text)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrInvalidPredicate) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error saying %q", trimErr(err), tc.want)
			}
			// The error message echoes the text (twice its length with the caret line).
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*len(tc.text))+tc.ceiling {
				t.Errorf("parsing %d bytes allocated %d bytes", len(tc.text), alloc)
			}
		})
	}
	// At the bounds, it parses.
	ok := strings.Repeat("(", MaxPredicateDepth) + "id = 1" + strings.Repeat(")", MaxPredicateDepth)
	if _, err := ParseText(ok); err != nil {
		t.Fatalf("%d parentheses: %v", MaxPredicateDepth, err)
	}
}

func trimErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
