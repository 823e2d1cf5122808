"""Alibaba's credentials SDK (alibabacloud-credentials) as the oracle of tests/it/maxcompute/creds.rs
(run with `scripts/odps-oracle python creds`). The variables the SDK reads (ALIBABA_CLOUD_ROLE_ARN,
ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE, ALIBABA_CLOUD_ROLE_SESSION_NAME,
ALIBABA_CLOUD_ECS_METADATA, ALIBABA_CLOUD_IMDSV1_DISABLED) come from the test.

    python creds_oracle.py rrsa URL   OIDCRoleArnCredentialsProvider with sts_endpoint URL
    python creds_oracle.py ecs URL    EcsRamRoleCredentialsProvider against the metadata server URL

Prints the key obtained as JSON. The SDK's own code sends every request: only the ECS provider's
metadata host (a private attribute, 100.100.100.200 in the SDK) is pointed at the fake, which the
SDK's URL composition reaches as given (a host starting with http:// keeps its scheme).
"""

import json
import sys

from alibabacloud_credentials.provider.ecs_ram_role import EcsRamRoleCredentialsProvider
from alibabacloud_credentials.provider.oidc import OIDCRoleArnCredentialsProvider


def main():
    mode, url = sys.argv[1], sys.argv[2]
    if mode == "rrsa":
        provider = OIDCRoleArnCredentialsProvider(sts_endpoint=url)
    elif mode == "ecs":
        provider = EcsRamRoleCredentialsProvider(async_update_enabled=False)
        provider._EcsRamRoleCredentialsProvider__metadata_service_host = url
    else:
        raise SystemExit("usage: creds_oracle.py rrsa|ecs URL")
    c = provider.get_credentials()
    print(
        json.dumps(
            {
                "id": c.get_access_key_id(),
                "secret": c.get_access_key_secret(),
                "token": c.get_security_token(),
                "expiration": c.get_expiration(),
            }
        )
    )


main()
