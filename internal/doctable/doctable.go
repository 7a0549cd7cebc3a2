// Package doctable reads the tables of the repository's Markdown docs for the tests that keep a
// doc and the code it describes in step.
package doctable

import (
	"os"
	"strings"
	"testing"
)

// Rows returns the table rows (lines starting "| `", trimmed) of the section of the Markdown file
// at path whose heading line is heading (e.g. "## Types"), up to the next heading of any level.
// A missing file or section fails the test.
func Rows(t testing.TB, path, heading string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := "\n" + string(b)
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no %q section", path, heading)
	}
	section := doc[start+len(heading)+2:]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			rows[strings.TrimSpace(line)] = true
		}
	}
	return rows
}
