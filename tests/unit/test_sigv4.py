"""The local runner's SigV4 check (``seckill_local.sigv4``) against botocore's own
signatures: what was signed verifies, and any change to it does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.credentials import Credentials as AwsCredentials

from seckill_local.api import LocalHttpApi
from seckill_local.lambda_api import LocalLambdaApi
from seckill_local.sigv4 import Verifier
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import TEMPLATE, Template
from tests.helpers import signed


def test_sigv4_verifier_accepts_botocores_signature_and_nothing_changed() -> None:
    verifier = Verifier(AwsCredentials("AKIDLOCAL", "local-secret"), "execute-api", "us-east-1")
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
    other_service = Verifier(AwsCredentials("AKIDLOCAL", "local-secret"), "lambda", "us-east-1")
    assert other_service.caller("POST", target, headers, body) is None
    for key, secret in (("AKIDLOCAL", "wrong-secret"), ("AKIDOTHER", "local-secret")):
        forged = {k.lower(): v for k, v in signed("POST", url, body, {"content-type": "application/json"}, key=key,
                                                  secret=secret).items()}  # fmt: skip
        assert verifier.caller("POST", target, forged, body) is None


def test_sigv4_verifier_refuses_a_signature_scoped_to_another_region() -> None:
    """API Gateway checks a signature against its own region: a valid signature for another
    region, or for a made-up one, does not verify."""
    verifier = Verifier(AwsCredentials("AKIDLOCAL", "local-secret"), "execute-api", "eu-west-1")
    url, body = "http://127.0.0.1:3000/voucher/seckill", b"{}"
    for region, caller in (("eu-west-1", "AKIDLOCAL"), ("us-east-1", None), ("xx-nowhere-9", None)):
        headers = signed("POST", url, body, key="AKIDLOCAL", secret="local-secret", region=region)
        assert verifier.caller("POST", "/voucher/seckill", {k.lower(): v for k, v in headers.items()}, body) == caller


def test_the_local_endpoints_verify_signatures_for_the_configured_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """One region for every local endpoint: the environment's AWS_DEFAULT_REGION (what boto3
    signs for), else the local default."""
    template = Template.load(TEMPLATE)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert LocalHttpApi(template, {}).verifier.region == "eu-west-1"
    assert LocalLambdaApi([], lambda name: pytest.fail(f"no pool is made: {name}")).verifier.region == "eu-west-1"
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert LocalHttpApi(template, {}).verifier.region == LOCAL_AWS["AWS_DEFAULT_REGION"]
