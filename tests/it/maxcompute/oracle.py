"""pyodps as the oracle of tests/it/maxcompute (run with a venv of scripts/odps-oracle).

    python oracle.py sign SPEC.json     sign each request with pyodps's AliyunAccount (StsAccount
                                        when the request names an sts_token)
    python oracle.py decode SPEC.json   decode a block with pyodps's TunnelRecordReader
    python oracle.py encode SPEC.json   encode rows with pyodps's pure-Python BaseRecordWriter

ODPS_FORCE_PY=1 selects pyodps's pure-Python implementations (options.force_py, and no C
extension importable); otherwise the C ones. Answers one JSON document on stdout.
"""

import io
import json
import os
import struct
import sys
from urllib.parse import unquote, urlparse

os.environ.setdefault("TZ", "UTC")
FORCE_PY = os.environ.get("ODPS_FORCE_PY") == "1"


class NoOdpsCExtensions:
    """Refuses pyodps's C extensions (odps.*_c): pyodps 0.13 imports its tunnel modules while
    `import odps` runs, before options.force_py can be set, so the pure-Python implementations
    are chosen by making every C import fail (pyodps falls back on ImportError)."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("odps.") and name.endswith("_c"):
            raise ImportError("pure-Python pyodps asked for: " + name)
        return None


if FORCE_PY:
    sys.meta_path.insert(0, NoOdpsCExtensions())

from odps import options  # noqa: E402

options.force_py = FORCE_PY
options.retry_times = 0
options.local_timezone = "UTC"

import odps  # noqa: E402
from odps.accounts import AliyunAccount, StsAccount  # noqa: E402
from odps.models import Column, TableSchema  # noqa: E402


def sign(spec):
    import requests

    out = []
    for r in spec["requests"]:
        if r.get("sts_token"):
            account = StsAccount(r["access_id"], r["secret"], r["sts_token"])
        else:
            account = AliyunAccount(r["access_id"], r["secret"])
        url = r["endpoint"] + r["path"]
        if r.get("actions"):
            url += "?" + "&".join(r["actions"])
        req = requests.Request(
            r["method"],
            url,
            params=[tuple(p) for p in r.get("params", [])],
            headers=dict(r.get("headers", [])),
            data=r.get("body", "").encode() or None,
        ).prepare()
        account.sign_request(req, r["endpoint"])
        target = unquote(req.url[len(r["endpoint"]):])
        canonical = account._build_canonical_str(urlparse(target, allow_fragments=False), req)
        out.append(
            {
                "target": req.url[len(r["endpoint"]):],
                "headers": [[k, v] for k, v in req.headers.items() if k != "Authorization"],
                "authorization": req.headers["Authorization"],
                "canonical": canonical,
            }
        )
    return {"version": odps.__version__, "requests": out}


def schema_of(spec):
    return TableSchema(columns=[Column(name=n, type=t) for n, t in spec["columns"]])


def plain(value):
    """A JSON form that keeps every bit: doubles as their bits (i64), timestamps as epoch microseconds."""
    import pandas as pd

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return {"f64": struct.unpack("<q", struct.pack("<d", value))[0]}
    if isinstance(value, pd.Timestamp):
        if value.tzinfo is not None:
            value = value.tz_convert("UTC").tz_localize(None)
        delta = value - pd.Timestamp(0)
        assert delta.value % 1000 == 0, value
        return {"us": delta.value // 1000}
    raise TypeError(type(value))


def decode(spec):
    """spec: {"blocks": [{"columns": [[name, type]…], "block": path}…]}"""
    from odps.tunnel.io.reader import TunnelRecordReader

    results, mode = [], None
    for item in spec["blocks"]:
        data = open(item["block"], "rb").read()
        reader = TunnelRecordReader(schema_of(item), lambda *_, **__: io.BytesIO(data))
        results.append([[plain(v) for v in record.values] for record in reader])
        mode = reader._mode()
    return {"version": odps.__version__, "mode": mode, "results": results}


def encode(spec):
    """spec: {"sets": [{"columns": [[name, type]…], "rows": [[value…]…]}…]}"""
    import pandas as pd
    from odps.tunnel.io.writer import BaseRecordWriter

    results, mode = [], None
    for item in spec["sets"]:
        schema = schema_of(item)
        out = io.BytesIO()
        writer = BaseRecordWriter(schema, out)
        for row in item["rows"]:
            values = []
            for v in row:
                if isinstance(v, dict) and "us" in v:
                    v = pd.Timestamp(v["us"], unit="us", tz="UTC")
                elif isinstance(v, dict):
                    v = struct.unpack("<d", struct.pack("<q", v["f64"]))[0]
                values.append(v)
            writer.write(odps.models.Record(schema=schema, values=values))
        writer.close()
        results.append(out.getvalue().hex())
        mode = writer._mode()
    return {"version": odps.__version__, "mode": mode, "results": results}


if __name__ == "__main__":
    command, path = sys.argv[1], sys.argv[2]
    spec = json.load(open(path))
    print(json.dumps({"sign": sign, "decode": decode, "encode": encode}[command](spec)))
