"""Checks the partitioning of a flight-sink table's published Iceberg metadata with PyIceberg.

usage: check_partitions.py TABLE_LOCATION SPEC_JSON FILTERS_JSON

SPEC_JSON: the table's partition spec as flight-sink holds it ([{"column", "transform"}]).
FILTERS_JSON: [{"column": c, "value": v, "files": n}]: a scan with row_filter c == v must plan
exactly n data files (partition pruning), each of which holds rows with c == v.

Checks, on the current snapshot: the Iceberg spec has one field per flight-sink field (source
column and transform as written), field ids from 1000; every data file's partition tuple equals
PyIceberg's own transform of every row the file holds (so each file holds exactly one
partition); the manifests carry partition summaries. Prints {"ok": bool, "errors": [...],
"files": n}.
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo
from pyiceberg.io import load_file_io
from pyiceberg.table import StaticTable
from pyiceberg.types import DateType, TimestampType, TimestamptzType, TimeType


def to_python(arr: pa.ChunkedArray, iceberg_type):
    """The column's values as PyIceberg's transforms take them: dates as days, times and
    timestamps as microseconds, the rest as pyarrow gives them."""
    if isinstance(iceberg_type, (TimestampType, TimestamptzType)):
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(pa.int64())
    elif isinstance(iceberg_type, DateType):
        arr = arr.cast(pa.int32())
    elif isinstance(iceberg_type, TimeType):
        arr = arr.cast(pa.time64("us")).cast(pa.int64())
    return arr.to_pylist()


def main():
    loc, spec_json, filters_json = sys.argv[1], sys.argv[2], sys.argv[3]
    spec_want = json.loads(spec_json)
    filters = json.loads(filters_json)
    props = {}
    if loc.startswith("s3://"):
        props = {
            "s3.endpoint": os.environ["AWS_ENDPOINT_URL_S3"],
            "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
            "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
            "s3.force-virtual-addressing": "false",
        }
    hint = loc + "/metadata/version-hint.text"
    io = load_file_io(props, hint)
    with io.new_input(hint).open() as f:
        n = int(f.read().decode().strip())
    tbl = StaticTable.from_metadata(f"{loc}/metadata/v{n}.metadata.json", properties=props)
    errors = []
    schema = tbl.schema()
    spec = tbl.spec()
    got = [{"column": schema.find_column_name(f.source_id), "transform": str(f.transform)} for f in spec.fields]
    if got != spec_want:
        errors.append(f"iceberg spec {got}, want {spec_want}")
    ids = [f.field_id for f in spec.fields]
    if ids != list(range(1000, 1000 + len(ids))):
        errors.append(f"partition field ids {ids}, want 1000..")

    tasks = list(tbl.scan().plan_files())
    for task in tasks:
        df = task.file
        with io.new_input(df.file_path).open() as f:
            data = pq.read_table(f)
        for i, field in enumerate(spec.fields):
            name = schema.find_column_name(field.source_id)
            src_type = schema.find_field(field.source_id).field_type
            fn = field.transform.transform(src_type)
            values = {fn(v) for v in to_python(data.column(name), src_type)}
            want = df.partition[i]
            if values != {want}:
                errors.append(f"{df.file_path}: partition field {field.name} = {want!r}, its rows transform to {sorted(map(repr, values))[:5]}")

    snap = tbl.current_snapshot()
    if snap is not None and spec.fields:
        for m in snap.manifests(io):
            if m.content == 0 and m.added_files_count + m.existing_files_count > 0 and not m.partitions:
                errors.append(f"manifest {m.manifest_path} has no partition summaries")

    for flt in filters:
        planned = list(tbl.scan(row_filter=EqualTo(flt["column"], flt["value"])).plan_files())
        if len(planned) != flt["files"]:
            errors.append(f"{flt['column']} == {flt['value']!r}: planned {len(planned)} data files of {len(tasks)}, want {flt['files']}")
    print(json.dumps({"ok": not errors, "errors": errors, "files": len(tasks)}))


if __name__ == "__main__":
    main()
