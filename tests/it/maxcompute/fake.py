"""A fake MaxCompute endpoint for tests (stdlib http.server + pyodps as the authority).

    python fake.py ACCESS_ID SECRET     prints "PORT STS_PORT\n" once listening on 127.0.0.1

Every request's signature is checked with pyodps's own signer (AliyunAccount over the request
as received): a mismatch gets 403 SignatureNotMatch. A request is signed with the fixed pair
ACCESS_ID, SECRET, or with a temporary key the fake STS on STS_PORT issued (fake_sts.py): then
its authorization-sts-token header must be the key's token and the key unexpired (403
InvalidSecurityToken.MismatchWithAccessKey, 403 AuthenticationRequestExpired otherwise,
counted). Control plane under /api:
  GET  /api/projects/{p}[/schemas/{s}]/tables/{t}   table XML, or 404 NoSuchObject
  GET  /api/projects/{p}/tunnel?service             the tunnel host (this server)
  POST /api/projects/{p}/instances                  runs the SQL it understands: create table
       (incl. Merlin's auto partition, and a table partitioned by one STRING column), alter
       table add columns, alter table add/drop partition, insert into .. select .. [where
       c = 'v'], drop table; 201 + Location. GET .../instances/{id}[?taskstatus|?result] polls
       it. GET /api/projects/{p}/tables?name=prefix lists tables (one page).
Tunnel (no /api prefix), pyodps TableTunnel's protocol:
  POST table?uploads=1, PUT table?uploadid&blockid (body decoded with pyodps's
  TunnelRecordReader; chunked and deflate bodies), GET table?uploadid (blocks), POST
  table?uploadid (commit: rows appended); POST table?downloads, GET table?downloadid&data
  (records written with pyodps's own writer).
Faults: POST /__fake/faults {"fail_instances": N, "refuse_signatures": N, "drop_block_put": N,
"unavailable": N, "throttle": N, "fail_commit": N, "running_polls": N, "skewed_polls": N,
"upper_status": N, "table_modified": N, "hide_tables": N, "hold_instances": N} arms the next N
occurrences of each (see FAULTS); POST /__fake/instance_faults {"match": regex, "defer": true,
"lost_answer": true, "missing_polls": N, "running_polls": N} arms the next instance whose
statement matches (see
INSTANCE_FAULTS); POST /__fake/release lets every held instance terminate and runs every
deferred one, in creation order; a
block the reader cannot decode is refused with 400 MalformedDataStream; POST /__fake/refuse_rows {"column": c, "values": [...]} refuses (400 InvalidRecord) every block holding
such a row.
STS: POST /__fake/sts {"mode": "up"|"refuse"|"closed", "life": s, "lives": [...]} sets the fake
STS, GET /__fake/sts dumps its calls, its keys and the refusals (fake_sts.py).
Test-only: GET /__fake/tables dumps every table as JSON (timestamps {"us": n}, doubles
{"f64": bits}); GET /__fake/instances lists the SQL run (statement, settings, outcome);
GET /__fake/log lists the requests seen (method, path, whether the signature matched).
Tables live in memory. The auto partition value is the UTC day of request_timestamp: an
assumption of this fake, not a confirmed fact of the service.
"""

import io
import json
import os
import re
import socket
import struct
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

os.environ["TZ"] = "UTC"
time.tzset()

from odps import options  # noqa: E402

options.retry_times = 0
options.local_timezone = "UTC"

import pandas as pd  # noqa: E402
from odps.accounts import AliyunAccount  # noqa: E402
from odps.models import Column, Record, TableSchema  # noqa: E402
from odps.tunnel.io.reader import TunnelRecordReader  # noqa: E402
from odps.tunnel.io.writer import BaseRecordWriter  # noqa: E402
from requests.structures import CaseInsensitiveDict  # noqa: E402

import fake_sts  # noqa: E402  (beside this script)

STS = fake_sts.Sts()

