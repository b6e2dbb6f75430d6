"""SigV4 signatures checked as AWS checks them, against the local credentials.

The signature is computed again with botocore's own signer from the request as
received (method, path, query, the headers the client says it signed, the body)
and the secret key of the local credentials, and compared with the one the
client sent. Like API Gateway, a request is refused when the header is missing
or malformed, names another access key, another service or another region than
the endpoint's, was signed more than five minutes away from now, or its
signature differs (a changed body or header, a wrong secret).
"""

from __future__ import annotations

import hmac
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import sha256

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from seckill_local.sqs import LOCAL_AWS

MAX_SKEW = timedelta(minutes=5)
AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/(?P<service>[^/,\s]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<signature>[0-9a-f]{64})"
)


def local_credentials() -> Credentials:
    """What a local endpoint accepts: the environment's access key, else LOCAL_AWS's."""
    return Credentials(
        os.environ.get("AWS_ACCESS_KEY_ID") or LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        os.environ.get("AWS_SECRET_ACCESS_KEY") or LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
    )


@dataclass(frozen=True)
class Verifier:
    credentials: Credentials
    service: str  # "execute-api", "lambda"
    region: str  # the endpoint's: a signature scoped to any other does not verify

    def caller(
        self, method: str, target: str, headers: dict[str, str], body: bytes, now: datetime | None = None
    ) -> str | None:
        """The access key that signed this request (headers with lower-case names), or
        None when the signature is missing or does not verify."""
        found = AUTHORIZATION.fullmatch(headers.get("authorization", "").strip())
        if found is None or found["service"] != self.service or found["region"] != self.region:
            return None
        if found["key"] != self.credentials.access_key:
            return None
        signed = found["signed"].split(";")
        stamp = headers.get("x-amz-date", "")
        if "host" not in signed or "x-amz-date" not in signed or not stamp.startswith(found["date"]):
            return None
        try:
            at = datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
        except ValueError:
            return None
        if abs((now or datetime.now(UTC)) - at) > MAX_SKEW:
            return None
        if any(name not in headers for name in signed):
            return None
        claimed_hash = headers.get("x-amz-content-sha256")
        if claimed_hash is not None and claimed_hash != sha256(body).hexdigest():
            return None
        request = AWSRequest(
            method=method,
            url=f"http://{headers['host']}{target}",
            data=body,
            headers={name: headers[name] for name in signed},
        )
        request.context["timestamp"] = stamp
        signer = SigV4Auth(self.credentials, self.service, self.region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        return found["key"] if hmac.compare_digest(expected, found["signature"]) else None
