# flight-sink developer targets. `make run` starts the embedded server; `make test` runs every
# test against real parts (local disk, a versitygw S3 server the Go tests start themselves).

GO ?= go
# Where `go install` puts binaries: GOBIN, else the first GOPATH entry's bin.
GOBIN_DIR := $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
export PATH := $(GOBIN_DIR):$(PATH)

VERSITYGW_VERSION := v1.8.0
GOLANGCI_LINT_VERSION := v2.15.0
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
# Benchmark duration per benchmark: `make bench BENCHTIME=10s` for steadier numbers.
BENCHTIME ?= 1s
# Packages for test/bench/lint; override to narrow, e.g. `make test PKGS=./engine/...`.
PKGS ?= ./...

.PHONY: build run test test-python pydeps spark41 trino test-browser spark-jar test-spark bench lint lint-tools lint-python tools browser bench-peers bench-reads bench-freshness bench-partitions bench-spark bench-change-feed bench-change-feed-delta bench-spark-catalog bench-spark-partitions bench-servers rest-kit torture fuzz deploy-tools deploy-check image image-check

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/flight-sink ./cmd/flight-sink

# The embedded default: tables in the local directory ./flight-sink-data, Flight on loopback.
run: build
	bin/flight-sink serve

# The project virtualenv: every Python package a test needs (clients/pyspark/requirements-test.txt
# and the flight_sink package, editable), never the system Python. `make pydeps` (re)creates it
# when the requirements change; VENV=path puts it elsewhere.
VENV ?= $(CURDIR)/.venv
VENV_PYTHON := $(VENV)/bin/python
PY_TEST_REQS := clients/pyspark/requirements-test.txt
SYSTEM_PYTHON ?= python3

