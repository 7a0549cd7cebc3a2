"""The README's "Next to deltalake" snippets: each runs (flight_sink against a real server,
deltalake on a temporary directory) and both do the same job; the line counts the README's table
states are the snippets' own, and no flight_sink snippet is longer than its deltalake one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Tuple

import pandas as pd
import pyarrow as pa
import pytest

import flight_sink as fs

README = Path(__file__).resolve().parents[1] / "README.md"
JOBS = {"write": "write a DataFrame once", "stream": "stream epochs, exactly once (a replayed epoch writes nothing)",
        "filter": "filtered read", "timetravel": "time travel"}


def snippets() -> Dict[Tuple[str, str], str]:
    text = README.read_text()
    found = re.findall(r"<!-- loc: (\w+) (flight_sink|deltalake) -->\n```python\n(.*?)\n```", text, re.S)
    return {(job, lib): code for job, lib, code in found}


def lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


def test_line_counts_as_stated_and_no_longer() -> None:
    got = snippets()
    text = README.read_text()
    for job, title in JOBS.items():
        ours, theirs = lines(got[(job, "flight_sink")]), lines(got[(job, "deltalake")])
        assert f"| {title} | {ours} | {theirs} |" in text, (job, ours, theirs)
        assert ours <= theirs, (job, ours, theirs)


def run(code: str, **names: object) -> dict:
    ns = dict(names)
    exec(compile(code, "<README snippet>", "exec"), ns)
    return ns


def test_snippets_do_the_same_job(server, table_name: str, tmp_path: Path) -> None:
    deltalake = pytest.importorskip(
        "deltalake", reason="deltalake is not installed: pip install -r clients/pyspark/requirements-test.txt (make pydeps)")
    del deltalake
    got = snippets()
    orders, events = f"{table_name}_orders", f"{table_name}_events"

    def ours(job: str) -> str:
        return (got[(job, "flight_sink")].replace("grpc://127.0.0.1:8815", server.uri)
                .replace('"orders"', f'"{orders}"').replace('"events"', f'"{events}"'))

    def theirs(job: str) -> str:
        return got[(job, "deltalake")].replace("/data/", f"{tmp_path}/")

    df = pd.DataFrame({"id": [1, 2, 3], "amount": [60.0, 10.0, 70.0], "country": ["NL", "NL", "DE"]})
    run(ours("write"), df=df)
    run(theirs("write"), df=df)
    client = fs.Client(server.uri)
    from deltalake import DeltaTable, write_deltalake

    def rows(t: pa.Table) -> list:
        return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "amount", "country"))))

    assert rows(client.read(orders)) == rows(DeltaTable(f"{tmp_path}/orders").to_pyarrow_table()) == sorted(
        zip(df["id"], df["amount"], df["country"]))

    # A second write, so that time travel has a past to go back to.
    more = pd.DataFrame({"id": [4], "amount": [99.0], "country": ["NL"]})
    client.write(orders, more)
    write_deltalake(f"{tmp_path}/orders", more, mode="append")
    ft, dt = run(ours("filter"))["t"], run(theirs("filter"))["t"]
    assert rows(ft) == rows(dt) == [(1, 60.0, "NL"), (4, 99.0, "NL")]
    ft, dt = run(ours("timetravel"))["t"], run(theirs("timetravel"))["t"]
    assert rows(ft) == rows(dt) == sorted(zip(df["id"], df["amount"], df["country"]))

    # Epochs 0, 1, then 1 again (a job restarted from its checkpoint), then 2.
    batch = lambda i: pa.table({"id": [i], "amount": [float(i)], "country": ["NL"]})  # noqa: E731
    epochs = [(0, batch(0)), (1, batch(1)), (1, batch(1)), (2, batch(2))]
    run(ours("stream"), epochs=epochs)
    run(theirs("stream"), epochs=epochs)
    want = [(i, float(i), "NL") for i in range(3)]
    assert rows(client.read(events)) == rows(DeltaTable(f"{tmp_path}/events").to_pyarrow_table()) == want
