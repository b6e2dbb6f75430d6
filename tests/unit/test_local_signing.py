"""How a local container signs AWS requests: as on Lambda, whose Python runtime
brings boto3 without awscrt, unless the function ships awscrt itself."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from botocore import auth
from seckill_local.lambdas import sign_as_deployed
from seckill_local.template import Template
sign_as_deployed(Template.load().functions[sys.argv[1]])
print(json.dumps({k: auth.AUTH_TYPE_MAPS[k].__name__ for k in ("v4", "s3v4", "v4a")}))
"""


def signers(logical_id: str) -> dict[str, str]:
    """In a fresh interpreter: botocore's choice is process-wide."""
    run = subprocess.run(  # noqa: S603 (our own probe, this interpreter)
        [sys.executable, "-c", PROBE, logical_id], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(run.stdout)


@pytest.mark.parametrize("logical_id", ["SeckillApiFunction", "OrderPersisterFunction", "ReconcilerFunction"])
def test_a_function_without_awscrt_signs_sigv4_in_python(logical_id: str) -> None:
    # awscrt is installed here (the publisher's tests need it), so botocore's default is CRT.
    assert signers(logical_id) == {"v4": "SigV4Auth", "s3v4": "S3SigV4Auth", "v4a": "CrtSigV4AsymAuth"}


def test_the_publisher_keeps_the_crt_signers_it_ships() -> None:
    assert signers("EdgePublisherFunction") == {
        "v4": "CrtSigV4Auth",
        "s3v4": "CrtS3SigV4Auth",
        "v4a": "CrtSigV4AsymAuth",
    }
