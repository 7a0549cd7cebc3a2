"""The jar's Spark SQL catalog (io.flightsink.spark.FlightSinkCatalog) driven from PySpark, with
only the jar on spark.jars, against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from sparkutil import check_driver_sigkill

TESTS_DIR = Path(__file__).resolve().parent


def test_sql_life_of_a_keyed_table(jar, server):
    """CREATE TABLE (partitioned where the server takes partition specs), INSERT INTO, SELECT with
    a pushed filter in the plan, DELETE FROM one day, VERSION AS OF, TIMESTAMP AS OF, ALTER TABLE
    ADD COLUMNS, SHOW TABLES, DESCRIBE TABLE EXTENDED, readStream.table and DROP TABLE."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, str(TESTS_DIR / "catalog_sql.py"), jar, server.uri], capture_output=True, timeout=600, env=env, check=False
    )
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text + out.stderr.decode(errors="replace")[-4000:]
    got = json.loads(text.strip().splitlines()[-1])
    print(json.dumps(got, indent=1))

    assert got["all"] == [1, 2, 3, 4]
    assert got["day"] == [2, 3]
    assert '"op":">="' in got["day_plan"] and '"column":"ts"' in got["day_plan"], got["day_plan"]
    assert got["after_delete"] == [1, 4]
    assert got["version_as_of"] == [1, 2, 3]
    assert got["timestamp_as_of"] == [1, 2, 3]
    assert got["notes"] == [[1, None], [4, None], [5, "new"]]
    assert "events" in got["tables"]
    d = got["describe"]
    props = d["Table Properties"]
    assert "primary_key=id" in props, props
    assert f"version={got['stats']['version']}" in props, props
    assert "rows=3" in props, props
    assert d["note"] == "string"
    if got["partitioned"]:
        assert d["Part 0"] == "days(ts)" and d["Part 1"] == "bucket(4, id)", d
    assert got["stream_read"] == [1, 4, 5]
    assert "events" not in got["tables_after_drop"]


def test_to_table_survives_driver_sigkill(jar, server, tmp_path):
    """writeStream.toTable("fs.default.t") (creating the table on the first run) with the driver
    SIGKILLed twice mid-stream and restarted from its checkpoint: every row exactly once, every
    epoch whole or absent, one query id."""
    check_driver_sigkill(server.uri, "catalog_driver_kill", tmp_path / "ckpt", jar=jar, catalog=True)
