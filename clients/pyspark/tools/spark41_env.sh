#!/usr/bin/env bash
# Creates (or reuses) the second Python environment the tests need: PySpark 4.1.x beside the
# main environment's 4.3.0. Two things need it: the Spark version matrix of the flight-sink data
# source (clients/pyspark) and the Iceberg read test, whose runtime jar exists only for Spark 4.1
# (docs/iceberg.md, "Spark"). It also fetches that jar with Maven.
#
# Prints the environment's python path on its last line. Idempotent: a second run installs
# nothing. Override the locations with FLIGHT_SINK_SPARK41_VENV and FLIGHT_SINK_JARS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FLIGHT_SINK_SPARK41_VENV:-$HOME/.cache/flight-sink/venv-pyspark-4.1.4}"
jars="${FLIGHT_SINK_JARS:-$HOME/.cache/flight-sink/jars}"
pyspark_version="4.1.4"
iceberg_runtime="org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"

if [ ! -x "$venv/bin/python" ]; then
	python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$pyspark_version')" 2>/dev/null; then
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pyspark==$pyspark_version" \
		"pyarrow>=14" "pandas>=2,<3" "pytest>=7" "protobuf>=4.21" "googleapis-common-protos>=1.56" >&2
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$here" >&2

mkdir -p "$jars"
jar="$jars/iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
if [ ! -s "$jar" ]; then
	mvn -q dependency:copy -Dartifact="$iceberg_runtime" -DoutputDirectory="$jars" >&2
fi
echo "$venv/bin/python"
