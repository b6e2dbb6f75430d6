"""The MySQL connection survives being closed under it (a frozen Lambda container, KILL, a failover)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pymysql
import pytest

from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database, connect, is_connection_error
from tests.helpers import closed_port


def kill(creds: Credentials, thread_id: int) -> None:
    admin = connect(creds)
    with admin.cursor() as cursor:
        cursor.execute(f"KILL CONNECTION {int(thread_id)}")
    admin.close()


@pytest.fixture
def table(creds: Credentials) -> Iterator[str]:
    """A scratch table of the test's own."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = connect(creds)
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY)")
    yield name
    with admin.cursor() as cursor:
        cursor.execute(f"DROP TABLE {name}")
    admin.close()


def rows(creds: Credentials, table: str) -> list[int]:
    admin = connect(creds)
    with admin.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} ORDER BY id")
        found = [int(r["id"]) for r in cursor.fetchall()]
    admin.close()
    return found


@pytest.mark.parametrize("read_only", [True, False])
def test_a_killed_connection_is_replaced_and_the_work_run_again(creds: Credentials, read_only: bool) -> None:
    """The connection died while the container was frozen: the first statement finds out,
    nothing had been sent for COMMIT, so a read or a write alike runs again on a new one."""
    database = Database(creds)
    first = database.connection()
    kill(creds, first.thread_id())
    calls: list[int] = []

    def work(cursor: Any) -> int:
        calls.append(1)
        cursor.execute("SELECT CONNECTION_ID() AS id")
        return int(cursor.fetchone()["id"])

    assert database.run(work, read_only=read_only) != first.thread_id()
    assert len(calls) == 2
    assert database.connection() is not first
    database.close()


def test_a_write_retried_after_a_killed_connection_is_written_once(creds: Credentials, table: str) -> None:
    database = Database(creds)
    kill(creds, database.connection().thread_id())

    def insert(cursor: Any) -> None:
        cursor.execute(f"INSERT INTO {table} (id) VALUES (1)")

    database.run(insert)
    assert rows(creds, table) == [1]
    database.close()


def test_a_write_whose_commit_was_lost_is_not_retried(creds: Credentials, table: str) -> None:
    """Once COMMIT may have been sent the outcome is unknown: the error reaches the caller."""
    database = Database(creds)
    calls: list[int] = []

    def insert_then_lose_the_connection(cursor: Any) -> None:
        calls.append(1)
        cursor.execute(f"INSERT INTO {table} (id) VALUES (%s)", (len(calls),))
        kill(creds, database.connection().thread_id())  # gone before COMMIT reaches the server

    with pytest.raises(pymysql.err.OperationalError) as lost:
        database.run(insert_then_lose_the_connection)
    assert is_connection_error(lost.value)
    assert calls == [1]
    assert rows(creds, table) == []  # here it was not committed; the caller could not know that

    # A read may always run again: the same loss at COMMIT is absorbed.
    def read_then_lose_the_connection(cursor: Any) -> int:
        calls.append(1)
        cursor.execute("SELECT CONNECTION_ID() AS id")
        thread_id = int(cursor.fetchone()["id"])
        if len(calls) == 2:
            kill(creds, thread_id)
        return thread_id

    database.run(read_then_lose_the_connection, read_only=True)
    assert len(calls) == 3
    database.close()


def test_mysql_down_fails_at_once_without_a_second_try(creds: Credentials) -> None:
    database = Database(Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database))
    calls: list[int] = []
    with pytest.raises(pymysql.err.OperationalError) as down:
        database.run(lambda cursor: calls.append(1), read_only=True)
    assert is_connection_error(down.value)
    assert calls == []


def test_an_error_in_the_statement_is_not_a_connection_error(creds: Credentials) -> None:
    database = Database(creds)
    calls: list[int] = []

    def broken(cursor: Any) -> None:
        calls.append(1)
        cursor.execute("SELECT * FROM no_such_table")

    with pytest.raises(pymysql.err.ProgrammingError) as broke:
        database.run(broken, read_only=True)
    assert not is_connection_error(broke.value)
    assert calls == [1]
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

        def who(cursor: Any) -> str:
            cursor.execute("SELECT CURRENT_USER() AS who")
            return str(cursor.fetchone()["who"])

        assert database.run(who, read_only=True).startswith(f"{creds.user}@")
    finally:
        database.close()
        secrets_manager.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