$(VENV)/.installed: $(PY_TEST_REQS) clients/pyspark/pyproject.toml
	@echo "=== Python test environment $(VENV) ($(PY_TEST_REQS))"
	@test -x $(VENV_PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV) || { \
		echo "cannot create a virtualenv with $(SYSTEM_PYTHON) -m venv; on Debian: apt-get install -y python3-venv"; exit 1; }
	$(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check -r $(PY_TEST_REQS)
	$(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps -e clients/pyspark
	@touch $@

pydeps: $(VENV)/.installed

# PySpark 4.1.x beside 4.3.0, with the Iceberg Spark runtime jar (Maven): the data source's Spark
# version matrix (tests/test_datasource.py) and the Iceberg read test (tests/test_iceberg.py).
# The script is idempotent; its last line is the environment's python, kept in $(VENV)/spark41.
spark41: pydeps
	@echo "=== PySpark 4.1 environment (clients/pyspark/tools/spark41_env.sh)"
	@out="$$(clients/pyspark/tools/spark41_env.sh)" && echo "$$out" | tail -n 1 > $(VENV)/spark41

# Trino 476 (its core server tarball and Iceberg plugin from Maven Central, about 540 MB, unpacked
# under ~/.cache/flight-sink/trino-server-476; it runs on the machine's JDK 24+) for the engine
# tests (tests/test_iceberg_engines.py), which start it once per session. The script is
# idempotent; without Trino those tests check the other engines and then skip, except under
# CI=true, where they fail.
trino:
	@echo "=== Trino (clients/pyspark/tools/trino_install.sh)"
	@out="$$(clients/pyspark/tools/trino_install.sh)" && echo "$$out" | tail -n 1

# The status page browser test needs chromium: installed here where apt-get exists and we are
# root; otherwise the test skips and says how to install it (`make browser` as root).
test-browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "=== chromium (the status page browser test drives it headless)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "=== chromium not installed and not installable here (needs apt-get as root): the status page browser test will skip"; fi

# `make test` installs everything the tests need first (versitygw, promtool and helm, the
# virtualenv, the PySpark 4.1 environment, Trino, chromium), then runs every test (Go, the Python client,
# the JVM Spark connector): a newcomer's run is CI's run. The Go tests that
# run Python find the virtualenv through FLIGHT_SINK_PYTHON; the Go tests start and stop their own
# S3 server (objstore/storetest, from TestMain); FLIGHT_SINK_REQUIRE_S3=1 turns "versitygw not
# found" into a failure instead of a skip.
test: tools deploy-tools pydeps spark41 trino test-browser
	$(GO) vet $(PKGS)
	FLIGHT_SINK_PYTHON=$(VENV_PYTHON) FLIGHT_SINK_REQUIRE_S3=1 $(GO) test $(PKGS) -count=1 -timeout 20m
	PYTHON=$(VENV_PYTHON) FLIGHT_SINK_SPARK41_PYTHON="$$(cat $(VENV)/spark41)" clients/pyspark/run_tests.sh
	$(MAKE) test-spark

# The Python client's tests alone (real PySpark and pyarrow against a server built from here), in
# the project virtualenv.
test-python: pydeps spark41 trino
	PYTHON=$(VENV_PYTHON) FLIGHT_SINK_SPARK41_PYTHON="$$(cat $(VENV)/spark41)" clients/pyspark/run_tests.sh

# The JVM Spark connector (clients/spark, Java 17 + Maven): `make spark-jar` builds the shaded jar
# clients/spark/target/flight-sink-spark-<version>.jar (tests skipped); the first run downloads the
# Maven dependencies into the local repository (~/.m2, or SPARK_MVN_REPO), later runs reuse it.
# `make test-spark` runs the JUnit suite (local Spark 4.1 against a server built from here), then
# the jar's PySpark tests (clients/spark/tests) with the virtualenv's PySpark (4.3) and its
# driver-kill, side-by-side, jar-content and catalog tests (not the example) on the PySpark 4.1
# environment.
SPARK_MVN_REPO ?=
SPARK_MVN := mvn -B -ntp $(if $(SPARK_MVN_REPO),-Dmaven.repo.local=$(SPARK_MVN_REPO))
SPARK_TEST_BIN := clients/spark/target/test-bin/flight-sink
spark-jar:
	cd clients/spark && $(SPARK_MVN) -q package -DskipTests

test-spark: pydeps spark41
	$(GO) build -o $(SPARK_TEST_BIN) ./cmd/flight-sink
	cd clients/spark && FLIGHT_SINK_BIN=$(CURDIR)/$(SPARK_TEST_BIN) $(SPARK_MVN) package
	FLIGHT_SINK_BIN=$(CURDIR)/$(SPARK_TEST_BIN) $(VENV_PYTHON) -m pytest clients/spark/tests -p no:cacheprovider
	@spark41="$$(cat $(VENV)/spark41)"; echo "=== clients/spark/tests on PySpark 4.1 ($$spark41)"; \
		FLIGHT_SINK_BIN=$(CURDIR)/$(SPARK_TEST_BIN) "$$spark41" -m pytest clients/spark/tests/test_jvm_datasource.py clients/spark/tests/test_catalog.py -p no:cacheprovider

# Go micro-benchmarks, then the end-to-end Flight benchmark (flight-sink bench).
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) $(PKGS)
	bin/flight-sink bench

# golangci-lint (errcheck, govet, ineffassign, staticcheck, unused, gofmt; .golangci.yml), installed
# into GOBIN at the pinned version when missing; then the Python client package: ruff and
# mypy --strict (their settings in clients/pyspark/pyproject.toml, their versions pinned in
# clients/pyspark/requirements-test.txt, installed into the virtualenv by pydeps).
lint: lint-tools lint-python
	golangci-lint run ./...

lint-python: pydeps
	cd clients/pyspark && $(VENV_PYTHON) -m ruff check src/flight_sink
	cd clients/pyspark && $(VENV_PYTHON) -m mypy

lint-tools:
	@command -v golangci-lint >/dev/null 2>&1 && golangci-lint version 2>/dev/null | grep -q "version $(GOLANGCI_LINT_VERSION:v%=%)" || \
		{ echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(GOBIN_DIR)"; \
		  $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); }

# versitygw is the real S3 server the tests run against (objstore/storetest starts one per test
# binary): S3 behaviour is tested against a server, never a mock. Without it the S3 cases skip,
# except in CI (CI=true or FLIGHT_SINK_REQUIRE_S3=1), where its absence fails the run.
tools:
	@command -v versitygw >/dev/null 2>&1 || test -x "$(GOBIN_DIR)/versitygw" || \
		{ echo "installing versitygw $(VERSITYGW_VERSION) into $(GOBIN_DIR)"; \
		  $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }

# deploy/: promtool (alert rules) and helm (the chart) for the deploy tests in cmd/flight-sink
# (TestAlertRules, TestHelmChart), which skip without them except in CI. Installed once into
# GOBIN from the Go module proxy; the first build takes minutes, later runs find the binaries.
PROMTOOL_VERSION := v0.316.0
HELM_VERSION := v4.3.2
deploy-tools:
	@command -v promtool >/dev/null 2>&1 || test -x "$(GOBIN_DIR)/promtool" || \
		{ echo "installing promtool $(PROMTOOL_VERSION) into $(GOBIN_DIR)"; \
		  $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION); }
	@command -v helm >/dev/null 2>&1 || test -x "$(GOBIN_DIR)/helm" || \
		{ echo "installing helm $(HELM_VERSION) into $(GOBIN_DIR)"; \
		  $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION); }

