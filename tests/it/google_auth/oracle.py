"""The google-auth oracle: refreshes each credentials file of a spec the way Google's own Python
library does, against the test's fake endpoints, so the test can compare the requests it sent
with ours.

    python oracle.py keygen            print a fresh PKCS#8 RSA key (PEM) for service-account files
    python oracle.py SPEC.json         refresh every case; print {"tokens": [...]} as JSON

SPEC: {"scope": "...", "cases": [{"file": path} | {"metadata": true}]}. For the metadata case
the environment (GCE_METADATA_HOST, GCE_METADATA_IP, CLOUDSDK_CONFIG, GOOGLE_CLOUD_QUOTA_PROJECT)
is the caller's. A case with "api": URL also GETs that URL through google-auth's
AuthorizedSession, which puts the credentials' headers on it (`Credentials.before_request`).
"""

import json
import os
import sys

if sys.argv[1] == "keygen":
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sys.stdout.write(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    )
    sys.exit(0)

import google.auth
import google.auth.transport.requests
from google.auth import impersonated_credentials

spec = json.load(open(sys.argv[1]))
request = google.auth.transport.requests.Request()
tokens = []
for case in spec["cases"]:
    if "file" in case:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = case["file"]
    else:
        os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    creds, _ = google.auth.default(scopes=[spec["scope"]])
    info = json.load(open(case["file"])) if "file" in case else {}
    # google-auth ignores two endpoints a file names: an authorized_user's `token_uri` (it
    # always uses oauth2.googleapis.com) and an impersonated_service_account's URL (it rebuilds
    # it from the target principal on iamcredentials.googleapis.com). The publisher uses both
    # as the file gives them (as google-auth itself does for external_account files, and as
    # Google's Rust library does), so point google-auth at the same fake endpoints.
    if isinstance(creds, impersonated_credentials.Credentials):
        creds._iam_endpoint_override = info["service_account_impersonation_url"]
        if info["source_credentials"]["type"] == "authorized_user":
            creds._source_credentials._token_uri = info["source_credentials"]["token_uri"]
    elif info.get("type") == "authorized_user":
        creds._token_uri = info["token_uri"]
    if "api" in case:
        google.auth.transport.requests.AuthorizedSession(creds).get(case["api"])
    else:
        creds.refresh(request)
    tokens.append(creds.token)
print(json.dumps({"tokens": tokens}))
