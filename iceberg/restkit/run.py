#!/usr/bin/env python3
"""Runs Iceberg's REST compatibility kit (the Maven project beside this file) against the REST
catalog of a flight-sink server it starts on an empty temporary root, and sorts the kit's tests:

- passed;
- refused by the client: the test writes (creates a namespace or a table, drops, renames, sets
  properties, views) and Iceberg's client refuses the call itself because the catalog's
  ``GET /v1/config`` does not list that endpoint (``Server does not support endpoint``). A
  read-only catalog refuses these by design;
- skipped: the kit's own assumptions (nested namespaces, names with dots) are off;
- anything else: a deviation from the spec or from the reference catalog. Exits 1 when there is
  one.

usage: run.py --bin bin/flight-sink [--keep-reports DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
TOKEN = "rest-kit"
REFUSED = re.compile(r"Server does not support endpoint:? ([A-Z]+ /[^\s\"']+)")


def start_server(binary: str, root: Path, log: Path) -> Tuple[subprocess.Popen, str]:
    """A server on loopback ports with the given root; returns it and its catalog URI."""
    out = open(log, "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--root", str(root), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
         "--auth-token", TOKEN, "--maintenance", "off"],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"http endpoints serving.*?addr=(\S+)", log.read_text(errors="replace"))
        if m:
            return proc, f"http://{m.group(1).strip(chr(34))}/iceberg"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"the server did not start:\n{log.read_text(errors='replace')}")


def classify(reports: Path) -> Dict[str, List[Tuple[str, str]]]:
    """{"passed" | "refused" | "skipped" | "other": [(test, detail)]} from surefire's reports."""
    out: Dict[str, List[Tuple[str, str]]] = collections.defaultdict(list)
    for f in sorted(reports.glob("TEST-*.xml")):
        suite = ET.parse(f).getroot().get("name", f.stem).rsplit(".", 1)[-1]
        for tc in ET.parse(f).getroot().iter("testcase"):
            name = f"{suite}.{tc.get('name')}"
            bad = [k for k in tc if k.tag in ("failure", "error", "skipped")]
            if not bad:
                out["passed"].append((name, ""))
                continue
            k = bad[0]
            text = (k.get("message") or "") + "\n" + (k.text or "")
            refused = REFUSED.search(text)
            if k.tag == "skipped":
                out["skipped"].append((name, (k.get("message") or "").split("\n")[0]))
            elif refused:
                out["refused"].append((name, refused.group(1)))
            else:
                out["other"].append((name, " ".join((k.get("message") or k.text or "").split())[:600]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the flight-sink binary")
    ap.add_argument("--keep-reports", help="copy surefire's reports here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="flight-sink-rest-kit-"))
    try:
        proc, uri = start_server(args.bin, tmp / "root", tmp / "server.log")
        try:
            print(f"=== Iceberg REST compatibility kit against {uri} (mvn test in {HERE})", flush=True)
            started = time.monotonic()
            mvn = subprocess.run(
                ["mvn", "-B", "-ntp", "test", f"-Duri={uri}", f"-Dtoken={TOKEN}"],
                cwd=HERE, stdout=open(tmp / "mvn.log", "wb"), stderr=subprocess.STDOUT,
            )
            elapsed = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        reports = HERE / "target" / "surefire-reports"
        if mvn.returncode != 0 or not list(reports.glob("TEST-*.xml")):
            print((tmp / "mvn.log").read_text(errors="replace")[-5000:])
            return 1
        if args.keep_reports:
            shutil.copytree(reports, args.keep_reports, dirs_exist_ok=True)
        res = classify(reports)
        total = sum(len(v) for v in res.values())
        print(f"{total} tests in {elapsed:.0f} s: {len(res['passed'])} passed, {len(res['refused'])} refused by the "
              f"client (a write endpoint the catalog does not list), {len(res['skipped'])} skipped by the kit's "
              f"assumptions, {len(res['other'])} other failures")
        for name, _ in res["passed"]:
            print(f"  passed   {name}")
        for endpoint, n in collections.Counter(d for _, d in res["refused"]).most_common():
            print(f"  refused  {n:3d} tests: {endpoint}")
        for name, detail in res["other"]:
            print(f"  FAILED   {name}: {detail}")
        return 1 if res["other"] else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.environ.pop("CATALOG_URI", None)  # the kit reads CATALOG_* variables as catalog properties
    sys.exit(main())
