"""Secrets of local runs on the moto server, and two faults on them: a pass key rotated
mid-sale, and a secret that cannot be read (docs/local.md).

Local functions read the pass key ring from Secrets Manager, as in AWS, when the env-vars
file names one (``PASS_KEYS_SECRET_ARN``: a secret's name serves as its ARN) and the
runner points them at the moto server (``AWS_ENDPOINT_URL_SECRETS_MANAGER``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import boto3

from seckill.passes import KeyRing
from seckill_local.sqs import LOCAL_AWS, local_region


def client(endpoint: str) -> Any:
    return boto3.client(
        "secretsmanager",
        endpoint_url=endpoint,
        region_name=local_region(),
        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
    )


def ensure_secret(endpoint: str, name: str, value: str) -> str:
    """The secret ``name`` with this value, made if missing (an existing one keeps its
    own); its name, which serves as its ARN."""
    with contextlib.suppress(client(endpoint).exceptions.ResourceExistsException):
        client(endpoint).create_secret(Name=name, SecretString=value)
    return name


def rotate(endpoint: str, name: str, kid: str) -> KeyRing:
    """An operator's rotation, in one put: a fresh key ``kid`` added to the ring and made
    active, the others kept. The ring put."""
    manager = client(endpoint)
    ring = KeyRing.from_json(manager.get_secret_value(SecretId=name)["SecretString"])
    rotated = KeyRing(kid, {**ring.keys, kid: os.urandom(32)})
    manager.put_secret_value(SecretId=name, SecretString=rotated.to_json())
    return rotated


@contextlib.contextmanager
def unreadable(endpoint: str, name: str) -> Iterator[None]:
    """Every read of the secret fails while inside (it is marked for deletion, as
    Secrets Manager refuses to read such a secret), then it is restored as it was."""
    manager = client(endpoint)
    manager.delete_secret(SecretId=name, RecoveryWindowInDays=7)
    try:
        yield
    finally:
        manager.restore_secret(SecretId=name)
