"""Reads one Parquet file with the readers this Python has: pyarrow always, DuckDB where it is
installed. Prints {reader: {"version", "columns", "rows"}} as JSON on stdout, timestamps as
microseconds since the epoch and floats as their bits, so that each reader's rows compare exactly with the publisher's.
Used by tests/it/parquet_readers.rs (argv[1]: the file)."""

import json
import struct
import sys

import pyarrow
import pyarrow.parquet as pq
import pyarrow.types as pt

path = sys.argv[1]
out = {}


def exact(v):
    """A float as "f64:" and its IEEE bits (a JSON number's decimal may be parsed 1 ulp off)."""
    if isinstance(v, float):
        return "f64:%d" % struct.unpack("<Q", struct.pack("<d", v))[0]
    return v


table = pq.read_table(path)
columns = []
for col in table.columns:
    if pt.is_timestamp(col.type):
        col = col.cast(pyarrow.int64())
    columns.append(col.to_pylist())
out["pyarrow"] = {
    "version": pyarrow.__version__,
    "columns": table.column_names,
    "rows": [[exact(v) for v in r] for r in zip(*columns)],
}

try:
    import duckdb
except ImportError:
    duckdb = None
if duckdb is not None:
    con = duckdb.connect()
    described = con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [path]).fetchall()
    names = [d[0] for d in described]
    exprs = [
        f'epoch_us("{d[0]}")' if d[1].startswith("TIMESTAMP") else f'"{d[0]}"' for d in described
    ]
    rows = con.execute(f"SELECT {', '.join(exprs)} FROM read_parquet(?)", [path]).fetchall()
    out["duckdb"] = {
        "version": duckdb.__version__,
        "columns": names,
        "rows": [[exact(v) for v in r] for r in rows],
    }

json.dump(out, sys.stdout)