# The deploy checks alone: promtool check/test rules, helm template parsed against the serve
# flags, the systemd unit, the series the rules and the dashboard read.
deploy-check: deploy-tools
	cd deploy/prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml
	$(GO) test ./cmd/flight-sink -run 'TestHelmChart|TestSystemdUnit|TestDeploySeriesAreExported|TestAlertRules' -count=1

# The container image, built without a daemon (deploy/image): an OCI layout tar that docker
# load, podman load and skopeo take. IMAGE_ARCH picks the architecture.
IMAGE_ARCH ?= amd64
image:
	$(GO) run ./deploy/image -o bin/flight-sink-image.tar -arch $(IMAGE_ARCH) -version $(VERSION)

# Builds the image and runs its binary from the image's own filesystem (TestImageRunsItsBinary).
image-check:
	FLIGHT_SINK_IMAGE_TEST=1 $(GO) test ./deploy/image -run TestImageRunsItsBinary -count=1 -timeout 20m

# The status page browser test (flightsvc/internal/statuspage) drives Debian's chromium package,
# headless. Without it the test skips, except in CI (CI=true;
# .ci/run installs the browser first) or with FLIGHT_SINK_REQUIRE_BROWSER=1, where `make test`
# fails and says how to install it. `make browser` installs it (Debian, as root).
ifeq ($(CI),true)
export FLIGHT_SINK_REQUIRE_BROWSER := 1
endif
CHROMIUM_INSTALL := apt-get update && apt-get install -y chromium
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium: $(CHROMIUM_INSTALL)"; $(CHROMIUM_INSTALL); }

# bench-peers: flight-sink against pyarrow, pylance and deltalake (bench/, docs/benchmarks.md).
# Installs bench/requirements.txt into a virtualenv, builds the servers, runs both workloads and
# rewrites docs/benchmarks.md and docs/benchmarks/*.png. BENCH_PEERS_ARGS="--quick --no-doc" for a
# smoke test; `python3 bench/peers.py --help` lists the knobs.
BENCH_PYTHON ?= python3
BENCH_PEERS_ARGS ?=
bench-peers:
	GO=$(GO) $(BENCH_PYTHON) bench/peers.py $(BENCH_PEERS_ARGS)

