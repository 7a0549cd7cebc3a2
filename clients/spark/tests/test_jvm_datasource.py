"""The JVM connector (the shaded jar on spark.jars) driven from PySpark, against a real server."""

from __future__ import annotations

import subprocess
import sys

import pytest

pyspark = pytest.importorskip("pyspark")

from sparkutil import check_driver_sigkill


def test_streaming_write_survives_driver_sigkill(jar, server, tmp_path):
    """The driver (Python and JVM) is SIGKILLed twice mid-stream and restarted from its
    checkpoint: every row lands exactly once, every epoch whole or not at all, all under the
    query id that survives the restarts."""
    check_driver_sigkill(server.uri, "jvm_driver_kill", tmp_path / "ckpt", jar=jar)


def test_jvm_and_python_sources_side_by_side(jar, server, tmp_path):
    """Which flight-sink Spark picks when the jar is on spark.jars: the jar's (its
    DataSourceRegister); registering the Python data source under the same name is then refused
    (DATA_SOURCE_ALREADY_EXISTS) and format("flight-sink") stays the JVM connector. The class
    name io.flightsink.spark.FlightSinkDataSource always selects the JVM connector. Each write
    task gets 500 rows: past 256 rows the writer sizes its batch with Spark's
    ArrowWriter.sizeInBytes, whose JVM signature differs between Spark 4.1.1 and 4.1.4. A string
    column with nulls goes through the connector's own string writer (a subclass of Spark's
    ArrowFieldWriter) on this Spark version."""
    script = tmp_path / "both.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "from flight_sink.spark import register\n"
        "jar, uri = sys.argv[1:3]\n"
        "spark = (SparkSession.builder.master('local[2]').config('spark.jars', jar)\n"
        "         .config('spark.ui.enabled', 'false').getOrCreate())\n"
        "spark.sparkContext.setLogLevel('ERROR')\n"
        "df = spark.range(0, 1000, 1, 2).selectExpr('id', 'id % 7 AS k',\n"
        "                                           \"IF(id % 3 = 0, NULL, CONCAT('s', CAST(id AS STRING))) AS s\")\n"
        "df.write.format('flight-sink').option('uri', uri).option('table', 'side_jvm').mode('append').save()\n"
        "back = spark.read.format('flight-sink').option('uri', uri).option('table', 'side_jvm').load()\n"
        "n = back.where('k = 3').count()\n"
        "print('jvm-only', n)\n"
        "print('strings same', sorted(back.collect()) == sorted(df.collect()))\n"
        "try:\n"
        "    register(spark)\n"
        "    print('register ok')\n"
        "except Exception as e:\n"
        "    print('register refused', str(e).splitlines()[0][:300])\n"
        "n = spark.read.format('flight-sink').option('uri', uri).option('table', 'side_jvm').load().count()\n"
        "print('short-name after register', n)\n"
        "cls = 'io.flightsink.spark.FlightSinkDataSource'\n"
        "n = spark.read.format(cls).option('uri', uri).option('table', 'side_jvm').load().count()\n"
        "print('class-name', n)\n"
        "spark.stop()\n"
    )
    out = subprocess.run([sys.executable, str(script), jar, server.uri], capture_output=True, timeout=600)
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text + out.stderr.decode(errors="replace")[-4000:]
    print(text)
    assert "jvm-only 143" in text  # ids 3, 10, ..., 997
    assert "strings same True" in text  # the string column (nulls included) as written
    assert "class-name 1000" in text
    assert "register refused" in text and "DATA_SOURCE_ALREADY_EXISTS" in text
    assert "short-name after register 1000" in text


def test_jar_bundles_only_relocated_classes(jar):
    """The jar's classes are the connector's, Arrow Flight's client (org.apache.arrow.flight) and
    its transport relocated under io.flightsink.spark.shaded: nothing that could shadow Spark's own
    Netty, gRPC, protobuf, Guava or Arrow."""
    import zipfile

    with zipfile.ZipFile(jar) as z:
        classes = [n for n in z.namelist() if n.endswith(".class")]
        services = [n for n in z.namelist() if n.startswith("META-INF/services/") and not n.endswith("/")]
        registered = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    stray = [c for c in classes if not c.startswith(("io/flightsink/spark/", "org/apache/arrow/flight/"))]
    assert not stray, f"{len(stray)} classes outside the connector and the relocated packages: {stray[:10]}"
    assert any(c.startswith("io/flightsink/spark/shaded/io/grpc/") for c in classes)
    assert any(c.startswith("io/flightsink/spark/shaded/io/netty/") for c in classes)
    assert not any(c.startswith("org/apache/arrow/vector/") for c in classes), "Spark provides Arrow"
    assert registered.strip() == "io.flightsink.spark.FlightSinkDataSource"
    assert all(s.startswith(("META-INF/services/io.flightsink.spark.shaded.",
                             "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"))
               for s in services), services
