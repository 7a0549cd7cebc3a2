package expr

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
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
