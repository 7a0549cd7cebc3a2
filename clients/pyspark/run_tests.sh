#!/usr/bin/env bash
# Python client tests (clients/pyspark): builds the Go server from this checkout, installs the
# package and its test dependencies when missing, runs pytest and exits with pytest's code.
#
#   clients/pyspark/run_tests.sh               # every test
#   clients/pyspark/run_tests.sh -k client -x  # extra arguments go to pytest
#
# Environment: PYTHON (default: the project virtualenv .venv/bin/python, created with
# `make pydeps` when missing); FLIGHT_SINK_BIN to test an already built server instead of
# building; FLIGHT_SINK_SPARK41_PYTHON for the PySpark 4.1 tests (`make test-python` sets it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
	PYTHON="$repo/.venv/bin/python"
	if [ ! -f "$repo/.venv/.installed" ]; then
		make -C "$repo" pydeps
	fi
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ -z "${FLIGHT_SINK_BIN:-}" ]; then
	echo "=== building flight-sink (go build ./cmd/flight-sink) into $tmp"
	(cd "$repo" && go build -o "$tmp/flight-sink" ./cmd/flight-sink)
	export FLIGHT_SINK_BIN="$tmp/flight-sink"
fi

if ! "$PYTHON" -c "import pyspark, pyarrow, pandas, pytest, google.rpc.error_details_pb2, pyiceberg, polars" >/dev/null 2>&1; then
	echo "=== installing test dependencies into $PYTHON: $here/requirements-test.txt"
	"$PYTHON" -m pip install --quiet --disable-pip-version-check -r "$here/requirements-test.txt"
fi

# (Re)install the package in editable mode unless this checkout's copy is already the one imported.
installed="$("$PYTHON" -c 'import flight_sink, os; print(os.path.realpath(flight_sink.__file__))' 2>/dev/null || true)"
if [ "$installed" != "$(realpath "$here/src/flight_sink/__init__.py")" ]; then
	echo "=== pip install -e clients/pyspark"
	"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps -e "$here"
fi

echo "=== pytest clients/pyspark/tests ($("$PYTHON" -c 'import pyspark, pyarrow; print("pyspark", pyspark.__version__, "pyarrow", pyarrow.__version__)'))"
cd "$here"
set +e
"$PYTHON" -m pytest tests -p no:cacheprovider "$@"
code=$?
set -e
exit "$code"