# bench-reads: reading the large-batch table with flight_sink.Client.read (the data files directly,
# one DoGet, and GetFlightInfo's endpoints' DoGets in parallel) against pylance, PyIceberg (through
# the server's REST catalog) and pyarrow.parquet on the same rows, in interleaved rounds, wall and
# CPU seconds (client and server) (bench/read_bench.py --help).
BENCH_READS_ARGS ?=
bench-reads:
	$(BENCH_PYTHON) bench/read_bench.py --go $(GO) $(BENCH_READS_ARGS)

# bench-freshness: ack -> visible in PyIceberg through the REST catalog, 1,000-row epochs at 10/s
# for 2 minutes on each route (direct, MemWAL); commit -> visible after 10 each of a `delete`
# action, a `compact` action, a `flight-sink compact` and a `flight-sink config set` run as other
# processes on the same root; and the direct route's back-to-back epochs/s with Iceberg publishing
# on against off in alternating rounds (bench/freshness_bench.py --help).
BENCH_FRESHNESS_ARGS ?=
bench-freshness: pydeps build
	$(VENV_PYTHON) bench/freshness_bench.py --bin bin/flight-sink $(BENCH_FRESHNESS_ARGS)

# bench-partitions: a 30-day table (10 M rows, one epoch a day) partitioned by day(ts) against the
# same rows unpartitioned: one day read with DoGet (GetFlightInfo's total_bytes), PyIceberg
# (files planned) and DuckDB through the REST catalog, as written and compacted; 1,000-row epochs
# over 24 hourly partitions against unpartitioned (epochs/s); a 1 M-row epoch over 1,000
# partitions (the server's peak RSS) (bench/partitions_bench.py --help).
BENCH_PARTITIONS_ARGS ?=
bench-partitions: pydeps build
	$(VENV_PYTHON) bench/partitions_bench.py --bin bin/flight-sink $(BENCH_PARTITIONS_ARGS)

# bench-spark: Spark Structured Streaming sinks side by side on PySpark 4.1 (bench/spark_sinks.py):
# the JVM connector (a plain table and a MemWAL table) against Iceberg, Delta and format("parquet")
# in one local[2] session on the same input, interleaved repetitions; batches/s (1,000-row
# batches), rows/s (1 M-row batches) and batch start -> rows readable. Builds the server and the
# jar, fetches the Iceberg and Delta jars from Maven Central (bench/spark_jars.sh), starts and
# stops the server itself. BENCH_SPARK_ARGS="--quick" for a smoke run (a few minutes);
# "--sinks jvm,iceberg,fb,noop" picks sinks (fb: foreachBatch(FlightSink); noop: Spark's
# format("noop"), the floor of any DataSource V2 sink); see --help.
BENCH_SPARK_ARGS ?=
bench-spark: build spark-jar spark41
	"$$(cat $(VENV)/spark41)" bench/spark_sinks.py --server-bin bin/flight-sink $(BENCH_SPARK_ARGS)

# bench-change-feed: latency from an acknowledged upsert epoch to its change reaching a Spark
# readChangeFeed stream (trigger 100 ms, foreachBatch on the driver) and to the Python client's
# follow_changes (poll 100 ms), p50/p99, on a plain keyed
# table (direct) and a keyed MemWAL table (the change lands at the fold) (bench/change_feed_latency.py
# --help). Builds the server and the jar; BENCH_CHANGE_FEED_ARGS="--epochs 20" for a short run.
BENCH_CHANGE_FEED_ARGS ?=
bench-change-feed: pydeps build spark-jar
	$(VENV_PYTHON) bench/change_feed_latency.py --bin bin/flight-sink $(BENCH_CHANGE_FEED_ARGS)

