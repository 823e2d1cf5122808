"""What Merlin's MaxComputeSink does (publisher/observation_sink.py, pyodps 0.12.2), as a script.

    python merlin_sink.py SPEC.json   (spec: port, access_id, secret, project, dataset, table,
                                       columns [[name, TYPE]], rows [[value…]])

Merlin's publisher is not on PyPI; this replays its calls: get_table on the three-part name,
`create table` (Merlin's text) when missing, then per batch: persist the DataFrame into
`<table>_<5 digits>` with lifecycle 1, `insert into … select` casting request_timestamp, `drop`.
"""

import json
import random
import struct
import sys

import pandas as pd
from odps import ODPS, options
from odps.df import DataFrame as ODPSDataFrame
from odps.errors import NoSuchObject

options.retry_times = 0


def main():
    spec = json.load(open(sys.argv[1]))
    client = ODPS(
        access_id=spec["access_id"],
        secret_access_key=spec["secret"],
        project=spec["project"],
        endpoint="http://127.0.0.1:%d/api" % spec["port"],
    )
    write_location = "%s.%s.%s" % (spec["project"], spec["dataset"], spec["table"])
    with_dataset = "%s.%s" % (spec["dataset"], spec["table"])
    cols = ",".join("%s %s" % (n, t) for n, t in spec["columns"])
    try:
        client.get_table(write_location).table_schema
    except NoSuchObject:
        client.execute_sql(
            "create table {t} ( {c} )  auto partitioned by (trunc_time(request_timestamp, 'day') as request_timestamp_pt)".format(
                t=with_dataset, c=cols
            )
        )

    data = {}
    for i, (name, ty) in enumerate(spec["columns"]):
        values = [row[i] for row in spec["rows"]]
        if ty == "TIMESTAMP":
            values = [pd.Timestamp(v["us"], unit="us", tz="UTC") for v in values]
        elif ty == "DOUBLE":
            values = [struct.unpack("<d", struct.pack("<q", v["f64"]))[0] for v in values]
        data[name] = values
    df = ODPSDataFrame(pd.DataFrame(data))
    temp_table_id = f"{write_location}_{random.randint(10000, 99999)}"
    df.persist(temp_table_id, create_table=True, lifecycle=1)
    fields = [f.name for f in df.schema]
    values = [
        "cast(request_timestamp as timestamp)" if c == "request_timestamp" else c for c in fields
    ]
    client.execute_sql(
        "insert into {t} ( {c} ) select {v} from {tmp}".format(
            t=with_dataset, c=",".join(fields), v=",".join(values), tmp=temp_table_id
        )
    )
    client.execute_sql("drop table {tmp}".format(tmp=temp_table_id))
    print(json.dumps({"temp_table": temp_table_id}))


if __name__ == "__main__":
    main()
