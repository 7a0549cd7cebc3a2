"""Reads a table's newest Iceberg metadata with iceberg-rust (pyiceberg-core's DataFusion table
provider) and prints its rows as JSON, ordered by the first column.

usage: read_iceberg_rust.py METADATA_LOCATION
"""
import json
import sys

from datafusion import SessionContext
from pyiceberg_core.datafusion import IcebergDataFusionTable

table = IcebergDataFusionTable(identifier=["default", "t"], metadata_location=sys.argv[1], file_io_properties={})
ctx = SessionContext()
ctx.register_table("t", table)
rows = ctx.sql("SELECT * FROM t").to_arrow_table().to_pylist()
first = next(iter(rows[0])) if rows else None
print(json.dumps(sorted(rows, key=lambda r: r[first]), default=str))
