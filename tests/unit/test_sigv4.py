"""The local runner's SigV4 check (``seckill_local.sigv4``) against botocore's own
signatures: what was signed verifies, and any change to it does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from botocore.credentials import Credentials as AwsCredentials

from seckill_local.sigv4 import Verifier
from tests.helpers import signed


def test_sigv4_verifier_accepts_botocores_signature_and_nothing_changed() -> None:
    verifier = Verifier(AwsCredentials("AKIDLOCAL", "local-secret"), "execute-api")
    url, body = "http://127.0.0.1:3000/voucher/seckill/7/stop?dry=1&a=b", b'{"x": 1}'
    good = signed("POST", url, body, {"content-type": "application/json"}, key="AKIDLOCAL", secret="local-secret")
    headers = {k.lower(): v for k, v in good.items()}
    target = "/voucher/seckill/7/stop?dry=1&a=b"

    assert verifier.caller("POST", target, headers, body) == "AKIDLOCAL"
    assert verifier.caller("POST", target, headers, b'{"x": 2}') is None  # the body
    assert verifier.caller("PUT", target, headers, body) is None  # the method
    assert verifier.caller("POST", "/voucher/seckill/8/stop?dry=1&a=b", headers, body) is None  # the path
    assert verifier.caller("POST", "/voucher/seckill/7/stop?dry=2&a=b", headers, body) is None  # the query
    assert verifier.caller("POST", target, headers | {"content-type": "text/plain"}, body) is None  # a signed header
    assert verifier.caller("POST", target, headers | {"x-unsigned": "1"}, body) == "AKIDLOCAL"  # not signed: free
    assert verifier.caller("POST", target, {k: v for k, v in headers.items() if k != "x-amz-date"}, body) is None
    assert verifier.caller("POST", target, headers | {"x-amz-content-sha256": "0" * 64}, body) is None
    later = datetime.now(UTC) + timedelta(minutes=6)
    assert verifier.caller("POST", target, headers, body, now=later) is None  # signed too long ago
    assert Verifier(AwsCredentials("AKIDLOCAL", "local-secret"), "lambda").caller("POST", target, headers, body) is None
    for key, secret in (("AKIDLOCAL", "wrong-secret"), ("AKIDOTHER", "local-secret")):
        forged = {k.lower(): v for k, v in signed("POST", url, body, {"content-type": "application/json"}, key=key,
                                                  secret=secret).items()}  # fmt: skip
        assert verifier.caller("POST", target, forged, body) is None
