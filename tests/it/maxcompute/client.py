"""pyodps's own ODPS client against the fake endpoint (tests/it/maxcompute/fake.rs).

    python client.py SPEC.json   (spec: port, access_id, secret, project, dataset, target,
                                  create, alter, staging_create, insert, drop, columns, rows)

Does what a sink does with pyodps: looks the table up (missing), creates it with the given
statement, alters it (twice: the second fails), writes rows through the Tunnel into a staging table, reads them back
through the Tunnel, copies them with INSERT .. SELECT, drops the staging table; then calls with
a wrong secret. Prints what it saw as JSON.
"""

import json
import struct
import sys

from odps import ODPS, options

options.retry_times = 0
options.local_timezone = "UTC"

import pandas as pd  # noqa: E402
from odps.errors import NoSuchObject, ODPSError  # noqa: E402

HINTS = {"odps.namespace.schema": "true"}


def plain(v):
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return {"f64": struct.unpack("<q", struct.pack("<d", v))[0]}
    v = pd.Timestamp(v)
    if v.tzinfo is not None:
        v = v.tz_convert("UTC").tz_localize(None)
    return {"us": (v - pd.Timestamp(0)).value // 1000}


def value(v, ty):
    if isinstance(v, dict) and "us" in v:
        return pd.Timestamp(v["us"], unit="us", tz="UTC")
    if isinstance(v, dict) and "f64" in v:
        return struct.unpack("<d", struct.pack("<q", v["f64"]))[0]
    return v


def main():
    spec = json.load(open(sys.argv[1]))
    endpoint = "http://127.0.0.1:%d/api" % spec["port"]
    o = ODPS(spec["access_id"], spec["secret"], spec["project"], endpoint=endpoint)
    name = "%s.%s.%s" % (spec["project"], spec["dataset"], spec["target"])
    out = {}
    try:
        o.get_table(name).table_schema
        out["missing"] = False
    except NoSuchObject:
        out["missing"] = True
    o.execute_sql(spec["create"], hints=HINTS)
    def columns(t):
        table = o.get_table(t)
        table.reload()
        return [[c.name, str(c.type).upper()] for c in table.table_schema.simple_columns]

    partitions = lambda t: [c.name for c in o.get_table(t).table_schema.partitions]
    out["created"] = columns(name)
    out["partitions"] = partitions(name)
    o.execute_sql(spec["alter"], hints=HINTS)
    out["altered"] = columns(name)
    try:  # the same columns again: the instance fails and pyodps surfaces the task's error
        o.execute_sql(spec["alter"], hints=HINTS)
        out["failed_sql"] = None
    except ODPSError as e:
        out["failed_sql"] = str(e)

    staging = "%s.%s.%s" % (spec["project"], spec["dataset"], spec["staging"])
    o.execute_sql(spec["staging_create"], hints=HINTS)
    table = o.get_table(staging)
    types = [c[1] for c in spec["columns"]]
    with table.open_writer() as w:
        w.write([[value(v, t) for v, t in zip(row, types)] for row in spec["rows"]])
    with table.open_reader() as r:
        out["read_back"] = [[plain(v) for v in rec.values] for rec in r]
    o.execute_sql(spec["insert"], hints=HINTS)
    o.execute_sql(spec["drop"], hints=HINTS)
    out["staging_exists_after_drop"] = o.exist_table(staging)

    bad = ODPS(spec["access_id"], "not-the-secret", spec["project"], endpoint=endpoint)
    try:
        bad.get_table(name).table_schema
        out["wrong_secret"] = "accepted"
    except ODPSError as e:
        out["wrong_secret"] = getattr(e, "code", None) or type(e).__name__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
