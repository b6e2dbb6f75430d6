"""The draw passes' key ring in AWS (seckill.passes): the deployment gives the secret its
first ring and never rotates one, and the functions read it from Secrets Manager
(moto's Secrets Manager in process: no local equivalent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from seckill import passes
from seckill.passes import KeyRing
from seckill_local.lambdas import DEV_PASS_KEYS
from tests.helpers import load_event


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def test_the_placeholder_becomes_a_ring_once_and_a_ring_is_left_alone(secretsmanager: Any) -> None:
    arn = secretsmanager.create_secret(Name="pass-keys", SecretString="RandomPlaceholder0123456789abcdef")["ARN"]
    assert passes.ensure_ring(secretsmanager, arn)
    ring = KeyRing.from_json(secretsmanager.get_secret_value(SecretId=arn)["SecretString"])
    assert len(ring.keys[ring.active]) == 32
    assert not passes.ensure_ring(secretsmanager, arn)
    assert KeyRing.from_json(secretsmanager.get_secret_value(SecretId=arn)["SecretString"]) == ring
    # The functions read it from the secret, not from the local variable.
    env = {"PASS_KEYS_SECRET_ARN": arn, "SECKILL_PASS_KEYS": DEV_PASS_KEYS, "AWS_DEFAULT_REGION": "us-east-1"}
    assert passes.load_ring(env) == ring


def test_local_runs_share_one_public_development_ring() -> None:
    for name in ("env.json", "env.docker.json"):
        assert load_event(name)["Parameters"]["SECKILL_PASS_KEYS"] == DEV_PASS_KEYS
    assert KeyRing.from_json(DEV_PASS_KEYS).active == "dev"
