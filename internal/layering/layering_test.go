package layering

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/flight-sink/flight-sink"

// goPackage is what `go list -json` says of one package.
type goPackage struct {
	ImportPath string
	Imports    []string
}

// listPackages returns the module's packages and their non-test imports of the module's packages,
// by module-relative path.
func listPackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = "../.."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := make(map[string][]string)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		var own []string
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				own = append(own, rel)
			}
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module+"/")] = own
	}
	return pkgs
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// documentedPackages reads the package table of docs/architecture.md: package -> may import.
func documentedPackages(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := make(map[string][]string)
	inTable := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| package | owns | may import |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(doc) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		name := codeSpan.FindStringSubmatch(cells[0])
		if name == nil {
			t.Fatalf("docs/architecture.md: package row without a `package`: %s", line)
		}
		var allowed []string
		for _, m := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
			allowed = append(allowed, m[1])
		}
		if _, dup := doc[name[1]]; dup {
			t.Fatalf("docs/architecture.md lists %s twice", name[1])
		}
		doc[name[1]] = allowed
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(doc) == 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	return doc
}

// TestArchitectureDocNamesEveryPackage: the package table lists exactly the packages the module
// has.
func TestArchitectureDocNamesEveryPackage(t *testing.T) {
	pkgs, doc := listPackages(t), documentedPackages(t)
	for p := range pkgs {
		if _, ok := doc[p]; !ok {
			t.Errorf("docs/architecture.md has no row for package %s", p)
		}
	}
	for p := range doc {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("docs/architecture.md lists %s, which go list does not print", p)
		}
	}
}

// TestImportsFollowLayers: every package imports only the module's packages its row allows, so
// no package imports one above it (and there is no cycle, which the build would refuse anyway).
func TestImportsFollowLayers(t *testing.T) {
	pkgs, doc := listPackages(t), documentedPackages(t)
	for p, imports := range pkgs {
		allowed, ok := doc[p]
		if !ok {
			continue // TestArchitectureDocNamesEveryPackage reports it
		}
		for _, imp := range imports {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s, which its row in docs/architecture.md does not allow", p, imp)
			}
		}
	}
}
