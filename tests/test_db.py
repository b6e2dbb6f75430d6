"""The MySQL connection survives idle periods (a frozen Lambda container, a closed idle connection)."""

from __future__ import annotations

import pymysql
import pytest

from seckill import db as db_module
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
