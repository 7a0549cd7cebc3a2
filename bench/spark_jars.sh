#!/usr/bin/env bash
# Fetches the peer sinks of bench/spark_sinks.py from Maven Central into the jar cache
# (default ~/.cache/flight-sink/jars, or $FLIGHT_SINK_JARS) and prints their paths, comma-separated,
# on its last line (a spark.jars value). Idempotent: a jar already present is not fetched again.
#
# delta-spark must match the Spark release it runs on, and its artifact name does not say which:
# 4.3.1 is built against Spark 4.1.0 and streams into Delta on PySpark 4.1.4; 4.4.0 is built
# against Spark 4.2.0 and its streaming write fails on 4.1.4 (NoSuchMethodError:
# DataSourceUtils.mergeWriteOptionsIntoHadoopConf). The Iceberg runtime's artifact names its
# Spark line (4.1).
set -euo pipefail

jars="${FLIGHT_SINK_JARS:-$HOME/.cache/flight-sink/jars}"
central="${MAVEN_CENTRAL:-https://repo1.maven.org/maven2}"
artifacts=(
	"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
	"io.delta:delta-spark_2.13:4.3.1"
	"io.delta:delta-storage:4.3.1"
)

mkdir -p "$jars"
paths=()
for gav in "${artifacts[@]}"; do
	IFS=: read -r group artifact version <<<"$gav"
	name="$artifact-$version.jar"
	out="$jars/$name"
	if [ ! -s "$out" ]; then
		url="$central/${group//.//}/$artifact/$version/$name"
		echo "fetching $url" >&2
		curl -fsSL --retry 3 -o "$out.part" "$url"
		curl -fsSL --retry 3 "$url.sha1" | awk '{print $1 "  '"$out.part"'"}' | sha1sum -c --quiet -
		mv "$out.part" "$out"
	fi
	paths+=("$out")
done
(IFS=,; echo "${paths[*]}")
