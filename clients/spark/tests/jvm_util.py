"""Helpers for the JVM connector's PySpark tests."""

from __future__ import annotations

from typing import List, Optional, Tuple

import flight_sink as fs


def epoch_commits(client: fs.Client, table: str, query_id: Optional[str] = None) -> List[Tuple[str, int]]:
    """(query_id, epoch_id) of every epoch commit in the table's history, oldest first."""
    out = []
    for h in reversed(client.history(table, limit=10000)):
        p = h.get("properties") or {}
        q = p.get("flight_sink.streaming.query_id")
        if q is not None and (query_id is None or q == query_id):
            out.append((q, int(p["flight_sink.streaming.epoch_id"])))
    return out


def table_ids(client: fs.Client, table: str) -> List[int]:
    return client.read(table, columns=["id"]).column("id").to_pylist()
