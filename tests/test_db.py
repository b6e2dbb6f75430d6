"""The MySQL connection survives idle periods (a frozen Lambda container, a closed idle connection)."""

from __future__ import annotations

import json
import uuid

import boto3
import pymysql
import pytest

from seckill import db as db_module
from seckill.config import Settings
from seckill.db import Credentials, Database, connect


def kill(creds: Credentials, thread_id: int) -> None:
    admin = connect(creds)
    with admin.cursor() as cursor:
        cursor.execute(f"KILL CONNECTION {int(thread_id)}")
    admin.close()


def test_a_connection_closed_while_idle_is_replaced(creds: Credentials, monkeypatch: pytest.MonkeyPatch) -> None:
    database = Database(creds)
    first = database.connection()
    kill(creds, first.thread_id())
    monkeypatch.setattr(db_module, "IDLE_PING_SECONDS", -1.0)  # every use counts as after an idle period
    with database.transaction() as cursor:
        cursor.execute("SELECT 1 AS one")
        assert cursor.fetchone() == {"one": 1}
    assert database.connection() is not first
    database.close()


def test_a_connection_lost_mid_use_fails_that_transaction_then_recovers(creds: Credentials) -> None:
    """Between pings a dead connection fails the work in hand (SQS retries it); the next use reconnects."""
    database = Database(creds)
    kill(creds, database.connection().thread_id())
    with pytest.raises(pymysql.err.OperationalError), database.transaction() as cursor:
        cursor.execute("SELECT 1")
    with database.transaction() as cursor:
        cursor.execute("SELECT 1 AS one")
        assert cursor.fetchone() == {"one": 1}
    database.close()


def test_credentials_come_from_secrets_manager_when_first_needed(
    creds: Credentials, sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DB_SECRET_ARN (as in AWS, here on the moto server): the secret is read when the first
    connection is made, not when the handler module is imported."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sqs_endpoint)
    name = f"seckill-test-{uuid.uuid4().hex}"
    secrets_manager = boto3.client("secretsmanager", endpoint_url=sqs_endpoint)
    # A secret's name serves where its ARN does (the ARN's suffix is only known once it exists).
    env = {"DB_HOST": creds.host, "DB_PORT": str(creds.port), "DB_NAME": creds.database, "DB_SECRET_ARN": name}
    settings = Settings.from_env({**env, "DB_TLS": "false"})
    database = Database.from_settings(settings)  # the secret does not exist yet: nothing is read
    secrets_manager.create_secret(
        Name=name, SecretString=json.dumps({"username": creds.user, "password": creds.password})
    )
    try:
        with database.transaction() as cursor:
            cursor.execute("SELECT CURRENT_USER() AS who")
            assert cursor.fetchone()["who"].startswith(f"{creds.user}@")
    finally:
        database.close()
        secrets_manager.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
