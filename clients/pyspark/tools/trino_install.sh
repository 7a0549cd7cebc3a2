#!/usr/bin/env bash
# Installs (or reuses) the Trino server the engine tests read the Iceberg catalog with: Trino's
# core server tarball and its Iceberg connector plugin from Maven Central (the full server
# tarball is four times larger and holds every connector), unpacked into one directory. Trino
# 476 needs Java 24 or newer: the first JDK of /usr/lib/jvm that is (or $FLIGHT_SINK_TRINO_JAVA_HOME)
# is written to the directory's java-home file, where the tests read it.
#
# Prints the installation directory on its last line. Idempotent: a second run downloads nothing.
# Override the location with FLIGHT_SINK_TRINO.
set -euo pipefail

version="476"
dir="${FLIGHT_SINK_TRINO:-$HOME/.cache/flight-sink/trino-server-$version}"

java_home="${FLIGHT_SINK_TRINO_JAVA_HOME:-}"
if [ -z "$java_home" ]; then
	for j in /usr/lib/jvm/*; do
		v="$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$j/release" 2>/dev/null || true)"
		if [ -n "$v" ] && [ "$v" -ge 24 ] && [ -x "$j/bin/java" ]; then
			java_home="$j"
			break
		fi
	done
fi
if [ -z "$java_home" ]; then
	echo "no JDK 24 or newer in /usr/lib/jvm for Trino $version (set FLIGHT_SINK_TRINO_JAVA_HOME)" >&2
	exit 1
fi

if [ ! -x "$dir/bin/launcher" ] || [ ! -d "$dir/plugin/iceberg" ]; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	mvn -q -ntp dependency:copy -Dartifact="io.trino:trino-server-core:$version:tar.gz" -DoutputDirectory="$tmp" >&2
	mvn -q -ntp dependency:copy -Dartifact="io.trino:trino-iceberg:$version:zip" -DoutputDirectory="$tmp" >&2
	tar -xzf "$tmp/trino-server-core-$version.tar.gz" -C "$tmp"
	unzip -q "$tmp/trino-iceberg-$version.zip" -d "$tmp/plugin"
	rm -rf "$tmp/trino-server-core-$version/plugin/iceberg"
	mv "$tmp/plugin/trino-iceberg-$version" "$tmp/trino-server-core-$version/plugin/iceberg"
	rm -rf "$dir"
	mkdir -p "$(dirname "$dir")"
	mv "$tmp/trino-server-core-$version" "$dir"
fi
echo "$java_home" > "$dir/java-home"
echo "$dir"
