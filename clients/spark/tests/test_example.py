"""examples/spark_jvm_connector.py runs every step against a real server."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT


def test_example_runs(jar, server):
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "spark_jvm_connector.py"), "--uri", server.uri,
         "--jar", jar, "--prefix", "example"],
        capture_output=True, timeout=600,
    )
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text + out.stderr.decode(errors="replace")[-4000:]
    print(text)
    assert "1. streaming append:" in text
    assert "'Overwrite'" in text.split("2. complete mode:")[1].splitlines()[0]
    assert "'Upsert'" in text.split("3. update mode")[1].splitlines()[0]
    assert "4. two batch appends: 2000 rows" in text
    assert "5. pushed-down read: [991, 991, 994, 994, 997, 997]" in text
    assert "version" in text and "1000 rows; now: 2000 rows" in text
    assert "after overwrite: 10 rows" in text
