"""Reads a flight-sink table's Iceberg metadata with real readers and checks it against the rows
flight-sink holds for each version.

usage: read_iceberg.py TABLE_LOCATION EXPECTED_JSON

EXPECTED_JSON: {"versions": {"<version>": [row, ...]}, "latest": <version>}. The table's newest
metadata file is found through version-hint.text. Every retained snapshot must mirror (summary
"flight-sink.version") a version in "versions" and read (PyIceberg, time travel) exactly its rows;
the current snapshot must also read them through Polars' scan_iceberg. S3 settings come from
AWS_ENDPOINT_URL_S3 / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION when the location is
s3://. Prints one JSON object: {"ok": bool, "errors": [...], "snapshots": n}.
"""
import datetime
import decimal
import json
import os
import re
import sys

import polars as pl
from pyiceberg.table import StaticTable


def _decimal_text(d):
    d = d.normalize()
    return format(d, "f") if d == d.to_integral_value() or d.as_tuple().exponent < 0 else str(d)


def _value(v):
    # Go's JSON writes 1.0 as 1: compare numbers by value; timestamps, dates and decimals as
    # arrow-go's JSON writes them (RFC 3339 in UTC, ISO dates, decimal text without trailing zeros).
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        text = v.strftime("%Y-%m-%dT%H:%M:%S")
        if v.microsecond:
            text += (".%06d" % v.microsecond).rstrip("0")
        return text + "Z"
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return _decimal_text(v)
    if isinstance(v, str) and _NUMBER.fullmatch(v):
        return _decimal_text(decimal.Decimal(v))
    return v


_NUMBER = re.compile(r"-?[0-9]+\.[0-9]+")


def norm(rows):
    return sorted(json.dumps({k: _value(v) for k, v in r.items()}, sort_keys=True, default=str) for r in rows)


def main():
    loc, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path) as f:
        expected = json.load(f)
    props = {}
    if loc.startswith("s3://"):
        props = {
            "s3.endpoint": os.environ["AWS_ENDPOINT_URL_S3"],
            "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
            "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
            "s3.force-virtual-addressing": "false",
        }
    fileio = None
    hint = loc + "/metadata/version-hint.text"
    from pyiceberg.io import load_file_io

    fileio = load_file_io(props, hint)
    with fileio.new_input(hint).open() as f:
        n = int(f.read().decode().strip())
    meta = f"{loc}/metadata/v{n}.metadata.json"
    tbl = StaticTable.from_metadata(meta, properties=props)
    errors = []
    versions = expected["versions"]
    snaps = tbl.metadata.snapshots
    for snap in snaps:
        v = snap.summary.additional_properties.get("flight-sink.version") if snap.summary else None
        if v is None:
            errors.append(f"snapshot {snap.snapshot_id} has no flight-sink.version")
            continue
        if v not in versions:
            errors.append(f"snapshot {snap.snapshot_id} mirrors version {v}, which flight-sink no longer has")
            continue
        got = tbl.scan(snapshot_id=snap.snapshot_id).to_arrow().to_pylist()
        if norm(got) != norm(versions[v]):
            errors.append(f"snapshot {snap.snapshot_id} (version {v}, {snap.summary.operation}): pyiceberg read {len(got)} rows, version has {len(versions[v])}: {got[:5]} vs {versions[v][:5]}")
    cur = tbl.current_snapshot()
    latest = str(expected["latest"])
    published = tbl.metadata.properties.get("flight-sink.version")
    if published != latest:
        errors.append(f"metadata records version {published}, want {latest}")
    want = versions[latest]
    if cur is None:
        if want:
            errors.append(f"no current snapshot, version {latest} has {len(want)} rows")
    else:
        got = pl.scan_iceberg(tbl).collect().to_dicts()
        if norm(got) != norm(want):
            errors.append(f"polars read {len(got)} rows of the current snapshot, version {latest} has {len(want)}")
    print(json.dumps({"ok": not errors, "errors": errors, "snapshots": len(snaps)}))


if __name__ == "__main__":
    main()