LOCK = threading.Lock()
TABLES = {}  # (project, schema, name) -> table dict
INSTANCES = {}  # id -> {"ok": bool, "result": str, "sql": str, "settings": dict}
SESSIONS = {}  # id -> {"key": table key, "blocks": {id: [rows]}, "status": str, "version": int}
# An upload session opened before its table was truncated is refused at commit with
# TableModified ("the table's data was changed by another task during the upload: create a new
# session", Alibaba's Tunnel error list; pyodps knows the code as errors.TableModified). The
# HTTP status the service pairs it with is this fake's assumption (400).
LOG = []
# Faults the test asks for (POST /__fake/faults {"name": n}): each counts down per use.
FAULTS = {
    "fail_instances": 0,  # the next N SQL instances fail (a task failure, detail in ?result)
    "refuse_signatures": 0,  # the next N signed requests get 403 SignatureNotMatch
    "drop_block_put": 0,  # the next N block PUTs: part of the body read, then the socket closed
    "unavailable": 0,  # the next N signed requests get 503 ServiceUnavailable
    "throttle": 0,  # the next N signed requests get 429 SlotExceeded
    "fail_commit": 0,  # the next N commits get 500 InternalServerError, nothing committed
    "running_polls": 0,  # the next SQL instance answers Running to its first N status polls
    "skewed_polls": 0,  # the next N polls of an instance get 403 RequestTimeTooSkewed
    "upper_status": 0,  # the next N SQL instances answer their task status upper-case (SUCCESS)
    "table_modified": 0,  # the next N commits find their table modified (as after a TRUNCATE)
    "hide_tables": 0,  # the next N table reads answer 404 (as when another publisher creates the
    # table between a read and a create)
    "hold_instances": 0,  # the next N SQL instances answer Running until POST /__fake/release
}


# Rows the Tunnel refuses (POST /__fake/refuse_rows {"column": c, "values": [...]}): a block
# holding a row whose column c has one of the values is refused whole (400 InvalidRecord), as a
# service refuses a block for one bad record.
REFUSE_ROWS = {"column": None, "values": set()}


# Faults of one SQL instance (POST /__fake/instance_faults {"match": regex, ...}): the first
# instance created whose statement matches takes the entry. "defer": the statement runs only at
# POST /__fake/release (until then the instance answers Running), as a queued instance does;
# "lost_answer": the instance is created, but the connection is closed without an answer (the
# client cannot know its id); "missing_polls": N: its next N status polls answer 404;
# "running_polls": N: it answers Running to its first N status polls.
INSTANCE_FAULTS = []


def take_instance_fault(sql):
    for i, f in enumerate(INSTANCE_FAULTS):
        if re.search(f["match"], sql, re.I | re.S):
            return INSTANCE_FAULTS.pop(i)
    return {}


def take(fault):
    """Uses one count of a fault; whether it fires."""
    with LOCK:
        if FAULTS[fault] > 0:
            FAULTS[fault] -= 1
            return True
        return False


class SqlError(Exception):
    pass


def run_instance(sql, project):
    """Runs an instance's statement: (result, ok)."""
    try:
        if FAULTS["fail_instances"] > 0:
            FAULTS["fail_instances"] -= 1
            raise SqlError("ODPS-0010000:System internal error - fault injected by the test")
        return run_sql(sql, project), True
    except SqlError as e:
        return str(e), False


def split_name(name, project):
    parts = [p.strip("`").lower() for p in name.strip().split(".")]
    if len(parts) == 1:
        return (project, "default", parts[0])
    if len(parts) == 2:  # odps.namespace.schema=true: <schema>.<table>
        return (project, parts[0], parts[1])
    return (parts[0], parts[1], parts[2])


def split_top(text):
    out, depth, cur = [], 0, ""
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out]


def parse_columns(text):
    cols = []
    for item in split_top(text):
        m = re.fullmatch(r"(`(?:[^`]|``)+`|[A-Za-z_]\w*)\s+(\w+)", item)
        if not m:
            raise SqlError("cannot parse column %r" % item)
        name = m.group(1)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        cols.append([name, m.group(2).upper()])
    return cols


