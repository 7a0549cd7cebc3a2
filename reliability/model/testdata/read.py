"""The model test's Python reader: direct reads of data files and a PyIceberg scan.

Usage: read.py JOBS.json, a list of jobs, one per table. A job names an Arrow IPC file holding the
FlightInfo schema, the data files of the direct endpoints (each with its deleted row runs), and an
Iceberg metadata file; it writes what pyarrow reads from the files, and what PyIceberg reads from
the metadata, as Arrow IPC files the Go test compares with its model.
"""

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def conform(col, field):
    """col (a file's column) as field's type: widened, element names as the schema has them."""
    if col.type == field.type:
        return col
    if isinstance(field.type, pa.ExtensionType):
        storage = conform(col, pa.field(field.name, field.type.storage_type))
        return pa.chunked_array(
            [pa.ExtensionArray.from_storage(field.type, c) for c in storage.chunks], type=field.type
        )
    return col.cast(field.type)


def direct(job):
    with pa.ipc.open_file(job["schema"]) as f:
        schema = f.schema
    tables = []
    for part in job["parts"]:
        t = pq.read_table(part["path"])
        n = t.num_rows
        keep = [True] * n
        for start, end in part["deleted"]:
            for i in range(start, end):
                keep[i] = False
        cols = []
        for field in schema:
            if field.name in t.column_names:
                cols.append(conform(t.column(field.name), field))
            else:
                cols.append(pa.chunked_array([pa.nulls(n, field.type)], type=field.type))
        t = pa.Table.from_arrays(cols, schema=schema).filter(pa.array(keep, type=pa.bool_()))
        tables.append(t)
    out = pa.concat_tables(tables) if tables else pa.Table.from_batches([], schema=schema)
    with pa.ipc.new_file(job["out"], out.schema) as w:
        w.write_table(out)


def iceberg(job):
    from pyiceberg.table import StaticTable

    t = StaticTable.from_metadata(job["metadata"]).scan().to_arrow()
    with pa.ipc.new_file(job["out"], t.schema) as w:
        w.write_table(t)


def main():
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        if job.get("direct"):
            direct(job["direct"])
        if job.get("iceberg"):
            iceberg(job["iceberg"])


if __name__ == "__main__":
    main()
