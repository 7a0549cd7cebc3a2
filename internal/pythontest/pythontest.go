// Package pythontest finds the Python interpreter of the Go tests that run real Python readers
// (PyIceberg, Polars, DuckDB). Only tests import it.
package pythontest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Env is the environment variable naming the interpreter; `make test` sets it to the project
// virtualenv's python.
const Env = "FLIGHT_SINK_PYTHON"

// Interpreter returns $FLIGHT_SINK_PYTHON, else python3, once it has imported every module
// named. When it cannot, the test is skipped, or failed under CI (CI=true), where the
// virtualenv is always there.
func Interpreter(t testing.TB, modules ...string) string {
	t.Helper()
	py := os.Getenv(Env)
	if py == "" {
		py = "python3"
	}
	if len(modules) == 0 {
		return py
	}
	out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err != nil {
		msg := "%s cannot import %s (`make pydeps` makes the virtualenv; %s=.venv/bin/python): %v\n%s"
		if os.Getenv("CI") == "true" {
			t.Fatalf(msg, py, strings.Join(modules, ", "), Env, err, out)
		}
		t.Skipf(msg, py, strings.Join(modules, ", "), Env, err, out)
	}
	return py
}
