"""Redis AUTH from Secrets Manager: with REDIS_AUTH_SECRET_ARN (as in AWS, where
ElastiCache requires the token) the client logs in with the secret's plain string.

A redis-server of the suite's own with ``--requirepass`` is started on a free
port; the secret lives on the suite's moto server.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from redis.exceptions import AuthenticationError

from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from tests.helpers import redis_server

TOKEN = secrets.token_urlsafe(48)


@pytest.fixture(scope="module")
def protected_url() -> Iterator[str]:
    """A Redis that answers only clients presenting TOKEN."""
    with redis_server("--requirepass", TOKEN, password=TOKEN) as url:
        yield url


@pytest.fixture
def secret(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Names a secret on the moto server (a secret's name serves where its ARN does):
    stored now with a value, or later by the caller. Deleted afterwards."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sqs_endpoint)
    client: Any = boto3.client("secretsmanager", endpoint_url=sqs_endpoint)
    made: list[str] = []

    def make(**value: Any) -> str:
        name = f"seckill-redis-auth-{uuid.uuid4().hex}"
        made.append(name)
        if value:
            client.create_secret(Name=name, **value)
        return name

    yield make
    for name in made:
        client.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)


def client_for(url: str, secret_name: str | None) -> Any:
    env = {"REDIS_URL": url} | ({"REDIS_AUTH_SECRET_ARN": secret_name} if secret_name else {})
    return redis_client(Settings.from_env(env))


def test_the_client_logs_in_with_the_token_from_the_secret(protected_url: str, secret: Callable[..., str]) -> None:
    name = secret()
    client = client_for(protected_url, name)
    # Nothing is read before the first command: the secret may even be created afterwards.
    boto3.client("secretsmanager").create_secret(Name=name, SecretString=TOKEN)
    assert client.ping() is True
    assert client.set("auth-check", "1") is True
    assert client.get("auth-check") == "1"
    client.close()


def test_a_wrong_token_is_refused(protected_url: str, secret: Callable[..., str]) -> None:
    client = client_for(protected_url, secret(SecretString=secrets.token_urlsafe(48)))
    with pytest.raises(AuthenticationError):
        client.ping()


def test_without_the_variable_no_password_is_sent(protected_url: str) -> None:
    """As locally, where REDIS_AUTH_SECRET_ARN is unset: a protected Redis refuses the commands."""
    with pytest.raises(AuthenticationError):
        client_for(protected_url, None).ping()


def test_the_token_must_be_a_plain_string_secret(protected_url: str, secret: Callable[..., str]) -> None:
    client = client_for(protected_url, secret(SecretBinary=TOKEN.encode()))
    with pytest.raises(TypeError, match="plain string"):
        client.ping()


def test_a_failed_refresh_of_the_token_keeps_the_last_good_one(protected_url: str, secret: Callable[..., str]) -> None:
    """A new connection after the cache's max age, while Secrets Manager fails, still logs in."""
    name = secret(SecretString=TOKEN)
    client = client_for(protected_url, name)
    assert client.ping() is True
    secrets_manager: Any = boto3.client("secretsmanager")
    secrets_manager.delete_secret(SecretId=name, RecoveryWindowInDays=7)  # every read now fails
    parameters.clear_caches()
    client.connection_pool.disconnect()  # the next command opens a connection, asking for the token
    try:
        assert client.ping() is True
    finally:
        secrets_manager.restore_secret(SecretId=name)
        client.close()