def ts_us(v):
    if v is None:
        return None
    v = pd.Timestamp(v)
    if v.tzinfo is not None:
        v = v.tz_convert("UTC").tz_localize(None)
    return (v - pd.Timestamp(0)).value // 1000


def with_partition(table, row):
    auto = table.get("auto")
    if auto:
        col, pt = auto
        us = row.get(col.lower())
        row[pt] = None if us is None else pd.Timestamp(ts_us(us) * 1000).strftime("%Y-%m-%d")
    return row


def run_sql(sql, project):
    s = sql.strip().rstrip(";").strip()
    # A table partitioned by one STRING column (the staging table): its partitions are the
    # values in "parts"; rows carry their partition's value under the column's name. (Before
    # the other create: its column list would swallow the clause.)
    m = re.match(
        r"(?is)create\s+table\s+(\S+)\s*\((.*?)\)\s*partitioned\s+by\s*\(\s*(\w+)\s+string\s*\)"
        r"\s*(?:lifecycle\s+(\d+))?\s*$",
        s,
    )
    if m:
        key = split_name(m.group(1), project)
        if key in TABLES:
            raise SqlError("ODPS-0130071: Table or view already exists - %s" % ".".join(key))
        TABLES[key] = {
            "columns": parse_columns(m.group(2)),
            "partitions": [[m.group(3).lower(), "STRING"]],
            "parts": set(),
            "auto": None,
            "lifecycle": int(m.group(4)) if m.group(4) else None,
            "ddl": s,
            "rows": [],
        }
        return "OK"
    m = re.match(
        r"(?is)create\s+table\s+(if\s+not\s+exists\s+)?(\S+)\s*\((.*?)\)\s*"
        r"(?:auto\s+partitioned\s+by\s*\(\s*trunc_time\s*\(\s*(\w+)\s*,\s*'day'\s*\)\s+as\s+(\w+)\s*\))?"
        r"\s*(?:lifecycle\s+(\d+))?\s*$",
        s,
    )
    if m:
        key = split_name(m.group(2), project)
        if key in TABLES:
            if m.group(1):
                return "OK"
            raise SqlError("ODPS-0130071: Table or view already exists - %s" % ".".join(key))
        auto = (m.group(4), m.group(5).lower()) if m.group(4) else None
        TABLES[key] = {
            "columns": parse_columns(m.group(3)),
            "partitions": [[auto[1], "STRING"]] if auto else [],
            "auto": auto,
            "lifecycle": int(m.group(6)) if m.group(6) else None,
            "ddl": s,
            "rows": [],
        }
        return "OK"
    m = re.match(
        r"(?is)alter\s+table\s+(\S+)\s+(add|drop)\s+(if\s+(?:not\s+)?exists\s+)?"
        r"partition\s*\(\s*(\w+)\s*=\s*'([^']*)'\s*\)\s*$",
        s,
    )
    if m:
        table = table_of(split_name(m.group(1), project))
        col, value = m.group(4).lower(), m.group(5)
        if [col, "STRING"] not in table["partitions"] or "parts" not in table:
            raise SqlError("ODPS-0130071: %s is not a partition column" % col)
        if m.group(2).lower() == "add":
            if value in table["parts"] and not m.group(3):
                raise SqlError("ODPS-0130071: Partition already exists")
            table["parts"].add(value)
        else:
            if value not in table["parts"] and not m.group(3):
                raise SqlError("ODPS-0130131: Partition not found")
            table["parts"].discard(value)
            table["rows"] = [r for r in table["rows"] if r.get(col) != value]
        return "OK"
    m = re.match(r"(?is)alter\s+table\s+(\S+)\s+add\s+columns\s*\((.*)\)\s*$", s)
    if m:
        table = table_of(split_name(m.group(1), project))
        have = {c[0].lower() for c in table["columns"]}
        for name, ty in parse_columns(m.group(2)):
            if name.lower() in have:
                raise SqlError("ODPS-0130071: column %s already exists" % name)
            table["columns"].append([name, ty])
        return "OK"
    m = re.match(r"(?is)truncate\s+table\s+(\S+)\s*$", s)
    if m:
        table = table_of(split_name(m.group(1), project))
        table["rows"] = []
        table["version"] = table.get("version", 0) + 1
        return "OK"
    m = re.match(r"(?is)drop\s+table\s+(if\s+exists\s+)?(\S+)\s*$", s)
    if m:
        key = split_name(m.group(2), project)
        if key not in TABLES and not m.group(1):
            raise SqlError("ODPS-0130131: Table not found - %s" % ".".join(key))
        TABLES.pop(key, None)
        return "OK"
    m = re.match(
        r"(?is)insert\s+into\s+(?:table\s+)?(\S+)\s*\((.*?)\)\s*select\s+(.*?)\s+from\s+(\S+)"
        r"(?:\s+where\s+(\w+)\s*=\s*'([^']*)')?\s*$",
        s,
    )
    if m:
        target = table_of(split_name(m.group(1), project))
        source = table_of(split_name(m.group(4), project))
        where = (m.group(5).lower(), m.group(6)) if m.group(5) else None
        cols = [c.strip().strip("`").lower() for c in m.group(2).split(",")]
        exprs = split_top(m.group(3))
        if len(cols) != len(exprs):
            raise SqlError("ODPS-0130161: column count mismatch")
        types = {c[0].lower(): c[1] for c in target["columns"]}
        for row in source["rows"]:
            if where and row.get(where[0]) != where[1]:
                continue
            new = {c[0].lower(): None for c in target["columns"]}
            for col, expr in zip(cols, exprs):
                if col not in types:
                    raise SqlError("ODPS-0130071: column %s not in target" % col)
                cm = re.match(r"(?is)cast\s*\(\s*(\w+)\s+as\s+timestamp\s*\)$", expr)
                value = row.get((cm.group(1) if cm else expr).strip("`").lower())
                if types[col] == "TIMESTAMP" and value is not None:
                    value = pd.Timestamp(ts_us(value) * 1000)
                new[col] = value
            target["rows"].append(with_partition(target, new))
        return "OK"
    raise SqlError("ODPS-0130161: the fake does not understand: %s" % s[:200])