# bench-change-feed-delta: the same on PySpark 4.1.4 (delta-spark has no build for Spark 4.3) with
# Delta's readChangeFeed on the same upsert workload (MERGE INTO) in the same session; fetches the
# Delta jars (bench/spark_jars.sh).
bench-change-feed-delta: build spark-jar spark41
	"$$(cat $(VENV)/spark41)" bench/change_feed_latency.py --bin bin/flight-sink --routes direct,memwal,delta \
		--delta-jars "$$(bench/spark_jars.sh | tail -1 | tr , '\n' | grep delta | paste -sd,)" $(BENCH_CHANGE_FEED_ARGS)

# bench-spark-catalog: Spark SQL through catalogs on PySpark 4.1 (bench/spark_catalog.py): INSERT
# INTO ... SELECT of 10 M rows into a table partitioned by days(ts), then SELECT count(*) of one
# day, through flight-sink's catalog and Iceberg's Hadoop catalog in one local[2] session,
# interleaved repetitions. Builds the server and the jar, fetches the Iceberg jar
# (bench/spark_jars.sh), starts and stops the server itself. BENCH_SPARK_CATALOG_ARGS="--rows
# 1000000 --reps 1" for a shorter run.
BENCH_SPARK_CATALOG_ARGS ?=
bench-spark-catalog: build spark-jar spark41
	"$$(cat $(VENV)/spark41)" bench/spark_catalog.py --server-bin bin/flight-sink $(BENCH_SPARK_CATALOG_ARGS)

# bench-spark-partitions: streaming into a day-partitioned table on PySpark 4.1
# (bench/spark_partitions.py): the JVM connector with the option partitionBy "days(ts)" against
# Spark's Iceberg sink (Hadoop catalog, fanout writer) into the same spec, small micro-batches
# (200 x 1,000 rows) and large (5 x 1 M rows), each spanning 24 days; seconds, rows/s and
# micro-batches/s side by side. Builds the server and the jar, fetches the Iceberg jar
# (bench/spark_jars.sh), starts and stops the server itself. BENCH_SPARK_PARTITIONS_ARGS="--small-batches
# 20 --large-batches 1" for a shorter run.
BENCH_SPARK_PARTITIONS_ARGS ?=
bench-spark-partitions: build spark-jar spark41
	"$$(cat $(VENV)/spark41)" bench/spark_partitions.py --server-bin bin/flight-sink $(BENCH_SPARK_PARTITIONS_ARGS)

# bench-servers: `flight-sink bench --only memwal-servers` (docs/benchmarks.md) on a versitygw it
# starts on 127.0.0.1:$(BENCH_S3_PORT) over a fresh temporary directory and stops (and removes)
# afterwards: 16 queries over 2 servers, 20 ms added to every store call, the direct route against
# MemWAL. BENCH_SERVERS_ARGS="--route-duration 10s --queries 8" for other sizes (bench --help).
BENCH_S3_PORT ?= 17070
BENCH_SERVERS_ARGS ?=
bench-servers: tools build
	@dir=$$(mktemp -d -t flight-sink-bench-s3-XXXXXX); mkdir -p $$dir/data/bench; \
	key=$$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n'); \
	ROOT_ACCESS_KEY=flightsink ROOT_SECRET_KEY=$$key versitygw --port 127.0.0.1:$(BENCH_S3_PORT) --quiet posix $$dir/data >$$dir/versitygw.log 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; rm -rf $$dir' EXIT; \
	for i in $$(seq 150); do curl -s -o /dev/null http://127.0.0.1:$(BENCH_S3_PORT)/ && break; \
		kill -0 $$pid 2>/dev/null || { cat $$dir/versitygw.log; exit 1; }; sleep 0.1; done; \
	AWS_ACCESS_KEY_ID=flightsink AWS_SECRET_ACCESS_KEY=$$key AWS_SESSION_TOKEN= AWS_REGION=us-east-1 \
		bin/flight-sink bench --only memwal-servers --store s3://bench/memwal-servers \
		--s3-endpoint http://127.0.0.1:$(BENCH_S3_PORT) --s3-path-style $(BENCH_SERVERS_ARGS)

