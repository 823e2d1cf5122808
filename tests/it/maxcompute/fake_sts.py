"""The fake STS of the keyless tests, served by fake.py on a second port, and the table of the
temporary keys it issued, which fake.py's signature check reads: the fake MaxCompute accepts a
key this STS issued only with its security token and only before its expiry.

AssumeRoleWithOIDC (STS API 2015-04-01): the parameters are read from the query and from a form
body (our client POSTs the form; Alibaba's Python credentials SDK sends a GET). `Action` must be
AssumeRoleWithOIDC and RoleArn, OIDCProviderArn, OIDCToken and RoleSessionName present (400
MissingParameter otherwise, STS's JSON error). Each answer closes its connection, so a mode
change applies to the next request.

Modes, set with POST /__fake/sts on fake.py's port {"mode": m, "life": s, "lives": [s, ...]}:
  up      each call issues a new key: id STS.fake<n>, a random secret and security token,
          Expiration now + the next of "lives" (then "life") seconds, in whole seconds as STS
          writes it;
  refuse  503 ServiceUnavailable (STS's JSON error);
  closed  the port is closed: connections are refused; another mode opens it again.
GET /__fake/sts dumps the mode, every call (its parameters and the key issued), every key (its
secret and token, expiry, accepted requests, first and last use) and the refusals counted.

What MaxCompute answers a request signed with an expired temporary key: 403
AuthenticationRequestExpired, pyodps's error for it (pyodps reloads its temporary account on
it, odps/rest.py); the status is this fake's assumption. A token that is not the key's: 403
InvalidSecurityToken.MismatchWithAccessKey, Alibaba's common API error for it (that MaxCompute
uses the same code is this fake's assumption).
"""

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

LOCK = threading.Lock()
STATE = {
    "mode": "up",
    "life": 3600,  # seconds of a key's life
    "lives": [],  # the next keys' lives, used first
    "calls": [],
    "expired_refusals": 0,  # MaxCompute requests refused: signed with an expired key
    "token_refusals": 0,  # MaxCompute requests refused: without the key's security token
}
KEYS = {}  # access key id -> {"secret", "token", "expires", "requests", "first_use", "last_use"}
REQUIRED = ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName")


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class StsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def handle_any(self):
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        request_id = secrets.token_hex(8)
        call = {
            "method": self.command,
            "action": params.get("Action"),
            "role_arn": params.get("RoleArn"),
            "provider_arn": params.get("OIDCProviderArn"),
            "oidc_token": params.get("OIDCToken"),
            "session": params.get("RoleSessionName"),
            "duration": params.get("DurationSeconds"),
            "at": time.time(),
        }
        with LOCK:
            STATE["calls"].append(call)
            if STATE["mode"] == "refuse":
                call["refused"] = 503
                doc = {"RequestId": request_id, "Code": "ServiceUnavailable",
                       "Message": "the fake STS refuses (set by the test)"}
                status = 503
            elif params.get("Action") != "AssumeRoleWithOIDC" or any(
                    not params.get(p) for p in REQUIRED):
                call["refused"] = 400
                missing = [p for p in REQUIRED if not params.get(p)]
                doc = {"RequestId": request_id, "Code": "MissingParameter",
                       "Message": "Action %r, missing %s" % (params.get("Action"), missing)}
                status = 400
            else:
                n = len(KEYS) + 1
                life = STATE["lives"].pop(0) if STATE["lives"] else STATE["life"]
                key_id = "STS.fake%d" % n
                key = {
                    "secret": secrets.token_urlsafe(24),
                    "token": "CAIS%d.%s" % (n, secrets.token_urlsafe(32)),
                    # Whole seconds, as STS writes Expiration.
                    "expires": int(time.time() + life),
                    "requests": 0,
                    "first_use": None,
                    "last_use": None,
                }
                KEYS[key_id] = key
                call["key"] = key_id
                doc = {
                    "RequestId": request_id,
                    "AssumedRoleUser": {"Arn": call["role_arn"], "AssumedRoleId": "3001:" + call["session"]},
                    "Credentials": {
                        "AccessKeyId": key_id,
                        "AccessKeySecret": key["secret"],
                        "SecurityToken": key["token"],
                        "Expiration": iso(key["expires"]),
                    },
                }
                status = 200
        self.answer(status, doc)

    do_GET = do_POST = handle_any


class Sts:
    """The STS listener: open on one port, closed and opened again on the same port."""

    def __init__(self):
        self.server = None
        self.port = 0

    def open(self):
        # HTTPServer sets SO_REUSEADDR: the port can be bound again at once.
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), StsHandler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, spec):
        """Applies POST /__fake/sts: the mode (opening or closing the port), lives."""
        mode = spec.get("mode", STATE["mode"])
        if mode not in ("up", "refuse", "closed"):
            raise ValueError("unknown STS mode %r" % mode)
        if mode == "closed" and self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        elif mode != "closed" and self.server is None:
            self.open()
        with LOCK:
            STATE["mode"] = mode
            if "life" in spec:
                STATE["life"] = int(spec["life"])
            if "lives" in spec:
                STATE["lives"] = [int(s) for s in spec["lives"]]


def issued(access_id):
    """The key this STS issued under `access_id` (a copy), or None."""
    with LOCK:
        key = KEYS.get(access_id)
        return dict(key) if key else None


def refusal(access_id, token):
    """Why MaxCompute refuses a request signed with issued key `access_id` carrying `token` (its
    code and message, counted), or None."""
    with LOCK:
        key = KEYS[access_id]
        if time.time() >= key["expires"]:
            STATE["expired_refusals"] += 1
            return ("AuthenticationRequestExpired",
                    "the temporary access key %s expired at %s" % (access_id, iso(key["expires"])))
        if token != key["token"]:
            STATE["token_refusals"] += 1
            return ("InvalidSecurityToken.MismatchWithAccessKey",
                    "the authorization-sts-token header is not the token of %s" % access_id)
    return None


def used(access_id):
    """Counts a request MaxCompute accepted, signed with issued key `access_id`."""
    with LOCK:
        key = KEYS[access_id]
        now = time.time()
        key["requests"] += 1
        key["first_use"] = key["first_use"] or now
        key["last_use"] = now


def dump():
    with LOCK:
        return json.dumps({
            "mode": STATE["mode"],
            "calls": STATE["calls"],
            "keys": KEYS,
            "expired_refusals": STATE["expired_refusals"],
            "token_refusals": STATE["token_refusals"],
        })
