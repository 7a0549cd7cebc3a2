package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/internal/pythontest"
)

// pythonParse runs the Python client's text-filter parser (clients/pyspark/src/flight_sink/
// filters.py, loaded by path: it needs only the standard library) on each text and returns, per
// text, its predicate JSON or "error at N".
func pythonParse(t *testing.T, texts []string) []string {
	t.Helper()
	py := pythontest.Interpreter(t)
	if _, err := exec.LookPath(py); err != nil {
		t.Skipf("no Python interpreter (%s): %v", py, err)
	}
	src, err := filepath.Abs("../../clients/pyspark/src/flight_sink/filters.py")
	if err != nil {
		t.Fatal(err)
	}
	const script = `
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("filters", sys.argv[1])
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)
for text in json.load(sys.stdin):
    try:
        print(json.dumps(filters.parse_filter(text)))
    except filters.FilterSyntaxError as e:
        print("error at %d" % e.position)
`
	in, _ := json.Marshal(texts)
	cmd := exec.Command(py, "-c", script, src)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python parser: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("python parser answered %d lines for %d texts:\n%s", len(lines), len(texts), out)
	}
	return lines
}

// canonicalPredicate re-encodes a predicate's JSON with every number in one spelling: a whole
// number as its digits, any other as the float64 it rounds to (how a float column compares it).
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
			if w, st := parseWholeNumber(string(x)); st == numberWhole {
				return json.Number(w.String())
			}
			f, _ := strconv.ParseFloat(string(x), 64)
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
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

// TestTextFiltersAgreeWithPython: the Go and the Python text-filter parsers give the same
// predicate for the same text, or refuse it at the same position: escapes, exact numbers and
// the bounds alike.
func TestTextFiltersAgreeWithPython(t *testing.T) {
	texts := []string{
		"id = 3", "3 < id", "amount >= 1.5 and country <> 'N''L'", "not (x is null)",
		"id not in (1, -2, +3)", "`my col` between 1 and 9", `flag = true and name = "a\"b"`,
		`s = 'a\nb\tc\rd'`, `s = '\\'`, `s = '\''`, `s = '\u00e9\U0001F600'`, `s = "x""y"`,
		`s = 'a\qb'`, `s = '\x41'`, `s = '\uD800'`, `s = '\u12'`, `s = 'x' or s = "\a"`,
		"id = 9007199254740993.0", "id = 9.007199254740993e15", "id = -9223372036854775809",
		"id = 007", "id = 1.", "id = -.5e3", "id = 0.1", "id = -1.5e2", "id = 1e20",
		"id =", "id = null", "id in (1, 2", "id ~ 3", "and = 1", "id = 1 id", "",
		strings.Repeat("(", 100) + "id = 1" + strings.Repeat(")", 100),
		strings.Repeat("(", 60_000) + "id = 1" + strings.Repeat(")", 60_000),
		strings.Repeat("not ", 101) + "id = 1",
		"id = 0" + strings.Repeat(" or id = 1", MaxPredicateNodes),
		"id in (" + strings.Repeat("1, ", MaxPredicateNodes) + "1)",
	}
	py := pythonParse(t, texts)
	atPosition := regexp.MustCompile(`at position (\d+):`)
	for i, text := range texts {
		name := text
		if len(name) > 60 {
			name = name[:60] + "..."
		}
		var want string
		p, err := ParseText(text)
		switch {
		case errors.Is(err, ErrInvalidPredicate) && atPosition.MatchString(err.Error()):
			want = "error at " + atPosition.FindStringSubmatch(err.Error())[1]
		case err != nil:
			t.Errorf("%q: %v, want an error at a position", name, err)
			continue
		default:
			b, _ := json.Marshal(p)
			want = canonicalPredicate(t, b)
		}
		got := py[i]
		if !strings.HasPrefix(got, "error at") {
			got = canonicalPredicate(t, []byte(got))
		}
		if got != want {
			t.Errorf("%q:\n python %s\n     go %s", name, got, want)
		}
	}
}