def table_of(key):
    if key not in TABLES:
        raise SqlError("ODPS-0130131: Table not found - %s" % ".".join(key))
    return TABLES[key]


def schema_json(table):
    col = lambda c: {"name": c[0], "type": c[1].lower(), "comment": "", "isNullable": True}
    return {
        "columns": [col(c) for c in table["columns"]],
        "partitionKeys": [col(c) for c in table["partitions"]],
    }


def odps_schema(table):
    return TableSchema(
        columns=[Column(name=c[0], type=c[1].lower()) for c in table["columns"]]
    )


def plain(v):
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return {"f64": struct.unpack("<q", struct.pack("<d", v))[0]}
    if isinstance(v, bytes):
        return v.decode()
    return {"us": ts_us(v)}


def xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    access_id = secret = None

    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "deflate":
            data = zlib.decompress(data)
        return data

    def reply(self, status, body=b"", ctype="application/xml", headers=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-odps-request-id", uuid.uuid4().hex)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, message):
        self.reply(
            status,
            '<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message>'
            "<RequestId>%s</RequestId><HostId>fake</HostId></Error>"
            % (code, xml_escape(message), uuid.uuid4().hex),
        )

    def tunnel_error(self, status, code, message):
        self.reply(status, json.dumps({"Code": code, "Message": message}), "application/json")

    def signature_ok(self, api, access_id, secret):
        class Req:
            pass

        req = Req()
        req.method = self.command
        req.headers = CaseInsensitiveDict(
            {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        )
        endpoint = "http://fake/api" if api else "http://fake"
        req.url = "http://fake" + self.path
        AliyunAccount(access_id, secret).sign_request(req, endpoint)
        return req.headers["Authorization"] == self.headers.get("Authorization")

    def check_request(self, api):
        """(key id, None) for a request signed right, else (key id, MaxCompute's refusal code and
        message). A key the fake STS issued is checked with its own secret, after its token and
        expiry; any other with the fixed pair."""
        auth = self.headers.get("Authorization", "")
        access_id = auth[len("ODPS "):].split(":")[0] if auth.startswith("ODPS ") else None
        key = fake_sts.issued(access_id)
        if key is None:
            if self.signature_ok(api, self.access_id, self.secret):
                return access_id, None
            return access_id, ("SignatureNotMatch", "The request signature does not match")
        refused = fake_sts.refusal(access_id, self.headers.get("authorization-sts-token"))
        if refused:
            return access_id, refused
        if not self.signature_ok(api, access_id, key["secret"]):
            return access_id, ("SignatureNotMatch", "The request signature does not match")
        fake_sts.used(access_id)
        return access_id, None

    def handle_any(self):
        split = urlsplit(self.path)
        path = split.path
        params = dict(parse_qsl(split.query, keep_blank_values=True))
        if path.startswith("/__fake/"):
            return self.fake_admin(path)
        api = path.startswith("/api/")
        if self.command == "PUT" and "blockid" in params and take("drop_block_put"):
            with LOCK:
                LOG.append({"method": self.command, "path": self.path, "fault": "drop_block_put"})
            self.rfile.read1(16) if hasattr(self.rfile, "read1") else self.rfile.read(16)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body = self.body()
        access_id, refused = self.check_request(api)
        if refused is None and take("refuse_signatures"):
            refused = ("SignatureNotMatch", "The request signature does not match")
        with LOCK:
            LOG.append({"method": self.command, "path": self.path, "signature_ok": refused is None,
                        "key": access_id, "refused": refused and refused[0],
                        "chunked": self.headers.get("Transfer-Encoding", "").lower() == "chunked"})
        if refused:
            return self.error(403, *refused)
        if take("unavailable"):
            return self.error(503, "ServiceUnavailable", "fault injected by the test")
        if take("throttle"):
            return self.error(429, "SlotExceeded", "fault injected by the test")
        if api:
            path = path[len("/api"):]
        m = re.match(r"^/projects/([^/]+)(?:/schemas/([^/]+))?/tables/([^/]+)$", path)
        try:
            with LOCK:
                if m:
                    project = m.group(1)
                    schema = m.group(2) or params.get("curr_schema") or "default"
                    key = (project, schema.lower(), m.group(3).lower())
                    return (self.table_api if api else self.tunnel)(key, params, body)
                m = re.match(r"^/projects/([^/]+)/tables$", path)
                if api and m and self.command == "GET":
                    return self.list_tables(m.group(1), params)
                m = re.match(r"^/projects/([^/]+)/tunnel$", path)
                if api and m and "service" in params:
                    host = "127.0.0.1:%d" % self.server.server_address[1]
                    return self.reply(200, host, "text/plain")
                m = re.match(r"^/projects/([^/]+)/instances(?:/([^/]+))?$", path)
                if api and m:
                    return self.instances(m.group(1), m.group(2), params, body)
                m = re.match(r"^/projects/([^/]+)$", path)
                if api and m:
                    date = "Tue, 01 Dec 2026 00:00:00 GMT"
                    return self.reply(
                        200,
                        "<Project><Name>%s</Name><State>AVAILABLE</State><Properties><Property>"
                        "<Name>odps.sql.type.system.odps2</Name><Value>true</Value></Property>"
                        "</Properties></Project>" % m.group(1),
                        headers=[("x-odps-owner", "fake"), ("x-odps-creation-time", date),
                                 ("Last-Modified", date)],
                    )
        except SqlError as e:
            return self.error(400, "InvalidParameter", str(e))
        self.error(404, "NoSuchObject", "the fake has no %s %s" % (self.command, path))

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_any

    def fake_admin(self, path):
        if self.command == "POST" and path == "/__fake/sts":
            try:
                STS.set(json.loads(self.body() or b"{}"))
            except ValueError as e:
                return self.reply(400, str(e), "text/plain")
            return self.reply(200, fake_sts.dump(), "application/json")
        if path == "/__fake/sts":
            return self.reply(200, fake_sts.dump(), "application/json")
        if self.command == "POST" and path == "/__fake/faults":
            arm = json.loads(self.body() or b"{}")
            with LOCK:
                for k, v in arm.items():
                    if k not in FAULTS:
                        return self.reply(400, "unknown fault %s" % k, "text/plain")
                    FAULTS[k] += int(v)
                return self.reply(200, json.dumps(FAULTS), "application/json")
        if self.command == "POST" and path == "/__fake/release":
            with LOCK:
                for inst in sorted(INSTANCES.values(), key=lambda i: i["created"]):
                    if inst.get("deferred") and inst["held"]:
                        inst["result"], inst["ok"] = run_instance(inst["sql"], inst["project"])
                    inst["held"] = False
            return self.reply(200, "{}", "application/json")
        if self.command == "POST" and path == "/__fake/instance_faults":
            spec = json.loads(self.body() or b"{}")
            with LOCK:
                INSTANCE_FAULTS.append(spec)
            return self.reply(200, "{}", "application/json")
        if self.command == "POST" and path == "/__fake/refuse_rows":
            spec = json.loads(self.body() or b"{}")
            with LOCK:
                REFUSE_ROWS["column"] = spec["column"].lower()
                REFUSE_ROWS["values"] = set(spec["values"])
            return self.reply(200, "{}", "application/json")
        with LOCK:
            if path == "/__fake/tables":
                out = {
                    ".".join(k): {
                        "columns": t["columns"],
                        "partitions": t["partitions"],
                        "lifecycle": t["lifecycle"],
                        "ddl": t.get("ddl"),
                        "rows": [{c: plain(v) for c, v in r.items()} for r in t["rows"]],
                    }
                    for k, t in TABLES.items()
                }
                return self.reply(200, json.dumps(out), "application/json")
            if path == "/__fake/instances":
                return self.reply(200, json.dumps(list(INSTANCES.values())), "application/json")
            if path == "/__fake/log":
                return self.reply(200, json.dumps(LOG), "application/json")
        self.reply(404, "")

    def list_tables(self, project, params):
        """pyodps Tables.iterate: one page, every table of the schema named with the prefix."""
        schema = (params.get("curr_schema") or "default").lower()
        prefix = params.get("name", "").lower()
        names = sorted(k[2] for k in TABLES if k[:2] == (project, schema) and k[2].startswith(prefix))
        self.reply(
            200,
            '<?xml version="1.0" encoding="UTF-8"?><Tables><Marker></Marker><MaxItems>%d</MaxItems>%s'
            "</Tables>" % (len(names), "".join(
                "<Table><Name>%s</Name><Owner>fake</Owner></Table>" % n for n in names)),
        )

    def table_api(self, key, params, body):
        if self.command != "GET":
            return self.error(405, "MethodNotAllowed", self.command)
        table = TABLES.get(key)
        hidden = FAULTS["hide_tables"] > 0  # LOCK is held here, so not take()
        FAULTS["hide_tables"] -= 1 if hidden else 0
        if table is None or hidden:
            return self.error(404, "NoSuchObject", "Table not found - %s" % ".".join(key))
        schema = schema_json(table)
        schema.update({"tableName": key[2], "owner": "fake", "createTime": 0,
                       "lastModifiedTime": 0, "lastDDLTime": 0, "isVirtualView": False,
                       "lifecycle": table["lifecycle"] or -1})
        self.reply(
            200,
            '<?xml version="1.0" encoding="UTF-8"?><Table><Name>%s</Name><TableId>%s</TableId>'
            "<Owner>fake</Owner><Schema><![CDATA[%s]]></Schema></Table>"
            % (key[2], "t" + uuid.uuid5(uuid.NAMESPACE_OID, ".".join(key)).hex, json.dumps(schema)),
        )

    def instances(self, project, instance_id, params, body):
        if instance_id is None and self.command == "POST":
            text = body.decode()
            query = re.search(r"<Query><!\[CDATA\[(.*?)\]\]></Query>", text, re.S)
            settings = {}
            prop = re.search(r"<Name>settings</Name>\s*<Value>(.*?)</Value>", text, re.S)
            if prop:
                settings = json.loads(prop.group(1).replace("&quot;", '"'))
            new_id = time.strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:16]
            sql = query.group(1) if query else ""
            fault = take_instance_fault(sql)
            if fault.get("defer"):
                result, ok = None, None
            else:
                result, ok = run_instance(sql, project)
            upper = FAULTS["upper_status"] > 0
            FAULTS["upper_status"] -= 1 if upper else 0
            held = FAULTS["hold_instances"] > 0
            FAULTS["hold_instances"] -= 1 if held else 0
            INSTANCES[new_id] = {"id": new_id, "ok": ok, "result": result, "sql": sql,
                                 "settings": settings,
                                 "running": FAULTS["running_polls"] + int(fault.get("running_polls", 0)),
                                 "upper": upper, "held": held or bool(fault.get("defer")),
                                 "deferred": bool(fault.get("defer")), "project": project,
                                 "missing": int(fault.get("missing_polls", 0)),
                                 "created": time.time()}
            FAULTS["running_polls"] = 0
            if fault.get("lost_answer"):
                LOG.append({"method": "POST", "path": self.path, "fault": "lost_answer"})
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            location = "http://%s:%d/api/projects/%s/instances/%s" % (
                self.server.server_address + (project, new_id)
            )
            return self.reply(201, "", headers=[("Location", location)])
        inst = INSTANCES.get(instance_id)
        if inst is None:
            return self.error(404, "NoSuchObject", "instance %s" % instance_id)
        if inst["missing"] > 0:
            inst["missing"] -= 1
            return self.error(404, "NoSuchObject", "instance %s not found (injected)" % instance_id)
        if FAULTS["skewed_polls"] > 0:
            # The service's answer to a request whose Date is too far off (pyodps retries it).
            FAULTS["skewed_polls"] -= 1
            return self.error(403, "RequestTimeTooSkewed",
                              "max_interval_date:900000,expire_date:2026-12-01T00:15:00.000Z,"
                              "now_date:2026-12-01T00:00:00.000Z")
        status = "Success" if inst["ok"] else "Failed"
        status = status.upper() if inst["upper"] else status
        task = '<Task Type="SQL"><Name>AnonymousSQLTask</Name><Status>%s</Status>' % status
        if "taskstatus" in params:
            body = "<Instance><Status>Terminated</Status><Tasks>%s</Task></Tasks></Instance>" % task
        elif "result" in params:
            body = (
                '<Instance><Tasks><Task Type="SQL"><Name>AnonymousSQLTask</Name>'
                '<Result Format="text"><![CDATA[%s]]></Result></Task></Tasks></Instance>'
                % inst["result"]
            )
        elif inst["held"]:
            body = "<Instance><Status>Running</Status></Instance>"
        elif inst["running"] > 0:
            inst["running"] -= 1
            body = "<Instance><Status>Running</Status></Instance>"
        else:
            body = "<Instance><Status>Terminated</Status></Instance>"
        self.reply(200, '<?xml version="1.0" encoding="UTF-8"?>' + body)

    def session_json(self, sid):
        s = SESSIONS[sid]
        table = TABLES[s["key"]]
        return json.dumps(
            {
                "UploadID": sid,
                "DownloadID": sid,
                "Status": s["status"],
                "RecordCount": len(table["rows"]),
                "UploadedBlockList": [{"BlockID": b} for b in sorted(s["blocks"])],
                "Schema": schema_json(table),
            }
        )

    def tunnel(self, key, params, body):
        if key not in TABLES:
            return self.tunnel_error(404, "NoSuchTable", "Table not found - %s" % ".".join(key))
        table = TABLES[key]
        part = None
        if "parts" in table:
            # A partitioned table: every call names an existing partition (pyodps sends it
            # as `partition=col=value`).
            spec = params.get("partition", "")
            col, _, value = spec.partition("=")
            if [col.lower(), "STRING"] not in table["partitions"]:
                return self.tunnel_error(400, "InvalidPartitionSpec", "partition %r" % spec)
            if value not in table["parts"]:
                return self.tunnel_error(404, "NoSuchPartition", "partition %r not found" % spec)
            part = (col.lower(), value)
        if self.command == "POST" and ("uploads" in params or "downloads" in params):
            sid = time.strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:16]
            SESSIONS[sid] = {"key": key, "blocks": {}, "status": "normal",
                             "version": table.get("version", 0), "part": part}
            return self.reply(201, self.session_json(sid), "application/json")
        sid = params.get("uploadid") or params.get("downloadid")
        if sid not in SESSIONS:
            return self.tunnel_error(404, "NoSuchUpload", "no session %s" % sid)
        s = SESSIONS[sid]
        if s.get("part") != part:
            return self.tunnel_error(400, "InvalidPartitionSpec", "not the session's partition")
        if self.command == "PUT" and "blockid" in params:
            if s["status"] != "normal":
                return self.tunnel_error(400, "InvalidStatus", "session is %s" % s["status"])
            reader = TunnelRecordReader(odps_schema(table), lambda *_, **__: io.BytesIO(body))
            names = [c[0].lower() for c in table["columns"]]
            try:
                rows = [dict(zip(names, r.values)) for r in reader]
            except Exception as e:  # noqa: BLE001 - any decode failure is the block's
                return self.tunnel_error(400, "MalformedDataStream", "block refused: %r" % e)
            col = REFUSE_ROWS["column"]
            bad = [r[col] for r in rows if col and r.get(col) in REFUSE_ROWS["values"]]
            if bad:
                return self.tunnel_error(400, "InvalidRecord", "record refused: %s=%s" % (col, bad[0]))
            s["blocks"][int(params["blockid"])] = rows
            return self.reply(200, "", "application/json")
        if self.command == "GET" and "downloadid" in params and "data" in params:
            start, count = (int(x) for x in params["rowrange"].strip("()").split(","))
            schema = odps_schema(table)
            out = io.BytesIO()
            writer = BaseRecordWriter(schema, out)
            names = [c[0].lower() for c in table["columns"]]
            for row in table["rows"][start:start + count]:
                values = [row.get(n) for n in names]
                values = [
                    pd.Timestamp(ts_us(v), unit="us", tz="UTC")
                    if c[1] == "TIMESTAMP" and v is not None else v
                    for c, v in zip(table["columns"], values)
                ]
                writer.write(Record(schema=schema, values=values))
            writer.close()
            return self.reply(200, out.getvalue(), "application/octet-stream",
                              headers=[("odps-tunnel-record-count", str(count))])
        if self.command == "GET":
            return self.reply(200, self.session_json(sid), "application/json")
        if self.command == "POST" and "uploadid" in params:
            if FAULTS["fail_commit"] > 0:
                FAULTS["fail_commit"] -= 1
                return self.tunnel_error(500, "InternalServerError", "fault injected by the test")
            modified = s["version"] != table.get("version", 0)
            if FAULTS["table_modified"] > 0 and s["status"] == "normal":
                FAULTS["table_modified"] -= 1
                modified = True
            if modified and s["status"] == "normal":
                s["status"] = "expired"
                return self.tunnel_error(400, "TableModified",
                                         "table was modified since the upload session was created")
            if s["status"] == "normal":
                for block in sorted(s["blocks"]):
                    for r in s["blocks"][block]:
                        r = dict(r)
                        if part:
                            r[part[0]] = part[1]
                        table["rows"].append(with_partition(table, r))
                s["status"] = "closed"
            return self.reply(200, self.session_json(sid), "application/json")
        self.tunnel_error(400, "InvalidRequest", "the fake has no %s %s" % (self.command, self.path))


def main():
    Handler.access_id, Handler.secret = sys.argv[1], sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    STS.open()
    print(server.server_address[1], STS.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
