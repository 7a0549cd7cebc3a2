package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// filterCase is one case of testdata/filters.json, the text grammar's cases that the Python
// client's tests (clients/pyspark/tests/test_filters.py) read too.
type filterCase struct {
	Note      string          `json:"note"`
	Text      *string         `json:"text"`
	TextParts [][2]any        `json:"text_parts"`
	Predicate json.RawMessage `json:"predicate"`
	ErrorAt   *int            `json:"error_at"`
	Error     string          `json:"error"`
}

// text is the case's filter text: Text, or TextParts' pieces repeated and joined.
func (c filterCase) text(t *testing.T) string {
	if c.Text != nil {
		return *c.Text
	}
	var b strings.Builder
	for _, part := range c.TextParts {
		piece, ok1 := part[0].(string)
		count, ok2 := part[1].(float64)
		if !ok1 || !ok2 {
			t.Fatalf("text_parts %v: want [piece, count] pairs", c.TextParts)
		}
		b.WriteString(strings.Repeat(piece, int(count)))
	}
	return b.String()
}

// TestTextFilterCorpus: ParseText gives each case's predicate (numbers by exact value), or refuses
// it at the case's position with its message.
func TestTextFilterCorpus(t *testing.T) {
	b, err := os.ReadFile("testdata/filters.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct {
		Cases []filterCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Cases) < 50 {
		t.Fatalf("testdata/filters.json has %d cases", len(corpus.Cases))
	}
	atPosition := regexp.MustCompile(`at position (\d+):`)
	for i, c := range corpus.Cases {
		text := c.text(t)
		name := fmt.Sprintf("case %d %q", i, text)
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		if (c.Predicate == nil) == (c.ErrorAt == nil) {
			t.Fatalf("%s: give either predicate or error_at", name)
		}
		p, err := ParseText(text)
		if c.ErrorAt != nil {
			m := atPosition.FindStringSubmatch(fmt.Sprint(err))
			if !errors.Is(err, ErrInvalidPredicate) || m == nil || m[1] != strconv.Itoa(*c.ErrorAt) || !strings.Contains(err.Error(), c.Error) {
				t.Errorf("%s: %v, want an error at position %d saying %q", name, trimErr(err), *c.ErrorAt, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, trimErr(err))
			continue
		}
		got, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := canonicalPredicate(t, got), canonicalPredicate(t, c.Predicate); g != w {
			t.Errorf("%s:\n got %s\nwant %s", name, g, w)
		}
	}
}

// canonicalPredicate re-encodes a predicate's JSON with every number as its exact value (a
// fraction in lowest terms), so that two spellings of one number (1.0, 1, 1e0) compare equal.
func canonicalPredicate(t *testing.T, b []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			r, ok := new(big.Rat).SetString(string(x))
			if !ok {
				t.Fatalf("number %s", x)
			}
			return "number " + r.RatString()
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
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