# rest-kit: Iceberg's REST compatibility kit (iceberg/restkit: the kit's JUnit tests from the
# iceberg-open-api tests jar, Maven Central) against the REST catalog of a server it starts on an
# empty root. The kit mostly writes, which a read-only catalog refuses; run.py lists what passed,
# what the client refused (a write endpoint the catalog does not list) and fails on anything else
# (docs/iceberg.md has a run). Not part of `make test`.
rest-kit: build
	$(SYSTEM_PYTHON) iceberg/restkit/run.py --bin bin/flight-sink

# Reliability: kill -9 torture, several servers, fault-injected storage, fuzzing.
# `make test` already runs the short versions (go test ./... includes ./reliability: 10 kill
# cycles, 6 kills of three servers, one 1%-fault round per store, one kill of two MemWAL servers;
# and ./reliability/model: its fixed and regression seeds) and every fuzz seed
# corpus.
TORTURE_CYCLES ?= 100
TORTURE_MULTI_KILLS ?= 30
TORTURE_FAULT_ROUNDS ?= 10
TORTURE_MEMWAL_KILLS ?= 10
# The model-based test (reliability/model) draws new seeds for this long; a seed it prints replays
# with FLIGHT_SINK_MODEL_SEED=<seed> go test ./reliability/model -run 'TestModel$$'.
TORTURE_TIME ?= 10m
# Fuzzing time per target: `make fuzz FUZZTIME=5m` for a longer hunt.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	engine:FuzzDecodeManifest engine:FuzzDecodeManifestHeader engine:FuzzDecodeManifestSchema \
	engine:FuzzDecodeTransaction engine:FuzzDecodeDeletionFile engine:FuzzRowSetBinary \
	engine/arrowschema:FuzzSchemaDataAgreement engine/partition:FuzzParseSpec \
	memwal/wal:FuzzDecodeWALEntry memwal/wal:FuzzDecodeWALEntryMetadata memwal:FuzzDecodeShardManifest \
	memwal/wal:FuzzDecodeWALHeader memwal/wal:FuzzSegmentRecords memwal:FuzzReadGeneration \
	flightsvc:FuzzParsePutCommand flightsvc:FuzzDecodeTicket flightsvc:FuzzDoPut flightsvc:FuzzDoGet flightsvc:FuzzCalls flightsvc:FuzzIcebergREST

# The full runs. Each test logs its seed and a FIGURES line; FLIGHT_SINK_TORTURE_SEED and
# FLIGHT_SINK_FAULT_SEED replay a schedule.
torture: tools
	FLIGHT_SINK_REQUIRE_S3=1 FLIGHT_SINK_TORTURE_CYCLES=$(TORTURE_CYCLES) \
	FLIGHT_SINK_MULTI_KILLS=$(TORTURE_MULTI_KILLS) FLIGHT_SINK_FAULT_ROUNDS=$(TORTURE_FAULT_ROUNDS) \
	FLIGHT_SINK_MEMWAL_KILLS=$(TORTURE_MEMWAL_KILLS) \
		$(GO) test ./reliability -count=1 -v -timeout 120m \
		-run '^(TestTorture|TestThreeServersOneTable|TestEngineUnderStoreFaults|TestMemWALUnderStoreFaults|TestMemWALServerKilled)$$'
	FLIGHT_SINK_PYTHON=$(VENV_PYTHON) FLIGHT_SINK_MODEL_TIME=$(TORTURE_TIME) \
		$(GO) test ./reliability/model -count=1 -v -timeout 0 -run '^TestModel$$'

# Each fuzz target for FUZZTIME; a failing input lands in <pkg>/testdata/fuzz/<Target>/ (commit it
# with the fix: plain `go test` then replays it). Runs every target, then fails if any found one.
fuzz: tools
	@failed=""; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test ./$$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s || failed="$$failed $$pkg:$$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz targets that found a failing input:$$failed"; exit 1; fi
